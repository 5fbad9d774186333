// The web client's relay page (served by `relay start --web-listen`; betcode/relay/web.py): a
// relay account's login, its machines with their state, and a machine opened end to end: the
// key exchange through the relay, the machine's identity key pinned (its fingerprint shown for
// checking, a changed key refused), its sessions and waiting approvals listed and answered by
// calls the browser seals itself.
// The relay carries only ciphertext (docs/RELAY.md "In the browser").
import { byId, el, newId } from "./dom";
import { ClientHandshake, KeyChanged, checkPinned, pinnedIdentity, sealedSession, type ClientSession } from "./e2e";
import { bytesOf, concat, decodeMessage, encodeMessage, structStrings, textOf, type Field } from "./proto";

const TOKEN = "betcode-relay-token";
const AGENT = "betcode.v1.AgentService";
const clientId = newId("web-");

interface Machine {
  machine_id: string;
  name: string;
  status: string;
}

class RelayError extends Error {
  constructor(
    message: string,
    readonly code = "",
    readonly buffered = "", // the relay's place for a request kept until the machine is back
  ) {
    super(message);
  }
}

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

/** A call's WebSocket: its first message, then the requests (and the half-close, `end`). */
function openCall(machineId: string, method: string, e2e: string, requests: Uint8Array[], end: boolean): WebSocket {
  const url = `wss://${location.host}/relay/api/machines/${encodeURIComponent(machineId)}/call`;
  const socket = new WebSocket(url, ["betcode"]);
  socket.binaryType = "arraybuffer";
  socket.onopen = () => {
    socket.send(JSON.stringify({ method, e2e, client_id: clientId, token: token() }));
    for (const message of requests) socket.send(new Uint8Array(message));
    if (end) socket.send("end");
  };
  return socket;
}

/** One call to the machine through the relay's WebSocket: the request messages out, the
 * response messages back (as the relay passed them, untouched). `firstOnly`: the call is left
 * at its first answer (a conversation goes on on the machine without its caller). */
