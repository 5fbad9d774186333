// BetCode's web client: the session list, one open session, and the action bar with every
// request waiting for an answer. The daemon's endpoints: docs/WEB.md. Served by the daemon (the
// LAN), or by a relay (relay.html): there a machine is opened first (relayhome.ts) and the same
// app runs on it through the relay.
import "./app.css";
import { api, ApiError, clientId, useTransport, whenSignedOut, type SessionSummary } from "./api";
import { deviceName, keepDevice, storedDevice, takePairing, useDeviceOf, type Device, type Pairing } from "./credential";
import { startActionBar, renderBar } from "./actionbar";
import { byId, el } from "./dom";
import { startDevices } from "./devices";
import { completeFor, startCompleter } from "./completer";
import { SessionStream, sessionCosts } from "./session";
import { startRelayHome } from "./relayhome";
import { stats } from "./stats";
import { waiting } from "./waiting";

const LIST_REFRESH_MS = 10000;

declare global {
  interface Window {
    // install.js (plain JavaScript) reaches the daemon with `api` at a relay's address.
    betcode: { clientId: string; stats: typeof stats; api: typeof api };
  }
}
window.betcode = { clientId, stats, api };

const view: { session: string | null; stream: SessionStream | null } = { session: null, stream: null };

function route(): void {
  const match = location.hash.match(/^#\/s\/(.+)$/);
  view.stream?.close();
  view.stream = null;
  view.session = match ? decodeURIComponent(match[1]) : null;
  byId("sessions-view").hidden = Boolean(view.session);
  byId("session-view").hidden = !view.session;
  byId("composer").hidden = !view.session;
  byId("inbox").hidden = true;
  if (view.session) view.stream = new SessionStream(view.session);
  else void refreshDirectories();
  completeFor(view.session);
  void refreshList();
}

interface Directory {
  path: string;
  label: string;
  kind: string;
}

/** Where a new session may start: picked with one tap, or typed. */
async function refreshDirectories(): Promise<void> {
  try {
    const data = await api<{ directories: Directory[] }>("GET", "/api/directories");
    const input = byId<HTMLInputElement>("directory");
    byId("directory-choices").replaceChildren(
      ...data.directories.map((d) =>
        el("button", { type: "button", class: "choice-chip", title: d.path, onclick: () => { input.value = d.path; } },
          el("span", { text: d.label }), el("span", { class: "meta", text: ` ${d.kind}` })),
      ),
    );
  } catch {
    // typing the path still works
  }
}

async function refreshList(): Promise<void> {
  try {
    const data = await api<{ sessions: SessionSummary[]; pending: number }>("GET", "/api/sessions");
    for (const s of data.sessions) {
      if (s.name) waiting.sessionNames.set(s.id, s.name);
      if (s.last_message_preview) waiting.sessionPreviews.set(s.id, s.last_message_preview);
      sessionCosts.set(s.id, s.total_cost_usd || 0);
    }
    view.stream?.showCost();
    renderBar();
    if (view.session) return;
    const list = byId("session-list");
    list.replaceChildren(
      ...data.sessions.map((s) => {
        const cost = `$${(s.total_cost_usd || 0).toFixed(4)}`;
        const when = s.updated_at ? new Date(s.updated_at).toLocaleString() : "";
        const waitingHere = s.pending ? el("span", { class: "waiting", text: ` · ${s.pending} waiting` }) : null;
        return el("li", {},
          el("a", { href: `#/s/${encodeURIComponent(s.id)}` },
            el("div", { class: "title", text: s.name || s.last_message_preview || s.id }),
            el("div", { class: "meta", text: `${s.working_directory} · ${s.status} · ${when} · ${cost}` }, waitingHere)));
      }),
    );
    if (!data.sessions.length) list.append(el("li", { class: "meta", text: "No sessions yet." }));
    byId("connection").textContent = "";
  } catch (error) {
    // Unreachable: the message says where ("daemon unreachable", "relay unreachable", "machine
    // offline").
    const unreachable = error instanceof ApiError && (error.code === "UNAVAILABLE" || error.code === "MACHINE_OFFLINE");
    byId("connection").textContent = unreachable ? (error as Error).message : `offline: ${(error as Error).message}`;
  }
}

byId<HTMLFormElement>("new-session").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target as HTMLFormElement;
  const field = (name: string) => form.elements.namedItem(name) as HTMLInputElement | HTMLTextAreaElement;
  byId("new-session-error").textContent = "";
  try {
    const created = await api<{ session_id: string }>("POST", "/api/sessions", {
      working_directory: field("working_directory").value.trim(),
      model: field("model").value.trim(),
    });
    const prompt = field("prompt").value.trim();
    if (prompt) sessionStorage.setItem(`betcode-prompt-${created.session_id}`, prompt);
    field("prompt").value = "";
    location.hash = `#/s/${encodeURIComponent(created.session_id)}`;
  } catch (error) {
    byId("new-session-error").textContent = (error as Error).message;
  }
});

