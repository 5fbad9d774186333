// BetCode's service worker (plain JavaScript, apart from the page's bundle): keeps the app
// shell for when the daemon (or, at a relay's address, the relay) cannot be reached, shows the
// daemon's Web Push messages, and answers a waiting approval from the notification's Allow once
// / Deny actions through the page's own answer endpoint (first answer wins, as for every
// client). docs/WEB.md "Notifications" describes the messages.
"use strict";

const SHELL_CACHE = "betcode-shell-v1";
const SHELL = [
  "/",
  "/static/app.js",
  "/static/app.css",
  "/install.js",
  "/manifest.webmanifest",
  "/icons/icon-192.png",
  "/icons/icon-512.png",
];
const CLIENT_ID = "web-notification";
// Registered from a relay's address (install.js): an answer to the machine would have to be
// sealed end to end, which this worker cannot do, so a notification opens the app instead.
const AT_RELAY = new URL(self.location.href).searchParams.get("origin") === "relay";
// As web-client/src/transport.ts says them.
const UNREACHABLE =
  "daemon unreachable: this device is offline, or the daemon or the network between them is down";
const RELAY_UNREACHABLE =
  "relay unreachable: this device is offline, or the relay or the network to it is down";

self.addEventListener("install", (event) => {
  event.waitUntil(cacheShell().then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) => Promise.all(names.filter((n) => n !== SHELL_CACHE).map((n) => caches.delete(n))))
      .then(() => self.clients.claim()),
  );
});

// Only what the daemon answers with 200 is kept: a page not signed in caches nothing.
async function cacheShell() {
  const cache = await caches.open(SHELL_CACHE);
  await Promise.all(
    SHELL.map(async (path) => {
      try {
        const response = await fetch(path, { credentials: "same-origin", cache: "no-store" });
        if (response.ok) await cache.put(path, response);
      } catch (error) {
        // offline while installing: kept at the next visit
      }
    }),
  );
}

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin || request.method !== "GET") return;
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
async function networkThenShell(request, shellPath) {
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
function unreachable(message) {
  const body = JSON.stringify({ error: { code: "UNAVAILABLE", message } });
  return new Response(body, {
    status: 503,
    headers: { "Content-Type": "application/json", "X-BetCode-Offline": "1" },
  });
}

self.addEventListener("push", (event) => {
  let message = {};
  try {
    message = event.data ? event.data.json() : {};
  } catch (error) {
    message = { title: "BetCode", body: event.data ? event.data.text() : "" };
  }
  event.waitUntil(showMessage(message));
});

function showMessage(message) {
  const waits = message.kind === "permission" && Boolean(message.request_id);
  const answerable = waits && !AT_RELAY;
  return self.registration.showNotification(message.title || "BetCode", {
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
  });
}

self.addEventListener("notificationclick", (event) => {
  const message = event.notification.data || {};
  event.notification.close();
  if (event.action === "allow_once" || event.action === "deny") {
    event.waitUntil(answerFromNotification(message, event.action));
  } else {
    event.waitUntil(openSession(message));
  }
});

// The device credential the page keeps in IndexedDB (web-client/src/credential.ts).
function deviceCredential() {
  return new Promise((resolve) => {
    const opening = indexedDB.open("betcode", 1);
    opening.onupgradeneeded = () => opening.result.createObjectStore("device");
    opening.onerror = () => resolve("");
    opening.onsuccess = () => {
      const read = opening.result.transaction("device").objectStore("device").get("credential");
      read.onsuccess = () => resolve(read.result || "");
      read.onerror = () => resolve("");
    };
  });
}

// The answer as the page sends it (the page's credentials go with it); a second notification
// says what became of it, including a request another client answered first.
async function answerFromNotification(message, decision) {
  let status = 0;
  let reply = {};
  try {
    const response = await fetch(`/api/permissions/${encodeURIComponent(message.request_id)}`, {
      method: "POST",
      credentials: "omit",
      headers: {
        "Content-Type": "application/json",
        "X-BetCode-Client": CLIENT_ID,
        Authorization: `Bearer ${await deviceCredential()}`,
      },
      body: JSON.stringify({ decision }),
    });
    status = response.status;
    reply = await response.json().catch(() => ({}));
  } catch (error) {
    reply = { error: { message: UNREACHABLE } };
  }
  const said =
    status === 200
      ? reply.duplicate
        ? `already answered: ${reply.outcome}`
        : reply.outcome
      : (reply.error && reply.error.message) || `the daemon answered ${status}`;
  await self.registration.showNotification(`${message.tool || "Request"}: ${said}`, {
    body: message.body || "",
    tag: message.notification_id || undefined,
    data: { ...message, kind: "answered" },
    icon: "/icons/icon-192.png",
  });
  return { status, reply };
}

async function openSession(message) {
  const target = message.session_id ? `/#/s/${encodeURIComponent(message.session_id)}` : "/";
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const client of windows) {
    if ("focus" in client) {
      await client.navigate(target).catch(() => undefined);
      return client.focus();
    }
  }
  return self.clients.openWindow(target);
}