function call(
  machineId: string,
  method: string,
  e2e: string,
  requests: Uint8Array[],
  firstOnly = false,
): Promise<Uint8Array[]> {
  return new Promise((resolve, reject) => {
    const socket = openCall(machineId, method, e2e, requests, true);
    const answers: Uint8Array[] = [];
    socket.onmessage = (event) => {
      if (typeof event.data !== "string") {
        answers.push(new Uint8Array(event.data as ArrayBuffer));
        if (firstOnly) {
          socket.close();
          resolve(answers);
        }
        return;
      }
      const status = JSON.parse(event.data) as { code: string; message: string; buffered?: string };
      if (status.code === "OK") resolve(answers);
      else reject(new RelayError(`${status.code}: ${status.message}`, status.code, status.buffered));
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

/** One end-to-end encrypted unary call: the request sealed here, the answer opened here. */
async function sealedCall(machineId: string, session: ClientSession, name: string, request: Uint8Array): Promise<Field[]> {
  const method = `${AGENT}/${name}`;
  const { header, cipher } = session.nextCall(method);
  const [sealed] = await call(machineId, method, header, [cipher.seal(request)]);
  if (!sealed) throw new RelayError("the machine did not answer");
  return decodeMessage(cipher.open(sealed));
}

function repeated(fields: Field[], field: number): Field[][] {
  return fields.filter((f) => f.field === field && f.bytes).map((f) => decodeMessage(f.bytes as Uint8Array));
}

const ALLOW_ONCE = 1;
const DENY = 3;

async function showMachineState(machine: Machine, session: ClientSession): Promise<void> {
  const id = machine.machine_id;
  const sessions = repeated(await sealedCall(id, session, "ListSessions", new Uint8Array()), 1);
  const list = byId("machine-sessions");
  list.replaceChildren();
  if (!sessions.length) list.append(el("li", { class: "meta", text: "No sessions yet." }));
  for (const summary of sessions) {
    const [sessionId, directory, status] = [textOf(summary, 1), textOf(summary, 3), textOf(summary, 5)];
    const open = () => followSession(machine.machine_id, session, sessionId, directory || sessionId);
    list.append(
      el(
        "li",
        {},
        el("button", { type: "button", class: "link", text: directory || sessionId, onclick: open }),
        " ",
        el("span", { class: "meta", text: status }),
      ),
    );
  }
  const pending = repeated(await sealedCall(id, session, "ListPendingPermissions", new Uint8Array()), 1);
  const waiting = byId("machine-waiting");
  // Listed again every few seconds: left as it is while the same requests wait, so that a
  // choice being made is not wiped.
  const key = pending.map((request) => textOf(request, 1)).join(" ");
  if (waiting.dataset.key === key && waiting.childElementCount) return;
  waiting.dataset.key = key;
  waiting.replaceChildren();
  if (!pending.length) waiting.append(el("li", { class: "meta", text: "Nothing waits for an answer." }));
  for (const request of pending) waiting.append(waitingItem(machine, session, request));
}

/** One waiting request: a permission (Allow once / Deny) or a question (its options). */
function waitingItem(machine: Machine, session: ClientSession, request: Field[]): HTMLElement {
  const [requestId, sessionId, tool, description] = [1, 2, 3, 4].map((n) => textOf(request, n));
  const input = structStrings(bytesOf(request, 5));
  const action = input.get("command") ?? input.get("file_path") ?? input.get("url") ?? "";
  const error = el("p", { class: "error", role: "alert" });
  const answer = (fields: [number, Uint8Array | string | number][]) =>
    void (async () => {
      const body = encodeMessage([[1, sessionId], [2, requestId], ...fields]);
      // Sealed to the pinned identity key, not on the online session: if the machine has just
      // gone away, the relay keeps the answer and the machine's next daemon can still open it.
      const identity = pinnedIdentity(localStorage, machine.machine_id);
      if (!identity) throw new RelayError("open the machine again: its key is not pinned");
      try {
        const reply = await sealedCall(machine.machine_id, sealedSession(identity), "AnswerPermission", body);
        byId("machine-outcome").textContent = `${tool}: ${textOf(reply, 3) || "answered"}`;
      } catch (failure) {
        if (!(failure instanceof RelayError) || !failure.buffered) throw failure;
        const name = machine.name || machine.machine_id;
        byId("machine-outcome").textContent =
          `${tool}: queued on the relay until ${name} reconnects (place ${failure.buffered}); it runs then, once`;
        return;
      }
      await showMachineState(machine, session);
    })().catch((failure: Error) => void (error.textContent = failure.message));
  const head = [el("strong", { text: tool }), " ", el("span", { text: description })];
  const prompts = repeated(request, 9);
  if (request.some((f) => f.field === 8 && f.number)) {
    const sets = prompts.map((prompt, index) =>
      el(
        "fieldset",
        {},
        el("legend", { text: textOf(prompt, 1) }),
        ...repeated(prompt, 3).map((option) =>
          el("label", { class: "choice" }, el("input", { type: "radio", name: `q${requestId}-${index}`, value: textOf(option, 2) }), el("span", { text: textOf(option, 2) })),
        ),
      ),
    );
    const submit = () => {
      const picked = sets.map((set) => set.querySelector<HTMLInputElement>("input:checked")?.value);
      if (picked.some((value) => value === undefined)) return void (error.textContent = "Answer every question first.");
      answer(prompts.map((prompt, i) => [6, encodeMessage([[1, textOf(prompt, 1)], [2, picked[i] as string]])]));
    };
    return el("li", { class: "approval" }, ...head, ...sets, el("button", { type: "button", class: "primary", text: "Submit answers", onclick: submit }), error);
  }
  return el(
    "li",
    { class: "approval" },
    ...head,
    action ? el("pre", { class: "action", text: action }) : null,
    el("button", { type: "button", class: "primary", text: "Allow once", onclick: () => answer([[3, ALLOW_ONCE]]) }),
    el("button", { type: "button", text: "Deny", onclick: () => answer([[3, DENY]]) }),
    error,
  );
}

function show(view: "login" | "machines" | "machine"): void {
  for (const name of ["login", "machines", "machine"]) byId(`relay-${name}`).hidden = name !== view;
}

/** A new session in a folder of the machine, its first message sent: Converse's `start` and
 * `message` sealed, left at the daemon's first answer (the turn goes on there). */
async function startSession(machineId: string, session: ClientSession, directory: string, prompt: string): Promise<void> {
  const method = `${AGENT}/Converse`;
  const { header, cipher } = session.nextCall(method);
  const start = encodeMessage([[1, encodeMessage([[2, directory]])]]);
  const message = encodeMessage([[2, encodeMessage([[1, prompt], [4, newId("phone-")]])]]);
  const [first] = await call(machineId, method, header, [cipher.seal(start), cipher.seal(message)], true);
  if (!first) throw new RelayError("the machine did not start the session");
  cipher.open(first); // a refusal would not open
}

// ---- one session's conversation, followed live (Converse attached from sequence 0) ----

let stopFollowing: () => void = () => {};
let sendToSession: ((text: string) => void) | null = null;

function renderEvent(event: Field[], into: HTMLElement): void {
  const kind = event.find((f) => f.field >= 10 && f.bytes);
  if (!kind || !kind.bytes) return;
  const body = decodeMessage(kind.bytes);
  const last = into.lastElementChild;
  switch (kind.field) {
    case 10: // text_delta
      if (last?.classList.contains("text")) last.textContent += textOf(body, 1);
      else into.append(el("p", { class: "text", text: textOf(body, 1) }));
      break;
    case 11: {
      // tool_call_start
      const input = structStrings(bytesOf(body, 3));
      const action = input.get("command") ?? input.get("file_path") ?? input.get("url") ?? "";
      into.append(el("p", { class: "tool" }, el("strong", { text: textOf(body, 2) }), " ", el("code", { text: action })));
      break;
    }
    case 12: // tool_call_result
      into.append(el("pre", { class: "result", text: textOf(body, 2) }));
      break;
    case 18: // error
      into.append(el("p", { class: "error", text: textOf(body, 2) }));
      break;
    case 21: // turn_complete
      into.append(el("p", { class: "note", text: "turn complete" }));
      break;
    case 22: // user_input
      into.append(el("p", { class: "user", text: textOf(body, 1) }));
      break;
  }
}

function followSession(machineId: string, session: ClientSession, sessionId: string, title: string): void {
  stopFollowing();
  const view = byId("session-events");
  byId("session-title").textContent = title;
  view.replaceChildren();
  byId("relay-session").hidden = false;
  const method = `${AGENT}/Converse`;
  const { header, cipher } = session.nextCall(method);
  // start {session_id, from_sequence: 0}: every stored event, then live ones. Field 8 is
  // `optional`: its 0 is sent, not left out.
  const start = encodeMessage([[1, concat(encodeMessage([[1, sessionId]]), Uint8Array.of(0x40, 0))]]);
  const socket = openCall(machineId, method, header, [cipher.seal(start)], false);
  socket.onmessage = (message) => {
    if (typeof message.data === "string") {
      const status = JSON.parse(message.data) as { code: string; message: string };
      if (status.code !== "OK") view.append(el("p", { class: "error", text: `${status.code}: ${status.message}` }));
      return;
    }
    renderEvent(decodeMessage(cipher.open(new Uint8Array(message.data as ArrayBuffer))), view);
  };
  stopFollowing = () => {
    sendToSession = null;
    socket.close();
  };
  // Later messages go on the same call, sealed after the start (the first takes a free input
  // lock, as any client's).
  sendToSession = (text: string) => {
    const message = encodeMessage([[2, encodeMessage([[1, text], [4, newId("phone-")]])]]);
    socket.send(new Uint8Array(cipher.seal(message)));
  };
}

byId<HTMLFormElement>("session-composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const box = byId<HTMLTextAreaElement>("session-message");
  if (!sendToSession || !box.value.trim()) return;
  sendToSession(box.value);
  box.value = "";
});

const REFRESH_MS = 2000;
const opened: { machine: Machine | null; session: ClientSession | null; timer: number } = {
  machine: null,
  session: null,
  timer: 0,
};

byId<HTMLFormElement>("new-session").addEventListener("submit", (event) => {
  event.preventDefault();
  const form = new FormData(event.target as HTMLFormElement);
  const { machine, session } = opened;
  if (!machine || !session) return;
  const error = byId("machine-error");
  error.textContent = "";
  startSession(machine.machine_id, session, String(form.get("directory")), String(form.get("prompt"))).then(
    () => {
      byId("machine-outcome").textContent = "Session started";
      return showMachineState(machine, session);
    },
    (failure: Error) => void (error.textContent = failure.message),
  );
});

async function openMachine(machine: Machine): Promise<void> {
  show("machine");
  clearInterval(opened.timer);
  stopFollowing();
  byId("relay-session").hidden = true;
  opened.machine = opened.session = null;
  byId("machine-name").textContent = machine.name || machine.machine_id;
  const fingerprint = byId("fingerprint");
  const error = byId("machine-error");
  fingerprint.textContent = "";
  error.textContent = "";
  byId("machine-outcome").textContent = "";
  byId("machine-sessions").replaceChildren();
  byId("machine-waiting").replaceChildren();
  try {
    const made = await openSession(machine.machine_id);
    fingerprint.textContent = made.fingerprint;
    Object.assign(opened, { machine, session: made.session });
    await showMachineState(machine, made.session);
    // What waits changes on the machine: listed again while the machine is open.
    opened.timer = window.setInterval(() => {
      if (opened.session) void showMachineState(machine, opened.session).catch(() => {});
    }, REFRESH_MS);
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
byId("back").addEventListener("click", () => {
  clearInterval(opened.timer);
  stopFollowing();
  byId("relay-session").hidden = true;
  void showMachines();
});

if (token()) void showMachines();
else show("login");