byId<HTMLFormElement>("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const box = byId<HTMLTextAreaElement>("message");
  if (!box.value.trim() || !view.stream) return;
  if (view.stream.say(box.value)) {
    box.value = "";
    completeFor(view.session);
  }
});
byId("message").addEventListener("keydown", (event) => {
  const key = event as KeyboardEvent;
  if (key.key === "Enter" && (key.ctrlKey || key.metaKey)) byId<HTMLFormElement>("composer").requestSubmit();
});
byId("interrupt").addEventListener("click", () => view.stream?.send({ cancel: {} }));
byId("rename").addEventListener("click", async () => {
  if (!view.session) return;
  const name = prompt("New name for this session", waiting.sessionNames.get(view.session) || "");
  if (name === null) return;
  try {
    await api("PATCH", `/api/sessions/${encodeURIComponent(view.session)}`, { name });
    waiting.sessionNames.set(view.session, name.trim());
    view.stream?.showName();
  } catch (error) {
    byId("composer-error").textContent = (error as Error).message;
  }
});
byId("delete").addEventListener("click", async () => {
  if (!view.session || !confirm("Delete this session? Its claude is stopped and its history removed.")) return;
  try {
    await api("DELETE", `/api/sessions/${encodeURIComponent(view.session)}`);
    location.hash = "#/";
  } catch (error) {
    byId("composer-error").textContent = (error as Error).message;
  }
});
byId("take-lock").addEventListener("click", () => void view.stream?.requestLock());

// ---- signing in: a one-time link (`betcode web`) or a pairing code (`betcode web pair`) becomes
// this device's credential ----

function hideApp(): void {
  view.stream?.close();
  view.stream = null;
  for (const id of ["sessions-view", "session-view", "composer", "action-bar", "lock-banner", "inbox", "badge", "sign-in"]) {
    byId(id).hidden = true;
  }
}

function showSignIn(message: string): void {
  hideApp();
  byId("signed-out-reason").textContent = message;
  byId("sign-in").hidden = false;
  document.body.classList.add("signed-out");
}

async function pairDevice(pairing: Pairing): Promise<boolean> {
  try {
    const device = await api<Device>("POST", "/api/devices/pair", { ...pairing, name: deviceName() });
    await keepDevice(device);
    return true;
  } catch (error) {
    showSignIn(error instanceof ApiError ? error.message : String(error));
    return false;
  }
}

async function signIn(): Promise<boolean> {
  const pairing = takePairing();
  if (pairing && !(await pairDevice(pairing))) return false;
  if (!storedDevice()) {
    showSignIn("");
    return false;
  }
  return true;
}

byId<HTMLFormElement>("pair-code").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = byId<HTMLInputElement>("code");
  void pairDevice({ code: input.value }).then((paired) => {
    if (!paired) return;
    input.value = "";
    showSignedIn();
  });
});

whenSignedOut(() => showSignIn("This browser was signed out (revoked, or the access token was rotated)."));

let started = false;
function showSignedIn(): void {
  byId("sign-in").hidden = true;
  document.body.classList.remove("signed-out"); // signed in by a code typed: no reload since
  const device = storedDevice();
  byId("device-name").textContent = device ? device.name : "";
  window.dispatchEvent(new Event("betcode:signed-in")); // install.js offers notifications then
  if (!started) {
    started = true;
    window.addEventListener("hashchange", route);
    setInterval(() => void refreshList(), LIST_REFRESH_MS);
    startActionBar();
    startCompleter();
    startDevices();
  }
  route();
}

async function start(): Promise<void> {
  if (await signIn()) showSignedIn();
}

if (document.documentElement.dataset.origin === "relay") {
  startRelayHome({
    clientId,
    enter: async (machine, transport) => {
      useTransport(transport);
      useDeviceOf(machine.machine_id);
      await start();
    },
    leave: hideApp,
  });
} else {
  void start();
}
