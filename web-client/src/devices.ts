// The signed-in devices (GET /api/devices), each revocable from here (DELETE /api/devices/ID):
// a lost phone is signed out from the laptop at hand, or this browser signs itself out.
import { api, ApiError } from "./api";
import { forgetDevice, storedDevice } from "./credential";
import { byId, el } from "./dom";

interface Listed {
  device_id: string;
  name: string;
  last_seen_at: number | null;
  signed_in: boolean;
}

async function revoke(device: Listed): Promise<void> {
  const self = device.device_id === storedDevice()?.device_id;
  if (!confirm(self ? "Sign this browser out?" : `Sign ${device.name} out? Its open pages close at once.`)) return;
  await api("DELETE", `/api/devices/${encodeURIComponent(device.device_id)}`);
  if (self) {
    await forgetDevice();
    location.reload();
    return;
  }
  await showDevices();
}

export async function showDevices(): Promise<void> {
  const list = byId("device-list");
  try {
    const { devices } = await api<{ devices: Listed[] }>("GET", "/api/devices");
    const mine = storedDevice()?.device_id;
    list.replaceChildren(
      ...devices
        .filter((d) => d.signed_in)
        .map((device) =>
          el(
            "li",
            { "data-device": device.device_id },
            el("span", { class: "title", text: device.name }),
            " ",
            el("span", { class: "meta", text: device.device_id === mine ? "this browser" : device.device_id }),
            " ",
            el("button", { type: "button", text: "Revoke", onclick: () => void revoke(device).catch(showError) }),
          ),
        ),
    );
  } catch (error) {
    showError(error);
  }
}

function showError(error: unknown): void {
  byId("device-error").textContent = error instanceof ApiError ? error.message : String(error);
}

export function startDevices(): void {
  const details = byId<HTMLDetailsElement>("devices");
  details.addEventListener("toggle", () => {
    if (details.open) void showDevices();
  });
}
