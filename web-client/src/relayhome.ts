// The page at a relay's address (relay.html, `<html data-origin="relay">`): the relay account's
// login (its access token refreshed before it expires), the account's machines with their
// state, and a machine opened end to end: the key exchange through the relay, the machine's
// identity key pinned (its fingerprint shown for checking, a changed key refused). Then the
// normal app runs on that machine through the relay (transport.ts); "← Machines" leaves it.
// Or, with no password, `betcode web pair`'s QR code or typed code (pairing.ts). The relay
// carries only ciphertext (docs/WEB.md "Through the relay").
import { deviceName, keepDevice, useDeviceOf } from "./credential";
import { byId, el } from "./dom";
import { KeyChanged, pinKey } from "./e2e";
import { idbPut } from "./idb";
import { NotPaired, pairThroughRelay, readPairing, readTypedPairing, type DeviceLogin, type RelayPairing } from "./pairing";
import { newer, REFRESH_AHEAD_MS, sharedTokens, shareTokens, TOKENS, tokensOf, type TokenReply, type Tokens } from "./relaytokens";
import { exchangeKeys, RelayRefused, RelayTransport, Unreachable, type RelayLink } from "./transport";

const OPENED = "betcode-relay-machine"; // this tab's machine: a reload opens it again
const SIGNED_OUT = "betcode-relay-signed-out"; // why, across the page's start over
const RETRY_REFRESH_MS = 15_000;
const LIST_REFRESH_MS = 5_000;

export interface Machine {
  machine_id: string;
  name: string;
  status: string;
}

/** What the app does with a machine opened (`enter`), and to stop showing it (`leave`). */
export interface RelayHooks {
  enter(machine: Machine, transport: RelayTransport, fingerprint: string): Promise<void>;
  leave(): void;
}

function storedTokens(): Tokens | null {
  try {
    const tokens = JSON.parse(localStorage.getItem(TOKENS) || "null") as Tokens | null;
    return tokens && tokens.access_token ? tokens : null;
  } catch {
    return null;
  }
}

let refreshTimer = 0;

/** Kept in localStorage (across restarts of an installed app) and shared with the service
 * worker, which answers notifications through the relay with them. */
function keepTokens(reply: TokenReply): void {
  const tokens = tokensOf(reply, storedTokens());
  localStorage.setItem(TOKENS, JSON.stringify(tokens));
  void shareTokens(tokens);
  scheduleRefresh(tokens);
}

/** The login the service worker renewed, if it did so last (its refresh token is the live
 * one now). */
async function adoptSharedTokens(): Promise<Tokens | null> {
  const local = storedTokens();
  const latest = newer(local, await sharedTokens());
  if (latest && latest !== local) localStorage.setItem(TOKENS, JSON.stringify(latest));
  else await shareTokens(latest); // a login from before the worker kept a copy
  return latest;
}

function scheduleRefresh(tokens: Tokens): void {
  clearTimeout(refreshTimer);
  if (!tokens.refresh_token) return;
  const wait = Math.max(0, tokens.expires_at - Date.now() - REFRESH_AHEAD_MS);
  refreshTimer = window.setTimeout(() => void refresh(), wait);
}

/** `POST /relay/api/refresh {"refresh_token"}`: a new access token (and refresh token). A
 * refusal signs the relay account out; an unreachable relay is tried again shortly. */
async function refresh(): Promise<void> {
  const tokens = await adoptSharedTokens();
  if (!tokens?.refresh_token) return;
  try {
    keepTokens(await relayJson("POST", "/relay/api/refresh", { refresh_token: tokens.refresh_token }, false));
  } catch (failure) {
    if (failure instanceof Unreachable) {
      refreshTimer = window.setTimeout(() => void refresh(), RETRY_REFRESH_MS);
      return;
    }
    signOutOfRelay(`Signed out of the relay: ${(failure as Error).message}`);
  }
}

function accessToken(): string {
  return storedTokens()?.access_token ?? "";
}

/** The relay's own JSON endpoints (`/relay/api/...`). */
async function relayJson<T>(method: string, path: string, body?: unknown, authorized = true): Promise<T> {
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (authorized) headers.Authorization = `Bearer ${accessToken()}`;
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
    });
  } catch (failure) {
    throw new Unreachable("relay", (failure as Error).message);
  }
  if (response.headers.get("X-BetCode-Offline")) throw new Unreachable("relay");
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = data.error ?? {};
    throw new RelayRefused(error.message || `HTTP ${response.status}`, error.code || String(response.status));
  }
  return data as T;
}

// ---- the screens ----

function show(screen: "login" | "machines" | "machine"): void {
  byId("relay-login").hidden = screen !== "login";
  byId("relay-machines").hidden = screen !== "machines";
  byId("machine-bar").hidden = screen !== "machine";
}

let entered = false; // a machine's app is running in this page

