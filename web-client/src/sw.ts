// BetCode's service worker (built by esbuild into static/sw.js, apart from the page's bundle):
// keeps the app shell for when the daemon (or, at a relay's address, the relay) cannot be
// reached, shows the daemon's Web Push messages, and answers a waiting approval from the
// notification's Allow once / Deny actions (first answer wins, as for every client): on the LAN
// through the daemon's answer endpoint, at a relay's address through the relay, sealed end to
// end here (relayanswer.ts). docs/WEB.md "Notifications" describes the messages.
import { answerThroughRelay, type Answered, type PushMessage } from "./relayanswer";
import { idbGet } from "./idb";

// The service worker's global scope: the few parts used here (the page's TypeScript library
// is the DOM's, not the worker's).
interface ExtendableEvent extends Event {
  waitUntil(work: Promise<unknown>): void;
}
interface FetchEvent extends ExtendableEvent {
  readonly request: Request;
  respondWith(response: Promise<Response> | Response): void;
}
interface PushEvent extends ExtendableEvent {
  readonly data: { json(): unknown; text(): string } | null;
}
interface NotificationEvent extends ExtendableEvent {
  readonly action: string;
  readonly notification: Notification;
}
interface WindowClient {
  focus(): Promise<WindowClient>;
  navigate(url: string): Promise<WindowClient | null>;
}
interface WorkerScope {
  readonly location: Location;
  readonly registration: ServiceWorkerRegistration;
  readonly clients: {
    claim(): Promise<void>;
    matchAll(options: { type: "window"; includeUncontrolled: boolean }): Promise<WindowClient[]>;
    openWindow(url: string): Promise<WindowClient | null>;
  };
  skipWaiting(): Promise<void>;
  addEventListener(type: "install" | "activate", listener: (event: ExtendableEvent) => void): void;
  addEventListener(type: "fetch", listener: (event: FetchEvent) => void): void;
  addEventListener(type: "push", listener: (event: PushEvent) => void): void;
  addEventListener(type: "notificationclick", listener: (event: NotificationEvent) => void): void;
}
const worker = self as unknown as WorkerScope;

const SHELL_CACHE = "betcode-shell-v1";
const SHELL = ["/", "/static/app.js", "/static/app.css", "/install.js", "/manifest.webmanifest", "/icons/icon-192.png", "/icons/icon-512.png"];
const CLIENT_ID = "web-notification";
// Registered from a relay's address (install.js): answers and taps go to the machine the push
// names, through the relay.
const AT_RELAY = new URL(worker.location.href).searchParams.get("origin") === "relay";
// As web-client/src/transport.ts says them.
const UNREACHABLE = "daemon unreachable: this device is offline, or the daemon or the network between them is down";
const RELAY_UNREACHABLE = "relay unreachable: this device is offline, or the relay or the network to it is down";

worker.addEventListener("install", (event) => {
  event.waitUntil(cacheShell().then(() => worker.skipWaiting()));
});

worker.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) => Promise.all(names.filter((n) => n !== SHELL_CACHE).map((n) => caches.delete(n))))
      .then(() => worker.clients.claim()),
  );
});

// Only what the daemon answers with 200 is kept: a page not signed in caches nothing.
async function cacheShell(): Promise<void> {
  const cache = await caches.open(SHELL_CACHE);
  await Promise.all(
    SHELL.map(async (path) => {
      try {
        const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
        if (response.ok) await cache.put(path, response);
      } catch {
        // offline while installing: kept at the next visit
      }
    }),
  );
}

worker.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (url.origin !== worker.location.origin || request.method !== "GET") return;
  if (url.pathname.startsWith("/api/")) {
    event.respondWith(fetch(request).catch(() => unreachable(UNREACHABLE)));
    return;
  }
  if (url.pathname.startsWith("/relay/api/")) {
    event.respondWith(fetch(request).catch(() => unreachable(RELAY_UNREACHABLE)));
    return;
  }
  const shellPath = request.mode === "navigate" ? "/" : url.pathname;
  if (!SHELL.includes(shellPath)) return;
  event.respondWith(networkThenShell(request, shellPath));
});

// The daemon's current files when it answers (kept for next time), else the kept shell.
async function networkThenShell(request: Request, shellPath: string): Promise<Response> {
  const cache = await caches.open(SHELL_CACHE);
  try {
    const response = await fetch(request);
    if (response.ok && (request.mode !== "navigate" || new URL(request.url).pathname === "/")) {
      await cache.put(shellPath, response.clone());
    }
    return response;
  } catch (error) {
    const kept = await cache.match(shellPath);
    if (kept) return kept;
    throw error;
  }
}

