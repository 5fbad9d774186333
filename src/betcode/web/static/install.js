// The page's side of installing and notifications (plain JavaScript, apart from the page's
// bundle): registers the service worker (/sw.js) and, from the "Notify me" button, subscribes
// this browser to the daemon's Web Push and registers the subscription (docs/WEB.md
// "Notifications"). A browser already subscribed registers again at each load, so a daemon
// that lost it gets it back. At a relay's address (docs/WEB.md "Through the relay") that is the
// opened machine's daemon, reached through the page's own sealed calls, once the page has
// signed in to it.
"use strict";

(() => {
  const SUBSCRIBE_SECONDS = 20;
  if (!("serviceWorker" in navigator)) return;
  const button = document.getElementById("enable-notifications");
  const pushable = "PushManager" in window && "Notification" in window;
  const atRelay = document.documentElement.dataset.origin === "relay";
  // The worker is told where it runs: at a relay's address it answers a notification through
  // the relay, sealed end to end, to the machine the push names.
  const registered = navigator.serviceWorker
    .register(atRelay ? "/sw.js?origin=relay" : "/sw.js")
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

  async function api(path, method = "GET", body = undefined) {
    if (atRelay) return window.betcode.api(method, path, body);
    const headers = { ...authorization(), "Content-Type": "application/json" };
    const init = { credentials: "omit", method, headers };
    if (body !== undefined) init.body = JSON.stringify(body);
    const response = await fetch(path, init);
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error((answer.error && answer.error.message) || `HTTP ${response.status}`);
    return answer;
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
    await api("/api/push/subscriptions", "POST", subscription.toJSON());
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

  function offer() {
    registered.then(async (registration) => {
      const subscribed = (await registration.pushManager.getSubscription()) !== null;
      if (Notification.permission === "granted" && subscribed) {
        await subscribe(registration).catch(() => undefined);
      } else if (Notification.permission !== "denied") {
        show("Notify me", "tell this device when an approval waits");
      }
    });
  }

  if (!pushable) return;
  if (button !== null) button.addEventListener("click", enable);
  // At a relay's address: once a machine is opened and signed in to (the page says so).
  if (atRelay) window.addEventListener("betcode:signed-in", offer, { once: true });
  else offer();
})();
