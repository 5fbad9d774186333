// The daemon's JSON endpoints and stream URL (betcode/web/api.py, stream.py; docs/WEB.md).
import { forgetDevice, storedDevice } from "./credential";
import { newId } from "./dom";

// One id per tab, kept across reloads: the audit log and other clients see who answered.
export const clientId: string = sessionStorage.getItem("betcode-client") || newId("web-");
sessionStorage.setItem("betcode-client", clientId);

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
  }
}

export async function api<T = Record<string, unknown>>(
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  const headers: Record<string, string> = { "Content-Type": "application/json", "X-BetCode-Client": clientId };
  const device = storedDevice();
  if (device) headers.Authorization = `Bearer ${device.credential}`;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
  });
  if (response.status === 401 && path !== "/api/devices/pair") {
    await forgetDevice(); // revoked, or the token rotated: the page asks for a new link
    signedOut();
    throw new ApiError("not signed in", 401, "UNAUTHENTICATED");
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = (data as { error?: { message?: string; code?: string } }).error ?? {};
    throw new ApiError(error.message || `HTTP ${response.status}`, response.status, error.code || "");
  }
  return data as T;
}

let onSignedOut: () => void = () => {};
export function whenSignedOut(handler: () => void): void {
  onSignedOut = handler;
}
function signedOut(): void {
  onSignedOut();
}

/** The WebSocket's subprotocols: the stream's, and the credential (a browser's WebSocket
 * cannot send an Authorization header). */
export function streamProtocols(): string[] {
  const device = storedDevice();
  return device ? ["betcode", `bearer.${device.credential}`] : ["betcode"];
}

export function streamUrl(sessionId: string, after: number): string {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const query = `from=${after}&client=${encodeURIComponent(clientId)}`;
  return `${scheme}://${location.host}/api/sessions/${encodeURIComponent(sessionId)}/stream?${query}`;
}

// ---- what the endpoints answer ----

export interface SessionSummary {
  id: string;
  name?: string;
  model?: string;
  working_directory?: string;
  status?: string;
  total_cost_usd?: number;
  updated_at?: string;
  last_message_preview?: string;
  pending: number;
}

export interface QuestionOption {
  label: string;
  description?: string;
}
export interface QuestionPrompt {
  question: string;
  header?: string;
  options?: QuestionOption[];
  multiSelect?: boolean;
}

/** A request waiting for an answer, in any session (GET /api/permissions). */
export interface Waiting {
  request_id: string;
  session_id: string;
  tool_name: string;
  description: string;
  input: Record<string, unknown>;
  is_question: boolean;
  received_at: number; // ms since the epoch
  session_rule: string | null; // what "Allow for session" adds; null: allowed once only
  rule_known: boolean; // false until the daemon's list has this request
}
