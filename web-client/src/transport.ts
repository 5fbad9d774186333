// How the page reaches its daemon: on the daemon's own network (LAN: fetch and a WebSocket to
// the daemon's web listener), or through a relay (each request a WebGatewayService call to the
// machine, sealed here with the end-to-end scheme and carried by the relay front's call
// WebSocket; docs/WEB.md "Through the relay"). The rest of the page does not know which.
import { checkPinned, ClientHandshake, type ClientSession, type PinStore } from "./e2e";
import { decodeSocketFrame, decodeWebResponse, encodeSocketFrame, encodeWebRequest, FETCH, SOCKET } from "./gateway";
import { bytesOf, decodeMessage, encodeMessage } from "./proto";

/** Where the way to the daemon broke: said as the page shows it. */
export type Place = "daemon" | "relay" | "machine";
const UNREACHABLE: Record<Place, string> = {
  daemon: "daemon unreachable: this device is offline, or the daemon or the network between them is down",
  relay: "relay unreachable: this device is offline, or the relay or the network to it is down",
  machine: "machine offline: the relay answers, but the machine's daemon is not connected to it",
};

export class Unreachable extends Error {
  constructor(
    readonly place: Place,
    detail = "",
  ) {
    super(detail ? `${UNREACHABLE[place]} (${detail})` : UNREACHABLE[place]);
  }
}

/** The relay refused a call (its gRPC status name); `buffered`: the relay keeps the request
 * for the offline machine (its place), to run once the machine is back. */
export class RelayRefused extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly buffered = "",
  ) {
    super(message);
  }
}

export interface Reply {
  status: number;
  body: string;
}

/** A session's stream, whichever way it goes: text messages both ways. */
export interface StreamSocket {
  onopen: () => void;
  onmessage: (text: string) => void;
  /** `reason`: why, when the way broke (an Unreachable's message). */
  onclose: (code: number, reason: string) => void;
  readonly isOpen: boolean;
  send(text: string): void;
  close(): void;
}

export interface Transport {
  request(method: string, path: string, headers: Record<string, string>, body?: string): Promise<Reply>;
  /** `credential`: the device credential for the stream ("" for none). */
  socket(path: string, credential: string): StreamSocket;
}

// ---- on the daemon's own network ----

class LanSocket implements StreamSocket {
  onopen: () => void = () => {};
  onmessage: (text: string) => void = () => {};
  onclose: (code: number, reason: string) => void = () => {};
  private readonly socket: WebSocket;

  constructor(url: string, protocols: string[]) {
    this.socket = new WebSocket(url, protocols);
    this.socket.onopen = () => this.onopen();
    this.socket.onmessage = (message) => this.onmessage(String(message.data));
    // 1006: the connection broke (the daemon's own closes say why in their events).
    this.socket.onclose = (event) => this.onclose(event.code, event.code === 1006 ? UNREACHABLE.daemon : "");
  }

  get isOpen(): boolean {
    return this.socket.readyState === WebSocket.OPEN;
  }

  send(text: string): void {
    this.socket.send(text);
  }

  close(): void {
    this.socket.close();
  }
}

export const lanTransport: Transport = {
  async request(method, path, headers, body) {
    let response: Response;
    try {
      response = await fetch(path, { method, headers, body, credentials: "omit" });
    } catch (failure) {
      throw new Unreachable("daemon", (failure as Error).message);
    }
    return { status: response.status, body: await response.text() };
  },
  socket(path, credential) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    // A browser's WebSocket cannot send an Authorization header: the credential goes as a
    // subprotocol.
    const protocols = credential ? ["betcode", `bearer.${credential}`] : ["betcode"];
    return new LanSocket(`${scheme}://${location.host}${path}`, protocols);
  },
};

// ---- through a relay ----