function signOutOfRelay(reason: string): void {
  clearTimeout(refreshTimer);
  localStorage.removeItem(TOKENS);
  void shareTokens(null);
  sessionStorage.removeItem(OPENED);
  if (entered) {
    // The app's streams and timers belong to the login that ended: the page starts over.
    sessionStorage.setItem(SIGNED_OUT, reason);
    location.replace(location.pathname);
    return;
  }
  hooks.leave();
  show("login");
  byId("relay-login-error").textContent = reason;
}

/** Where the page stands, in the header: "relay unreachable", "machine offline", ... */
function say(text: string): void {
  byId("connection").textContent = text;
}

let listTimer = 0;

/** The machines and their state, listed again every few seconds while shown (a machine that
 * comes online shows so). */
async function showMachines(): Promise<void> {
  show("machines");
  clearTimeout(listTimer);
  listTimer = window.setTimeout(() => {
    if (!byId("relay-machines").hidden) void showMachines();
  }, LIST_REFRESH_MS);
  const list = byId("machine-list");
  try {
    const { machines } = await relayJson<{ machines: Machine[] }>("GET", "/relay/api/machines");
    say("");
    list.replaceChildren(
      ...machines.map((machine) => {
        const state = machine.status === "MACHINE_STATUS_ONLINE" ? "online" : "offline";
        return el(
          "li",
          { "data-machine": machine.machine_id },
          el("button", { type: "button", class: "link", text: machine.name || machine.machine_id, onclick: () => void openMachine(machine) }),
          " ",
          el("span", { class: `meta state-${state}`, text: state }),
        );
      }),
    );
    if (!machines.length) list.append(el("li", { class: "meta", text: "No machines registered (`betcode machine register` on one)." }));
  } catch (failure) {
    if (failure instanceof RelayRefused && failure.code === "UNAUTHENTICATED") {
      signOutOfRelay("The relay's login expired: sign in again.");
      return;
    }
    say((failure as Error).message);
  }
}

/** A phone paired through the relay (`GET /relay/api/devices`): a login for one machine. */
interface PairedPhone {
  device_id: string;
  name: string;
  machine_id: string;
  last_used_at: number; // seconds since the epoch
  revoked_at: number | null;
}

async function showPairedPhones(): Promise<void> {
  const list = byId("relay-device-list");
  try {
    const { devices } = await relayJson<{ devices: PairedPhone[] }>("GET", "/relay/api/devices");
    const signedIn = devices.filter((device) => device.revoked_at === null);
    list.replaceChildren(
      ...signedIn.map((device) =>
        el(
          "li",
          { "data-device": device.device_id },
          el("span", { class: "title", text: device.name }),
          " ",
          el("span", { class: "meta", text: `${device.machine_id} · last used ${new Date(device.last_used_at * 1000).toLocaleString()}` }),
          " ",
          el("button", { type: "button", text: "Revoke", onclick: () => void revokePhone(device) }),
        ),
      ),
    );
    if (!signedIn.length) list.append(el("li", { class: "meta", text: "No phones paired (`betcode web pair` on a machine)." }));
  } catch (failure) {
    byId("machines-error").textContent = (failure as Error).message;
  }
}

/** Signs a phone out of the relay at once (a lost one, or this one). */
async function revokePhone(device: PairedPhone): Promise<void> {
  if (!confirm(`Sign ${device.name} out of the relay? It stops reaching ${device.machine_id} at once.`)) return;
  try {
    await relayJson("DELETE", `/relay/api/devices/${encodeURIComponent(device.device_id)}`);
  } catch (failure) {
    byId("machines-error").textContent = (failure as Error).message;
  }
  await showPairedPhones();
}

function machineLink(machineId: string): RelayLink {
  return {
    origin: `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}`,
    machineId,
    clientId: hooks.clientId,
    token: accessToken,
    onUnauthenticated: () => signOutOfRelay("The relay refused this login (expired or revoked): sign in again."),
  };
}

/** The machine opened (its key exchanged and checked): the app runs on it. */
async function enterMachine(machine: Machine, transport: RelayTransport, fingerprint: string): Promise<void> {
  sessionStorage.setItem(OPENED, JSON.stringify(machine));
  // For the service worker: it answers this machine's notifications checking the same key.
  const pinned = localStorage.getItem(pinKey(machine.machine_id));
  if (pinned) await idbPut(pinKey(machine.machine_id), pinned);
  show("machine");
  say("");
  byId("machine-name").textContent = machine.name || machine.machine_id;
  byId("fingerprint").textContent = fingerprint;
  entered = true;
  await hooks.enter(machine, transport, fingerprint);
}

async function openMachine(machine: Machine): Promise<void> {
  const error = byId("machines-error");
  error.textContent = "";
  const link = machineLink(machine.machine_id);
  say(`opening ${machine.name || machine.machine_id}…`);
  try {
    const opened = await exchangeKeys(link, localStorage);
    await enterMachine(machine, new RelayTransport(link, opened.session), opened.fingerprint);
  } catch (failure) {
    sessionStorage.removeItem(OPENED);
    const message = failure instanceof KeyChanged ? `Refused: ${failure.message}` : (failure as Error).message;
    await showMachines();
    error.textContent = message;
    if (failure instanceof Unreachable) say(failure.message);
  }
}

