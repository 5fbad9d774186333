// Pairing a phone through the relay (docs/RELAY.md "Pairing a phone through the relay"): the QR
// code of `betcode web pair` on a machine registered with a relay opens the relay's address with
// `#pair=TICKET.CODE&machine=ID&key=KEY` (a fragment: no server sees it). The page trades the
// relay's ticket for a device login of the machine's owner (`POST /relay/api/pair`), pins the
// machine's key from the QR code BEFORE the key exchange (the QR code, read off the machine's
// own screen, is the trust anchor: a machine presenting another key is refused), then trades the
// daemon's code for its device credential (`POST /api/devices/pair`, sealed, through the
// machine's web gateway). No password is typed on the phone. The typed form, `ABCDE-FGHJK-1234-
// 5678`, carries no key: the key of the first exchange is pinned, its fingerprint shown.
// Pairing is all or nothing: when a step after the relay's login fails (the daemon refuses a
// used or expired code, a changed key, the machine away), the page revokes that login itself, so
// no half-paired phone stays listed at the relay, and says why (`NotPaired`).
import { fromHex, trust, type PinStore } from "./e2e";
import { exchangeKeys, RelayRefused, RelayTransport, type RelayLink } from "./transport";

const TICKET_LENGTH = 10;
const CODE_LENGTH = 8;
const SHORT_CODE = /^[0-9A-HJKMNP-TV-Z]+$/; // Crockford's base32, as the machine made it
const KEY = /^[0-9a-f]{64}$/;

export interface RelayPairing {
  ticket: string;
  code: string;
  machineId: string; // "" when typed: the relay's answer names it
  key: Uint8Array | null; // the machine's identity key, from the QR code
}

/** A short code as typed (any case, spaces or dashes, O for 0, I or L for 1), as it was made. */
function normalCode(typed: string): string {
  return typed.toUpperCase().replace(/[\s-]/g, "").replace(/O/g, "0").replace(/[IL]/g, "1");
}

function split(both: string): { ticket: string; code: string } | null {
  const normal = normalCode(both);
  if (normal.length !== TICKET_LENGTH + CODE_LENGTH || !SHORT_CODE.test(normal)) return null;
  return { ticket: normal.slice(0, TICKET_LENGTH), code: normal.slice(TICKET_LENGTH) };
}

/** The pairing in an address's fragment (`#pair=TICKET.CODE&machine=ID&key=KEY`); null when it
 * holds none, or a malformed one. */
export function readPairing(hash: string): RelayPairing | null {
  const fields = new URLSearchParams(hash.replace(/^#/, ""));
  const [ticket, code, ...rest] = (fields.get("pair") ?? "").split(".");
  const machineId = fields.get("machine") ?? "";
  const key = (fields.get("key") ?? "").toLowerCase();
  const parts = split(`${ticket ?? ""}${code ?? ""}`);
  if (!parts || rest.length || !machineId || (ticket ?? "").length !== TICKET_LENGTH || !KEY.test(key)) return null;
  return { ...parts, machineId, key: fromHex(key) };
}

/** The typed form (`ABCDE-FGHJK-1234-5678`); null when it is not one. */
export function readTypedPairing(typed: string): RelayPairing | null {
  const parts = split(typed);
  return parts && { ...parts, machineId: "", key: null };
}

/** What `POST /relay/api/pair` answers: the device login's tokens, for one machine. */
export interface DeviceLogin {
  access_token: string;
  refresh_token: string;
  expires_in_secs: number;
  user_id: string;
  machine_id: string;
  device_id: string;
}

/** The daemon's answer to `POST /api/devices/pair`: its device credential. */
export interface PairedDevice {
  device_id: string;
  name: string;
  credential: string;
}

export interface PairingWays {
  /** `POST /relay/api/pair {"ticket", "name"}` at the relay (RelayRefused when refused). */
  pairAtRelay(ticket: string, name: string): Promise<DeviceLogin>;
  /** `DELETE /relay/api/devices/{device_id}` with the login's own token, and the login
   * forgotten: a pairing that failed after the login leaves nothing behind. */
  revokeAtRelay(login: DeviceLogin): Promise<void>;
  /** The way to the machine with the login's tokens. */
  link(login: DeviceLogin): RelayLink;
  pins: PinStore;
  name: string; // this device's, in both lists of devices
}

export interface Paired {
  login: DeviceLogin;
  device: PairedDevice;
  transport: RelayTransport;
  fingerprint: string;
}

/** A pairing that failed after the relay's login: `cause` is why, `revoked` whether that login
 * was revoked (else it is listed at the relay until revoked there). */
export class NotPaired extends Error {
  constructor(
    readonly cause: Error,
    readonly revoked: boolean,
  ) {
    super(
      `${cause.message.replace(/\.$/, "")}; ${revoked ? "this phone's relay sign-in was removed" : "this phone's relay sign-in could not be removed: revoke it under Paired phones"}`,
    );
  }
}

/** The whole pairing: the relay's login, the key pinned, the daemon's credential. */
export async function pairThroughRelay(pairing: RelayPairing, ways: PairingWays): Promise<Paired> {
  const login = await ways.pairAtRelay(pairing.ticket, ways.name);
  try {
    return await pairWithMachine(pairing, login, ways);
  } catch (failure) {
    const revoked = await ways.revokeAtRelay(login).then(
      () => true,
      () => false,
    );
    throw new NotPaired(failure as Error, revoked);
  }
}

async function pairWithMachine(pairing: RelayPairing, login: DeviceLogin, ways: PairingWays): Promise<Paired> {
  if (pairing.machineId && login.machine_id !== pairing.machineId) {
    throw new RelayRefused(`the ticket is for machine ${login.machine_id}, not ${pairing.machineId}`, "INVALID_ARGUMENT");
  }
  if (pairing.key) trust(ways.pins, login.machine_id, pairing.key); // before the exchange
  const link = ways.link(login);
  const { session, fingerprint } = await exchangeKeys(link, ways.pins); // KeyChanged: refused
  const transport = new RelayTransport(link, session);
  const reply = await transport.request(
    "POST",
    "/api/devices/pair",
    { "content-type": "application/json" },
    JSON.stringify({ code: pairing.code, name: ways.name }),
  );
  let body: { error?: { code?: string; message?: string } } & Partial<PairedDevice> = {};
  try {
    body = JSON.parse(reply.body);
  } catch {
    // said below, with the status
  }
  if (reply.status !== 201 || !body.credential) {
    const error = body.error ?? {};
    const why = error.message || `answered ${reply.status}`;
    throw new RelayRefused(`the machine refused the code: ${why}`, error.code || String(reply.status));
  }
  return { login, device: body as PairedDevice, transport, fingerprint };
}