/** The part of the browser's WebSocket a relay call uses (tests give their own). */
export interface CallSocket {
  binaryType: BinaryType;
  onopen: (() => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onerror: (() => void) | null;
  onclose: (() => void) | null;
  send(data: string | Uint8Array): void;
  close(): void;
}

/** A machine through a relay, as the page reaches it. */
export interface RelayLink {
  origin: string; // the relay front's WebSocket origin, `wss://host:port`
  machineId: string;
  clientId: string; // `web-...`: who answered, in the daemon's audit
  token: () => string; // the relay access token, current at each call
  onUnauthenticated?: () => void; // the relay refused the token (expired, revoked)
  openSocket?: (url: string, protocols: string[]) => CallSocket; // tests: no browser
}

interface CallStatus {
  code: string;
  message: string;
  buffered?: string;
}

const RELAY_GONE = "UNREACHABLE"; // the call's WebSocket ended without the relay's status

/** One call to the machine through the relay front's WebSocket
 * (`/relay/api/machines/{id}/call`): its first message the JSON head, then one binary message
 * per request message and `end` to half-close; back, one binary message per response message,
 * then the JSON status. The front carries the messages untouched. */
export class RelayCall {
  onopen: () => void = () => {};
  onanswer: (message: Uint8Array) => void = () => {};
  onend: (status: CallStatus) => void = () => {};
  private readonly socket: CallSocket;
  private pending: (string | Uint8Array)[] | null = []; // sent once the socket opens
  private ended = false;

  constructor(
    private readonly link: RelayLink,
    method: string,
    e2e: string,
  ) {
    const url = `${link.origin}/relay/api/machines/${encodeURIComponent(link.machineId)}/call`;
    this.send(JSON.stringify({ method, e2e, token: link.token(), client_id: link.clientId }));
    const open = link.openSocket ?? ((address, protocols) => new WebSocket(address, protocols) as unknown as CallSocket);
    this.socket = open(url, ["betcode"]);
    this.socket.binaryType = "arraybuffer";
    this.socket.onopen = () => {
      for (const message of this.pending ?? []) this.socket.send(message);
      this.pending = null;
      this.onopen();
    };
    this.socket.onmessage = (event) => {
      if (typeof event.data === "string") this.end(JSON.parse(event.data) as CallStatus);
      else this.onanswer(new Uint8Array(event.data as ArrayBuffer));
    };
    this.socket.onerror = this.socket.onclose = () => this.end({ code: RELAY_GONE, message: "" });
  }

  send(message: string | Uint8Array): void {
    if (this.ended) return;
    if (this.pending) this.pending.push(message);
    else this.socket.send(message);
  }

  /** Leaves the call (a stream's page went elsewhere); no status follows. */
  close(): void {
    this.ended = true;
    this.socket.close();
  }

