// An answer to a waiting request given while the machine is away from the relay (docs/WEB.md
// "Through the relay"): the web gateway's calls are never kept for an offline machine, so the
// answer goes as the CLI's `permissions allow` does, an AgentService/AnswerPermission call
// sealed to the machine's pinned identity key (no online session: the daemon that opens it may
// be the next one). The relay keeps that call in its offline buffer and delivers it, once, when
// the machine is back; the first answer still wins there.
import { sealedSession } from "./e2e";
import { decodeMessage, encodeMessage, mapEntries, numberOf, textOf } from "./proto";
import { RelayRefused, unaryCall, type RelayLink } from "./transport";

export const ANSWER_PERMISSION = "betcode.v1.AgentService/AnswerPermission";
export const QUEUED = "queued: will be delivered when the machine is back";

// betcode.v1.PermissionDecision, by the names the web API takes (`decision`).
const DECISIONS: Record<string, number> = {
  allow_once: 1,
  allow_session: 2,
  deny: 3,
  allow_with_edit: 4,
  deny_no_interrupt: 5,
  deny_with_interrupt: 6,
};

/** The web API's answer body (`POST /api/permissions/{id}`). */
export interface AnswerBody {
  decision?: string;
  message?: string;
  answers?: Record<string, string>;
}

/** `queued`: the relay's place for the kept answer; else the machine was back already and
 * answered at once. */
export interface SealedAnswer {
  queued: string;
  accepted: boolean;
  duplicate: boolean;
  outcome: string;
}

/** AnswerPermissionRequest {session_id = 1 (empty: the request's own); request_id = 2;
 * decision = 3; message = 5; map answers = 6}. */
export function encodeAnswer(requestId: string, body: AnswerBody): Uint8Array {
  const decision = !body.decision ? 0 : Object.hasOwn(DECISIONS, body.decision) ? DECISIONS[body.decision] : undefined;
  if (decision === undefined) throw new RelayRefused(`decision ${body.decision} is not one of ${Object.keys(DECISIONS).join(", ")}`, "INVALID_ARGUMENT");
  return encodeMessage([[2, requestId], [3, decision], [5, body.message ?? ""], ...mapEntries(6, body.answers ?? {})]);
}

export async function answerSealed(link: RelayLink, identity: Uint8Array, requestId: string, body: AnswerBody): Promise<SealedAnswer> {
  const { header, cipher } = sealedSession(identity).nextCall(ANSWER_PERMISSION);
  let answers: Uint8Array[];
  try {
    answers = await unaryCall(link, ANSWER_PERMISSION, header, [cipher.seal(encodeAnswer(requestId, body))]);
  } catch (failure) {
    if (failure instanceof RelayRefused && failure.buffered) {
      return { queued: failure.buffered, accepted: false, duplicate: false, outcome: "" };
    }
    throw failure;
  }
  const reply = decodeMessage(answers[0] ? cipher.open(answers[0]) : new Uint8Array());
  return { queued: "", accepted: numberOf(reply, 1) === 1, duplicate: numberOf(reply, 2) === 1, outcome: textOf(reply, 3) };
}