/** `betcode web pair`'s QR code (or its typed form): signed in to the relay and to the machine
 * with no password (pairing.ts), then the machine opened. */
async function pairHere(pairing: RelayPairing): Promise<void> {
  show("login");
  byId("relay-login-error").textContent = "";
  say("pairing…");
  try {
    const paired = await pairThroughRelay(pairing, {
      pins: localStorage,
      name: deviceName(),
      async pairAtRelay(ticket, name) {
        const login = await relayJson<DeviceLogin>("POST", "/relay/api/pair", { ticket, name }, false);
        keepTokens(login);
        return login;
      },
      async revokeAtRelay(login) {
        clearTimeout(refreshTimer);
        try {
          await relayJson("DELETE", `/relay/api/devices/${encodeURIComponent(login.device_id)}`);
        } finally {
          localStorage.removeItem(TOKENS);
          await shareTokens(null);
        }
      },
      link: (login) => machineLink(login.machine_id),
    });
    const machineId = paired.login.machine_id;
    useDeviceOf(machineId);
    await keepDevice(paired.device);
    await enterMachine({ machine_id: machineId, name: machineId, status: "MACHINE_STATUS_ONLINE" }, paired.transport, paired.fingerprint);
  } catch (failure) {
    say("");
    show("login");
    const cause = failure instanceof NotPaired ? failure.cause : failure;
    const message = cause instanceof KeyChanged ? `Refused: ${(failure as Error).message}` : (failure as Error).message;
    byId("relay-login-error").textContent = `Not paired: ${message}`;
  }
}

let hooks: RelayHooks & { clientId: string };

/** The relay origin's page: the machine this tab had open, else the machines, else the login. */
export function startRelayHome(appHooks: RelayHooks & { clientId: string }): void {
  hooks = appHooks;
  byId<HTMLFormElement>("relay-login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const form = new FormData(event.target as HTMLFormElement);
    const body = { username: form.get("username"), password: form.get("password") };
    byId("relay-login-error").textContent = "";
    relayJson<TokenReply>("POST", "/relay/api/login", body, false).then(
      (reply) => {
        keepTokens(reply);
        void showMachines();
      },
      (failure: Error) => void (byId("relay-login-error").textContent = failure.message),
    );
  });
  byId("back-to-machines").addEventListener("click", () => {
    // The app's state (streams, lists, waiting requests) belongs to the machine left: the page
    // starts over on the machines.
    sessionStorage.removeItem(OPENED);
    location.replace(location.pathname);
  });
  byId("relay-sign-out").addEventListener("click", () => signOutOfRelay(""));
  const phones = byId<HTMLDetailsElement>("relay-devices");
  phones.addEventListener("toggle", () => {
    if (phones.open) void showPairedPhones();
  });
  byId<HTMLFormElement>("relay-pair-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const typed = String(new FormData(event.target as HTMLFormElement).get("pairing") ?? "");
    const pairing = readTypedPairing(typed);
    if (pairing) void pairHere(pairing);
    else byId("relay-login-error").textContent = "A pairing code is 18 characters: ABCDE-FGHJK-1234-5678.";
  });
  const pairing = readPairing(location.hash);
  if (pairing) {
    // Out of the address bar and the history at once: the link works once.
    history.replaceState(null, "", location.pathname + location.search);
    void pairHere(pairing);
  } else {
    void resume();
  }
}

async function resume(): Promise<void> {
  const tokens = await adoptSharedTokens();
  if (!tokens) {
    show("login");
    byId("relay-login-error").textContent = sessionStorage.getItem(SIGNED_OUT) ?? "";
    sessionStorage.removeItem(SIGNED_OUT);
    return;
  }
  if (tokens.expires_at - Date.now() < REFRESH_AHEAD_MS) {
    if (!tokens.refresh_token) return signOutOfRelay("The relay's login expired: sign in again.");
    await refresh();
    if (!storedTokens()) return; // refused: the login screen says why
  } else {
    scheduleRefresh(tokens);
  }
  const opened = sessionStorage.getItem(OPENED);
  const named = notifiedMachine();
  if (named) await openMachine(named);
  else if (opened) await openMachine(JSON.parse(opened) as Machine);
  else await showMachines();
}

/** A notification tapped (the service worker opens `/?machine=ID#/s/SESSION`): that machine,
 * then the app shows the session the hash names. Out of the address bar at once. */
function notifiedMachine(): Machine | null {
  const machineId = new URLSearchParams(location.search).get("machine");
  if (!machineId) return null;
  history.replaceState(null, "", location.pathname + location.hash);
  return { machine_id: machineId, name: "", status: "" };
}