  private end(status: CallStatus): void {
    if (this.ended) return;
    this.ended = true;
    this.socket.close();
    this.onend(status);
    if (status.code === "UNAUTHENTICATED") this.link.onUnauthenticated?.();
  }
}

/** The daemon no longer has the online session (it restarted): a new key exchange, then the
 * call again. Said by the daemon as UNAVAILABLE with this text (betcode/remote/e2e.py). */
export class SessionForgotten extends RelayRefused {}
const FORGOTTEN = "end-to-end session unknown to the daemon";

/** The failure a call's status stands for: the relay gone, the machine offline (the relay
 * answers UNAVAILABLE for a machine not connected), or the relay's refusal. */
export function callFailure(status: CallStatus): Error {
  if (status.code === RELAY_GONE) return new Unreachable("relay");
  if (status.code === "UNAVAILABLE" && status.message.includes(FORGOTTEN)) {
    return new SessionForgotten(status.message, status.code);
  }
  if (status.code === "UNAVAILABLE" && !status.buffered) return new Unreachable("machine", status.message);
  return new RelayRefused(`${status.code}: ${status.message}`, status.code, status.buffered);
}

function base64(bytes: Uint8Array): string {
  return btoa(Array.from(bytes, (b) => String.fromCharCode(b)).join(""));
}

function unbase64(text: string): Uint8Array {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

/** The same call as one POST (`/relay/api/machines/{id}/unary`), for a context without
 * WebSocket (a service worker may have none). */
async function unaryOverHttps(link: RelayLink, method: string, e2e: string, requests: Uint8Array[]): Promise<Uint8Array[]> {
  const origin = link.origin.replace(/^ws/, "http");
  const head = { method, e2e, token: link.token(), client_id: link.clientId, messages: requests.map(base64) };
  let response: Response;
  try {
    response = await fetch(`${origin}/relay/api/machines/${encodeURIComponent(link.machineId)}/unary`, {
      method: "POST",
      credentials: "omit",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(head),
    });
  } catch (failure) {
    throw new Unreachable("relay", (failure as Error).message);
  }
  if (response.headers.get("X-BetCode-Offline")) throw new Unreachable("relay");
  const reply = (await response.json().catch(() => ({}))) as CallStatus & { messages?: string[]; error?: { code: string; message: string } };
  const status: CallStatus = reply.error ?? { code: reply.code ?? RELAY_GONE, message: reply.message ?? "", buffered: reply.buffered };
  if (status.code === "UNAUTHENTICATED") link.onUnauthenticated?.();
  if (status.code !== "OK") throw callFailure(status);
  return (reply.messages ?? []).map(unbase64);
}

/** A call with its request messages all sent at once: its response messages. */
export function unaryCall(link: RelayLink, method: string, e2e: string, requests: Uint8Array[]): Promise<Uint8Array[]> {
  if (!link.openSocket && typeof WebSocket === "undefined") return unaryOverHttps(link, method, e2e, requests);
  return new Promise((resolve, reject) => {
    const call = new RelayCall(link, method, e2e);
    const answers: Uint8Array[] = [];
    call.onanswer = (message) => answers.push(message);
    call.onend = (status) => (status.code === "OK" ? resolve(answers) : reject(callFailure(status)));
    for (const message of requests) call.send(message);
    call.send("end");
  });
}

/** The machine's side of the end-to-end scheme, as a relay call uses it (e2e.ts's
 * ClientSession; tests give their own). */
export interface Sealing {
  nextCall(method: string): { header: string; cipher: { seal(plain: Uint8Array): Uint8Array; open(sealed: Uint8Array): Uint8Array } };
}

/** ExchangeKeys (plain protobuf: the relay sees public keys only): the machine's identity key
 * checked against the one pinned (KeyChanged: refused), and a forward-secret session. */
export async function exchangeKeys(link: RelayLink, pins: PinStore): Promise<{ session: ClientSession; fingerprint: string }> {
  const handshake = new ClientHandshake();
  const request = encodeMessage([
    [1, link.machineId],
    [4, handshake.publicKey],
  ]);
  const [answer] = await unaryCall(link, "betcode.v1.AgentService/ExchangeKeys", "", [request]);
  if (!answer) throw new RelayRefused("the machine did not answer the key exchange", "UNKNOWN");
  const fields = decodeMessage(answer);
  const identity = bytesOf(fields, 1);
  const fingerprint = checkPinned(pins, link.machineId, identity);
  return { session: handshake.complete(bytesOf(fields, 3), identity), fingerprint };
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const CLOSED_BROKEN = 1006; // as a browser says a connection that broke
const CLOSED_REFUSED = 1011;

/** A session stream as a WebGatewayService/Socket call: the `open` frame, then text frames
 * both ways, each sealed. */
class RelaySocket implements StreamSocket {
  onopen: () => void = () => {};
  onmessage: (text: string) => void = () => {};
  onclose: (code: number, reason: string) => void = () => {};
  isOpen = false;
  private closed = false;
  private call: RelayCall | null = null;
  private cipher: ReturnType<Sealing["nextCall"]>["cipher"] | null = null;

  /** `session`: a promise while a new key exchange is under way. `forgotten`: the daemon no
   * longer has `session` (the page's next connection uses a new one). */
  constructor(
    private readonly link: RelayLink,
    session: Sealing | Promise<Sealing>,
    private readonly path: string,
    private readonly credential: string,
    private readonly forgotten: (stale: Sealing) => void,
  ) {
    if (session instanceof Promise) {
      session.then(
        (fresh) => this.start(fresh),
        (failure: Error) => this.finish(CLOSED_REFUSED, failure.message),
      );
    } else {
      this.start(session);
    }
  }

  private start(session: Sealing): void {
    if (this.closed) return;
    const { header, cipher } = session.nextCall(SOCKET);
    this.cipher = cipher;
    const call = new RelayCall(this.link, SOCKET, header);
    this.call = call;
    const headers: Record<string, string> = { "x-betcode-client": this.link.clientId };
    if (this.credential) headers.authorization = `Bearer ${this.credential}`;
    call.send(cipher.seal(encodeSocketFrame({ open: { path: this.path, headers, protocols: ["betcode"] } })));
    call.onanswer = (sealed) => {
      let frame;
      try {
        frame = decodeSocketFrame(cipher.open(sealed));
      } catch (failure) {
        return this.finish(CLOSED_REFUSED, (failure as Error).message);
      }
      // Open once the daemon's stream answers (it sends the events after `from` at once): the
      // relay's WebSocket alone says nothing of the machine.
      if (frame && "text" in frame && !this.isOpen) {
        this.isOpen = true;
        this.onopen();
      }
      if (frame && "text" in frame) this.onmessage(frame.text);
      else if (frame && "close" in frame) this.finish(frame.close.code, frame.close.reason);
    };
    call.onend = (status) => {
      if (status.code === "OK") return this.finish(1000, "");
      const failure = callFailure(status);
      if (failure instanceof SessionForgotten) this.forgotten(session);
      const broken = failure instanceof Unreachable || failure instanceof SessionForgotten;
      this.finish(broken ? CLOSED_BROKEN : CLOSED_REFUSED, failure.message);
    };
  }

  send(text: string): void {
    if (this.isOpen && this.call && this.cipher) this.call.send(this.cipher.seal(encodeSocketFrame({ text })));
  }

  close(): void {
    this.closed = true;
    this.isOpen = false;
    this.call?.close();
  }

  private finish(code: number, reason: string): void {
    if (this.closed) return;
    this.close();
    this.onclose(code, reason);
  }
}

export class RelayTransport implements Transport {
  private renewing: Promise<Sealing> | null = null;

  /** `rekey`: a new online session with the machine (by default a key exchange checked against
   * the key pinned in the page's storage). */
  constructor(
    readonly link: RelayLink,
    private session: Sealing,
    private readonly rekey: () => Promise<Sealing> = async () => (await exchangeKeys(link, localStorage)).session,
  ) {}

  /** A new session in place of `stale`, one key exchange for every call that found it
   * forgotten. */
  private renew(stale: Sealing): Promise<Sealing> {
    if (stale !== this.session) return Promise.resolve(this.session);
    this.renewing ??= this.rekey()
      .then((fresh) => (this.session = fresh))
      .finally(() => (this.renewing = null));
    return this.renewing;
  }

  request(method: string, path: string, headers: Record<string, string>, body?: string): Promise<Reply> {
    const attempt = (session: Sealing) => this.attempt(session, method, path, headers, body);
    return this.renewing ? this.renewing.then(attempt) : attempt(this.session);
  }

  private async attempt(session: Sealing, method: string, path: string, headers: Record<string, string>, body?: string): Promise<Reply> {
    try {
      return await this.fetch(session, method, path, headers, body);
    } catch (failure) {
      if (!(failure instanceof SessionForgotten)) throw failure;
      return this.fetch(await this.renew(session), method, path, headers, body); // once
    }
  }

  private async fetch(session: Sealing, method: string, path: string, headers: Record<string, string>, body?: string): Promise<Reply> {
    const { header, cipher } = session.nextCall(FETCH);
    const lower = Object.fromEntries(Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]));
    const request = encodeWebRequest({ method, path, headers: lower, body: encoder.encode(body ?? "") });
    const [sealed] = await unaryCall(this.link, FETCH, header, [cipher.seal(request)]);
    if (!sealed) throw new RelayRefused("the machine did not answer", "UNKNOWN");
    const response = decodeWebResponse(cipher.open(sealed));
    return { status: response.status, body: decoder.decode(response.body) };
  }

  socket(path: string, credential: string): StreamSocket {
    const forgotten = (stale: Sealing) => void this.renew(stale).catch(() => {});
    return new RelaySocket(this.link, this.renewing ?? this.session, path, credential, forgotten);
  }
}
