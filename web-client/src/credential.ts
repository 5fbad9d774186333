// This browser's device credential (docs/WEB.md "Access"): kept in the page's own storage,
// never in a cookie (a cookie would go to every server on this host, whatever its port), and
// in IndexedDB too, where the service worker reads it to answer from a notification. At the
// relay's address a browser holds one per machine it opened (each daemon signs its devices in).
import { idbDelete, idbPut } from "./idb";

let scope = ""; // "": the daemon this page is served by; else the machine opened at the relay

/** The machine whose credential is used from now on (the relay origin's page). */
export function useDeviceOf(machineId: string): void {
  scope = `:${machineId}`;
}

export interface Device {
  device_id: string;
  name: string;
  credential: string;
}

export function storedDevice(): Device | null {
  try {
    const device = JSON.parse(localStorage.getItem(`betcode-device${scope}`) || "null") as Device | null;
    return device && device.credential ? device : null;
  } catch {
    return null;
  }
}

export async function keepDevice(device: Device): Promise<void> {
  localStorage.setItem(`betcode-device${scope}`, JSON.stringify(device));
  await idbPut(`credential${scope}`, device.credential);
}

export async function forgetDevice(): Promise<void> {
  localStorage.removeItem(`betcode-device${scope}`);
  await idbDelete(`credential${scope}`);
}

/** What signs this browser in, once: a one-time link (`#link=...` from `betcode web`) or a
 * pairing code (`#code=...`, the QR code of `betcode web pair`, or typed on the sign-in screen). */
export type Pairing = { link: string } | { code: string };

/** A link or code in the address bar: taken out at once (also from the history entry). */
export function takePairing(): Pairing | null {
  const match = location.hash.match(/^#(link|code)=([A-Za-z0-9_-]+)$/);
  if (!match) return null;
  history.replaceState(null, "", location.pathname + location.search);
  return match[1] === "link" ? { link: match[2] } : { code: match[2] };
}

export function deviceName(): string {
  const agent = navigator.userAgent;
  const platform = /Android/.test(agent) ? "Android" : /iPhone|iPad/.test(agent) ? "iOS"
    : /Mac OS X/.test(agent) ? "macOS" : /Windows/.test(agent) ? "Windows" : /Linux/.test(agent) ? "Linux" : "";
  const browser = /Edg\//.test(agent) ? "Edge" : /Chrom/.test(agent) ? "Chromium" : /Firefox/.test(agent) ? "Firefox"
    : /Safari/.test(agent) ? "Safari" : "browser";
  return [browser, platform].filter(Boolean).join(" on ");
}
