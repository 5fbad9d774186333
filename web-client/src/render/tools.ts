// One-line words for what the page shows: a tool call, a settled request, the end of a turn.

type Input = Record<string, unknown>;
const text = (value: unknown): string => (typeof value === "string" ? value : "");
const MAX_SUMMARY = 120;

function shorten(value: string, limit = MAX_SUMMARY): string {
  const line = value.replace(/\s+/g, " ").trim();
  return line.length > limit ? `${line.slice(0, limit - 1)}…` : line;
}

/** The daemon's own question before a turn past a cost cap (not a tool claude calls). */
export const COST_LIMIT_TOOL = "BetCode:CostLimit";

/** A waiting request's heading: what kind of answer it needs. */
export function requestTitle(toolName: string, isQuestion = false): string {
  if (isQuestion) return "Question";
  return toolName === COST_LIMIT_TOOL ? "Cost limit reached" : `Permission: ${toolName}`;
}

/** What a call does, in one line: `Bash: npm test`, `Edit: src/app.ts`, `Task: look around`. */
export function toolSummary(toolName: string, input: Input | undefined, description = ""): string {
  const given = input ?? {};
  if (toolName === COST_LIMIT_TOOL) return `Cost limit: holds "${shorten(text(given.message))}"`;
  const detail =
    text(given.command) ||
    text(given.file_path) ||
    text(given.notebook_path) ||
    text(given.pattern) ||
    text(given.url) ||
    text(given.query) ||
    text(given.description) ||
    text(given.prompt) ||
    text(given.path) ||
    description;
  return detail ? `${toolName}: ${shorten(detail)}` : toolName;
}

// PermissionResolved outcomes as a person says them.
const OUTCOMES: Record<string, string> = {
  allowed: "Allowed",
  denied: "Denied",
  expired: "Expired (no answer in time)",
  cancelled: "Cancelled (the turn ended first)",
  answered: "Answered",
};

/** `Allowed by Pixel 8 (web-1a2b): reason` — who is the client's shown name when known. */
export function outcomeText(outcome: string, by = "", message = ""): string {
  const words = OUTCOMES[outcome] ?? outcome;
  return `${words}${by ? ` by ${by}` : ""}${message ? `: ${message}` : ""}`;
}

export type TurnEnding = "complete" | "interrupted" | "failed";

/** How a turn ended, from TurnComplete.stop_reason (an API stop reason, "cancelled" for an
 * interrupt, the CLI's error subtype or terminal reason for a failure). */
export function turnEnding(stopReason: string): TurnEnding {
  const reason = stopReason.toLowerCase();
  if (reason === "cancelled" || reason.startsWith("aborted") || reason === "interrupted") {
    return "interrupted";
  }
  if (reason.startsWith("error") || reason === "failed" || reason.includes("error")) return "failed";
  return "complete";
}

export function turnEndingText(stopReason: string, denials: number): string {
  const ending = turnEnding(stopReason);
  const head =
    ending === "complete"
      ? "turn complete"
      : ending === "interrupted"
        ? "turn interrupted"
        : `turn failed (${stopReason})`;
  return `${head}${denials ? ` · ${denials} tool call(s) denied` : ""}`;
}

/** A client as a person reads it: this page, another browser (web-…), or the client's id
 * (a terminal's own name, `cli-…`). */
export function clientLabel(id: string, self: string): string {
  if (!id) return "";
  if (id === self) return "this page";
  if (id.startsWith("web-")) return `another browser (${id.slice(0, 12)}…)`;
  return id;
}
