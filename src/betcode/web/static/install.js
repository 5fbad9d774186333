// The page's side of installing and notifications (plain JavaScript, apart from the page's
// bundle): registers the service worker (/sw.js) and, from the "Notify me" button, subscribes
// this browser to the daemon's Web Push and registers the subscription (docs/WEB.md
// "Notifications"). A browser already subscribed registers again at each load, so a daemon
// that lost it gets it back.
"use strict";

(() => {
  const SUBSCRIBE_SECONDS = 20;
  if (!("serviceWorker" in navigator)) return;
  const button = document.getElementById("enable-notifications");
  const pushable = "PushManager" in window && "Notification" in window;
  const registered = navigator.serviceWorker
    .register("/sw.js")
    .then(() => navigator.serviceWorker.ready);

  // The device credential the page keeps (web-client/src/credential.ts), never a cookie.
  function authorization() {
    try {
      const device = JSON.parse(localStorage.getItem("betcode-device") || "null");
      return device && device.credential ? { Authorization: `Bearer ${device.credential}` } : {};
    } catch (error) {
      return {};
    }
  }

  async function api(path, options = {}) {
    const headers = { ...authorization(), ...(options.headers || {}) };
    const response = await fetch(path, { credentials: "omit", ...options, headers });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error((body.error && body.error.message) || `HTTP ${response.status}`);
    return body;
  }

  async function subscribe(registration) {
    const { public_key: key } = await api("/api/push/vapid-public-key");
    let subscription = await registration.pushManager.getSubscription();
    if (subscription === null) {
      // The browser's vendor runs the push service: unreachable, subscribe() may never settle.
      const gaveUp = new Promise((_, reject) => {
        const said = `the browser's push service did not answer in ${SUBSCRIBE_SECONDS} s`;
        setTimeout(() => reject(new Error(said)), SUBSCRIBE_SECONDS * 1000);
      });
      subscription = await Promise.race([
        registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }),
        gaveUp,
      ]);
    }
    await api("/api/push/subscriptions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(subscription.toJSON()),
    });
  }

  function show(text, title) {
    if (button === null) return;
    button.hidden = false;
    button.textContent = text;
    button.title = title || "";
  }

  async function enable() {
    if (button !== null) button.disabled = true;
    try {
      if ((await Notification.requestPermission()) !== "granted") {
        show("Notifications blocked", "allow notifications for this site in the browser");
        return;
      }
      await subscribe(await registered);
      if (button !== null) button.hidden = true;
    } catch (error) {
      show("Notify me (failed)", `notifications could not be turned on: ${error.message}`);
    } finally {
      if (button !== null) button.disabled = false;
    }
  }

  if (!pushable) return;
  if (button !== null) button.addEventListener("click", enable);
  registered.then(async (registration) => {
    const subscribed = (await registration.pushManager.getSubscription()) !== null;
    if (Notification.permission === "granted" && subscribed) {
      await subscribe(registration).catch(() => undefined);
    } else if (Notification.permission !== "denied") {
      show("Notify me", "tell this device when an approval waits");
    }
  });
})();