// The page's API (or the relay's), unreachable: the page's own error path shows the reason.
function unreachable(message: string): Response {
  const body = JSON.stringify({ error: { code: "UNAVAILABLE", message } });
  return new Response(body, { status: 503, headers: { "Content-Type": "application/json", "X-BetCode-Offline": "1" } });
}

worker.addEventListener("push", (event) => {
  let message: PushMessage = {};
  try {
    message = event.data ? (event.data.json() as PushMessage) : {};
  } catch {
    message = { title: "BetCode", body: event.data ? event.data.text() : "" };
  }
  event.waitUntil(showMessage(message));
});

function showMessage(message: PushMessage): Promise<void> {
  const waits = message.kind === "permission" && Boolean(message.request_id);
  // At a relay's address the answer goes to the machine the push names (an older daemon's
  // push names none: then tapping opens the app).
  const answerable = waits && (!AT_RELAY || Boolean(message.machine_id));
  return worker.registration.showNotification(message.title || "BetCode", {
    body: message.body || "",
    tag: message.notification_id || undefined,
    data: message,
    icon: "/icons/icon-192.png",
    requireInteraction: waits,
    // An answer made elsewhere replaces the notification without a second alert.
    silent: message.kind === "resolved",
    actions: answerable
      ? [
          { action: "allow_once", title: "Allow once" },
          { action: "deny", title: "Deny" },
        ]
      : [],
  } as NotificationOptions);
}

worker.addEventListener("notificationclick", (event) => {
  const message = (event.notification.data || {}) as PushMessage;
  event.notification.close();
  if (event.action === "allow_once" || event.action === "deny") {
    event.waitUntil(answerFromNotification(message, event.action));
  } else {
    event.waitUntil(openSession(message));
  }
});

// The answer as the page sends it, with the device's credential; a second notification says
// what became of it, including a request another client answered first.
async function answerFromNotification(message: PushMessage, decision: string): Promise<Answered> {
  const answered = AT_RELAY ? await answerThroughRelay(message, decision, CLIENT_ID) : await answerOnLan(message, decision);
  const { status, reply } = answered;
  const said = answered.queued
    ? answered.queued
    : status === 200
      ? reply.duplicate
        ? `already answered: ${reply.outcome}`
        : reply.outcome
      : reply.error?.message || `the daemon answered ${status}`;
  await worker.registration.showNotification(`${message.tool || "Request"}: ${said}`, {
    body: message.body || "",
    tag: message.notification_id || undefined,
    data: { ...message, kind: "answered" },
    icon: "/icons/icon-192.png",
  });
  return answered;
}

async function answerOnLan(message: PushMessage, decision: string): Promise<Answered> {
  try {
    const response = await fetch(`/api/permissions/${encodeURIComponent(message.request_id ?? "")}`, {
      method: "POST",
      credentials: "omit",
      headers: {
        "Content-Type": "application/json",
        "X-BetCode-Client": CLIENT_ID,
        Authorization: `Bearer ${(await idbGet<string>("credential")) ?? ""}`,
      },
      body: JSON.stringify({ decision }),
    });
    return { status: response.status, reply: await response.json().catch(() => ({})) };
  } catch {
    return { status: 0, reply: { error: { message: UNREACHABLE } } };
  }
}

// The session, in the app: at a relay's address the machine the push names is opened first.
function sessionTarget(message: PushMessage): string {
  const session = message.session_id ? `#/s/${encodeURIComponent(message.session_id)}` : "";
  const machine = AT_RELAY && message.machine_id ? `?machine=${encodeURIComponent(message.machine_id)}` : "";
  return `/${machine}${session}`;
}

async function openSession(message: PushMessage): Promise<WindowClient | null> {
  const target = sessionTarget(message);
  const windows = await worker.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const client of windows) {
    await client.navigate(target).catch(() => undefined);
    return client.focus();
  }
  return worker.clients.openWindow(target);
}

// The tests drive these inside the real worker: headless Chromium shows no notification to
// click (so focusing or opening a window, which needs that click, cannot be driven), and
// reaches no vendor's push service to deliver a push.
Object.assign(self, { showMessage, answerFromNotification, sessionTarget });
