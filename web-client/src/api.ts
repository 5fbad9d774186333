// The daemon's JSON endpoints and session stream (betcode/web/api.py, stream.py; docs/WEB.md),
// reached on the LAN or through a relay (transport.ts).
import { answerSealed, QUEUED, type AnswerBody } from "./answer";
import { forgetDevice, storedDevice } from "./credential";
import { newId } from "./dom";
import { pinnedIdentity } from "./e2e";
import { lanTransport, RelayRefused, RelayTransport, Unreachable, type Reply, type StreamSocket, type Transport } from "./transport";

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

let transport: Transport = lanTransport;

/** The way to the daemon from now on (the relay origin's page, once a machine is opened). */
export function useTransport(chosen: Transport): void {
  transport = chosen;
}

export async function api<T = Record<string, unknown>>(
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  const headers: Record<string, string> = { "Content-Type": "application/json", "X-BetCode-Client": clientId };
  const device = storedDevice();
  if (device) headers.Authorization = `Bearer ${device.credential}`;
  let reply: Reply;
  try {
    reply = await transport.request(method, path, headers, body === undefined ? undefined : JSON.stringify(body));
  } catch (failure) {
    if (failure instanceof Unreachable) throw new ApiError(failure.message, 503, failure.place === "machine" ? MACHINE_OFFLINE : "UNAVAILABLE");
    if (failure instanceof RelayRefused) throw new ApiError(failure.message, 502, failure.code);
    throw failure;
  }
  if (reply.status === 401 && path !== "/api/devices/pair") {
    await forgetDevice(); // revoked, or the token rotated: the page asks for a new link
    signedOut();
    throw new ApiError("not signed in", 401, "UNAUTHENTICATED");
  }
  let data: unknown = {};
  try {
    data = JSON.parse(reply.body);
  } catch {
    // not JSON: the status says it
  }
  if (reply.status < 200 || reply.status >= 300) {
    const error = (data as { error?: { message?: string; code?: string } }).error ?? {};
    throw new ApiError(error.message || `HTTP ${reply.status}`, reply.status, error.code || "");
  }
  return data as T;
}

const MACHINE_OFFLINE = "MACHINE_OFFLINE"; // through a relay: the machine is not connected

/** Answers a waiting request (`POST /api/permissions/{id}`); "" once answered. Through a relay
 * with the machine offline the answer is sealed to its pinned key for the relay to keep
 * (answer.ts): then what to show, "queued: ...". */
export async function answerRequest(requestId: string, body: AnswerBody): Promise<string> {
  try {
    await api("POST", `/api/permissions/${encodeURIComponent(requestId)}`, body);
    return "";
  } catch (failure) {
    if (!(failure instanceof ApiError && failure.code === MACHINE_OFFLINE && transport instanceof RelayTransport)) throw failure;
    const identity = pinnedIdentity(localStorage, transport.link.machineId);
    if (!identity) throw failure;
    try {
      const sealed = await answerSealed(transport.link, identity, requestId, body);
      return sealed.queued ? QUEUED : ""; // back meanwhile: answered at once
    } catch (refused) {
      if (refused instanceof Unreachable) throw new ApiError(refused.message, 503, "UNAVAILABLE");
      throw new ApiError((refused as Error).message, 502, refused instanceof RelayRefused ? refused.code : "");
    }
  }
}

let onSignedOut: () => void = () => {};
export function whenSignedOut(handler: () => void): void {
  onSignedOut = handler;
}
function signedOut(): void {
  onSignedOut();
}

/** A session's stream from the event after `after` (docs/WEB.md "The stream"). */
export function openStream(sessionId: string, after: number): StreamSocket {
  const query = `from=${after}&client=${encodeURIComponent(clientId)}`;
  return transport.socket(`/api/sessions/${encodeURIComponent(sessionId)}/stream?${query}`, storedDevice()?.credential ?? "");
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
