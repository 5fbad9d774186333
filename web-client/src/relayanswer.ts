// A notification's Allow once / Deny at a relay's address, answered by the service worker with
// the page closed (docs/WEB.md "Through the relay"): its own key exchange with the machine the
// push names, checking the key the page pinned; the relay login's access token (renewed if it
// is about to expire); the machine's device credential; then the page's own answer request as
// a sealed WebGatewayService/Fetch call. With the machine offline the answer is kept by the
// relay until it is back (answer.ts). What it needs the page left in IndexedDB.
import { answerSealed, QUEUED } from "./answer";
import { fromHex, pinKey, type PinStore } from "./e2e";
import { idbGet } from "./idb";
import { newer, REFRESH_AHEAD_MS, sharedTokens, shareTokens, tokensOf, type TokenReply, type Tokens } from "./relaytokens";
import { exchangeKeys, RelayTransport, Unreachable, type RelayLink } from "./transport";

/** The daemon's push message (docs/WEB.md "Notifications"); `machine_id` in a relayed one. */
export interface PushMessage {
  kind?: string;
  notification_id?: string;
  request_id?: string;
  session_id?: string;
  machine_id?: string;
  tool?: string;
  title?: string;
  body?: string;
}

/** What the answer came to: the daemon's reply (`status` 0: it never reached it), or
 * `queued`, said as it is shown, when the relay keeps it for the offline machine. */
export interface Answered {
  status: number;
  reply: { accepted?: boolean; duplicate?: boolean; outcome?: string; error?: { message?: string } };
  queued?: string;
}

class NotAnswerable extends Error {}

/** The relay login, renewed first when it expires within a minute (and kept for the page). */
async function freshTokens(): Promise<Tokens> {
  const tokens = await sharedTokens();
  if (!tokens) throw new NotAnswerable("signed out of the relay: open the app to sign in");
  if (tokens.expires_at - Date.now() > REFRESH_AHEAD_MS || !tokens.refresh_token) return tokens;
  let response: Response;
  try {
    response = await fetch("/relay/api/refresh", {
      method: "POST",
      credentials: "omit",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ refresh_token: tokens.refresh_token }),
    });
  } catch (failure) {
    throw new Unreachable("relay", (failure as Error).message);
  }
  const reply = (await response.json().catch(() => ({}))) as TokenReply & { error?: { message?: string } };
  if (!response.ok) throw new NotAnswerable(`the relay refused this login: ${reply.error?.message || response.status}`);
  // The page may have renewed it meanwhile: the later copy stays.
  const renewed = newer(tokensOf(reply, tokens), await sharedTokens()) ?? tokensOf(reply, tokens);
  await shareTokens(renewed);
  return renewed;
}

export async function answerThroughRelay(message: PushMessage, decision: string, clientId: string): Promise<Answered> {
  const machineId = message.machine_id ?? "";
  const requestId = message.request_id ?? "";
  try {
    const pinned = await idbGet<string>(pinKey(machineId));
    if (!pinned) throw new NotAnswerable(`open machine ${machineId} in the app first: its key is not pinned here`);
    const credential = (await idbGet<string>(`credential:${machineId}`)) ?? "";
    if (!credential) throw new NotAnswerable(`sign in to machine ${machineId} in the app first`);
    const tokens = await freshTokens();
    // The pinned key only: this worker never pins a key of its own.
    const pins: PinStore = { getItem: (key) => (key === pinKey(machineId) ? pinned : null), setItem: () => {} };
    const link: RelayLink = {
      origin: `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}`,
      machineId,
      clientId,
      token: () => tokens.access_token,
    };
    try {
      const rekey = async () => (await exchangeKeys(link, pins)).session;
      const transport = new RelayTransport(link, await rekey(), rekey);
      const headers = { "content-type": "application/json", "x-betcode-client": clientId, authorization: `Bearer ${credential}` };
      const reply = await transport.request("POST", `/api/permissions/${encodeURIComponent(requestId)}`, headers, JSON.stringify({ decision }));
      return { status: reply.status, reply: JSON.parse(reply.body || "{}") as Answered["reply"] };
    } catch (failure) {
      if (!(failure instanceof Unreachable && failure.place === "machine")) throw failure;
      const sealed = await answerSealed(link, fromHex(pinned), requestId, { decision });
      if (sealed.queued) return { status: 0, reply: {}, queued: QUEUED };
      return { status: 200, reply: sealed };
    }
  } catch (failure) {
    return { status: 0, reply: { error: { message: (failure as Error).message } } };
  }
}
