// The web client's relay page (served by `relay start --web-listen`; betcode/relay/web.py): a
// relay account's login, its machines with their state, and a machine opened end to end: the
// key exchange through the relay, the machine's identity key pinned (its fingerprint shown for
// checking, a changed key refused), and its sessions listed by a call the browser seals itself.
// The relay carries only ciphertext (docs/RELAY.md "In the browser").
import { byId, el, newId } from "./dom";
import { ClientHandshake, KeyChanged, checkPinned, type ClientSession } from "./e2e";
import { bytesOf, decodeMessage, encodeMessage, textOf } from "./proto";

const TOKEN = "betcode-relay-token";
const AGENT = "betcode.v1.AgentService";
const clientId = newId("web-");

interface Machine {
  machine_id: string;
  name: string;
  status: string;
}

class RelayError extends Error {}

function token(): string {
  return sessionStorage.getItem(TOKEN) || "";
}

async function json<T>(method: string, path: string, body?: unknown): Promise<T> {
  const response = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token()}` },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new RelayError(data.error?.message || `HTTP ${response.status}`);
  return data as T;
}

/** One call to the machine through the relay's WebSocket: the request messages out, the
 * response messages back (as the relay passed them, untouched). */
function call(machineId: string, method: string, e2e: string, requests: Uint8Array[]): Promise<Uint8Array[]> {
  return new Promise((resolve, reject) => {
    const url = `wss://${location.host}/relay/api/machines/${encodeURIComponent(machineId)}/call`;
    const socket = new WebSocket(url, ["betcode"]);
    socket.binaryType = "arraybuffer";
    const answers: Uint8Array[] = [];
    socket.onopen = () => {
      socket.send(JSON.stringify({ method, e2e, client_id: clientId, token: token() }));
      for (const message of requests) socket.send(new Uint8Array(message));
      socket.send("end");
    };
    socket.onmessage = (event) => {
      if (typeof event.data !== "string") return void answers.push(new Uint8Array(event.data as ArrayBuffer));
      const status = JSON.parse(event.data) as { code: string; message: string };
      if (status.code === "OK") resolve(answers);
      else reject(new RelayError(`${status.code}: ${status.message}`));
    };
    socket.onerror = () => reject(new RelayError("the relay cannot be reached"));
  });
}

/** ExchangeKeys (plain protobuf: the relay sees public keys only), then the session. */
async function openSession(machineId: string): Promise<{ session: ClientSession; fingerprint: string }> {
  const handshake = new ClientHandshake();
  const request = encodeMessage([
    [1, machineId],
    [4, handshake.publicKey],
  ]);
  const [answer] = await call(machineId, `${AGENT}/ExchangeKeys`, "", [request]);
  if (!answer) throw new RelayError("the machine did not answer the key exchange");
  const fields = decodeMessage(answer);
  const identity = bytesOf(fields, 1);
  const fingerprint = checkPinned(localStorage, machineId, identity); // KeyChanged: refused
  return { session: handshake.complete(bytesOf(fields, 3), identity), fingerprint };
}

async function listSessions(machineId: string, session: ClientSession): Promise<string[][]> {
  const method = `${AGENT}/ListSessions`;
  const { header, cipher } = session.nextCall(method);
  const [sealed] = await call(machineId, method, header, [cipher.seal(new Uint8Array())]);
  if (!sealed) throw new RelayError("the machine did not answer");
  const listed = decodeMessage(cipher.open(sealed)).filter((f) => f.field === 1 && f.bytes);
  return listed.map((f) => {
    const summary = decodeMessage(f.bytes as Uint8Array);
    return [textOf(summary, 1), textOf(summary, 3), textOf(summary, 5)];
  });
}

function show(view: "login" | "machines" | "machine"): void {
  for (const name of ["login", "machines", "machine"]) byId(`relay-${name}`).hidden = name !== view;
}

async function openMachine(machine: Machine): Promise<void> {
  show("machine");
  byId("machine-name").textContent = machine.name || machine.machine_id;
  const fingerprint = byId("fingerprint");
  const error = byId("machine-error");
  const list = byId("machine-sessions");
  fingerprint.textContent = "";
  error.textContent = "";
  list.replaceChildren();
  try {
    const opened = await openSession(machine.machine_id);
    fingerprint.textContent = opened.fingerprint;
    const sessions = await listSessions(machine.machine_id, opened.session);
    if (!sessions.length) list.append(el("li", { class: "meta", text: "No sessions yet." }));
    for (const [id, directory, status] of sessions) {
      list.append(el("li", {}, el("strong", { text: directory || id }), " ", el("span", { class: "meta", text: status })));
    }
  } catch (failure) {
    error.textContent =
      failure instanceof KeyChanged ? `Refused: ${failure.message}` : (failure as Error).message;
  }
}

async function showMachines(): Promise<void> {
  show("machines");
  const list = byId("machine-list");
  list.replaceChildren();
  try {
    const { machines } = await json<{ machines: Machine[] }>("GET", "/relay/api/machines");
    if (!machines.length) list.append(el("li", { class: "meta", text: "No machines registered." }));
    for (const machine of machines) {
      const state = machine.status === "MACHINE_STATUS_ONLINE" ? "online" : "offline";
      list.append(
        el(
          "li",
          {},
          el("button", { type: "button", text: machine.name || machine.machine_id, onclick: () => void openMachine(machine) }),
          " ",
          el("span", { class: `meta state-${state}`, text: state }),
        ),
      );
    }
  } catch (failure) {
    sessionStorage.removeItem(TOKEN);
    show("login");
    byId("login-error").textContent = (failure as Error).message;
  }
}

byId<HTMLFormElement>("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const form = new FormData(event.target as HTMLFormElement);
  const body = { username: form.get("username"), password: form.get("password") };
  json<{ access_token: string }>("POST", "/relay/api/login", body).then(
    (reply) => {
      sessionStorage.setItem(TOKEN, reply.access_token);
      void showMachines();
    },
    (failure: Error) => void (byId("login-error").textContent = failure.message),
  );
});
byId("back").addEventListener("click", () => void showMachines());

if (token()) void showMachines();
else show("login");
