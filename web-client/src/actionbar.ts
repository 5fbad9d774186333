// The action bar above the input: the viewed session's oldest waiting request (else the oldest
// in any session, its session named at the top), with everything needed to judge it (the tool, what it will do, the diff of an edit) and its answers. It is
// part of the page's bottom dock, never over the conversation, so nothing covers its buttons.
import { answerRequest, type QuestionPrompt, type Waiting } from "./api";
import type { AnswerBody } from "./answer";
import { byId, el } from "./dom";
import { toolDiff } from "./render/diff";
import { diffView } from "./render/diffview";
import { COST_LIMIT_TOOL, requestTitle, toolSummary } from "./render/tools";
import { stats } from "./stats";
import { waiting } from "./waiting";

let shownId: string | null = null;
let pinnedId: string | null = null;
let currentSession: string | null = null;

export function setCurrentSession(sessionId: string | null): void {
  currentSession = sessionId;
  shownId = null; // "in this session" / "in session X" changes
  renderBar();
}

export function pin(requestId: string): void {
  pinnedId = requestId;
  byId("inbox").hidden = true;
  renderBar();
}

/** A session as a person tells it: its name, else the first 8 characters of its id. */
export function sessionLabel(sessionId: string): string {
  return waiting.sessionNames.get(sessionId) || `session ${sessionId.slice(0, 8)}`;
}

/** The label, and for an unnamed session its last message too (the inbox has the room). */
function sessionLabelLong(sessionId: string): string {
  const preview = waiting.sessionNames.has(sessionId) ? "" : waiting.sessionPreviews.get(sessionId);
  return preview ? `${sessionLabel(sessionId)} (${preview})` : sessionLabel(sessionId);
}

export function inputView(request: Pick<Waiting, "tool_name" | "input">): HTMLElement {
  if (request.tool_name === COST_LIMIT_TOOL) {
    return el("div", { class: "held" }, "The message it holds: ", el("q", { text: String(request.input.message ?? "") }));
  }
  const diff = toolDiff(request.tool_name, request.input);
  if (diff) return diffView(diff);
  return el("pre", { class: "input", text: JSON.stringify(request.input ?? {}, null, 2) });
}

function ruleText(request: Waiting): string {
  if (!request.rule_known) return "Allow for session: checking which rule it adds…";
  return request.session_rule
    ? `Allow for session adds the rule ${request.session_rule} until the session ends.`
    : "This call cannot be scoped to a rule: Allow for session allows it once only.";
}

async function answer(requestId: string, body: AnswerBody, error: HTMLElement): Promise<void> {
  error.textContent = "";
  const buttons = byId("action-bar").querySelectorAll("button");
  buttons.forEach((button) => (button.disabled = true));
  try {
    const queued = await answerRequest(requestId, body);
    // Kept by the relay for the offline machine: said here, the buttons left disabled (the
    // request leaves the list once the machine is back and has it answered).
    if (queued) error.textContent = queued;
    else waiting.remove(requestId);
  } catch (failure) {
    error.textContent = (failure as Error).message;
    buttons.forEach((button) => (button.disabled = false));
  }
}

function questionFields(request: Waiting): { sets: HTMLFieldSetElement[]; collect: () => Record<string, string> | null } {
  const prompts = (request.input.questions as QuestionPrompt[] | undefined) ?? [];
  const parts = prompts.map((prompt, index) => {
    const type = prompt.multiSelect ? "checkbox" : "radio";
    const name = `q-${request.request_id}-${index}`;
    const other = el("input", { type: "text", "aria-label": `Other answer: ${prompt.question}`, placeholder: "Other" });
    const set = el(
      "fieldset",
      {},
      el("legend", { text: prompt.header ? `${prompt.header}: ${prompt.question}` : prompt.question }),
      ...(prompt.options ?? []).map((option) =>
        el("label", { class: "choice" },
          el("input", { type, name, value: option.label }),
          el("span", { text: option.label + (option.description ? ` (${option.description})` : "") })),
      ),
      el("label", { class: "choice" }, el("input", { type, name, value: "", "data-other": true }), el("span", { text: "Other" }), other),
    );
    other.addEventListener("input", () => {
      const box = set.querySelector<HTMLInputElement>("input[data-other]");
      if (box && other.value) box.checked = true;
    });
    return { prompt, set, other };
  });
  const collect = (): Record<string, string> | null => {
    const answers: Record<string, string> = {};
    for (const { prompt, set, other } of parts) {
      const picked = [...set.querySelectorAll<HTMLInputElement>("input:checked")].map((box) =>
        box.dataset.other !== undefined ? other.value.trim() : box.value,
      );
      const text = picked.filter(Boolean).join(", ");
      if (!text) return null;
      answers[prompt.question] = text;
    }
    return answers;
  };
  return { sets: parts.map((part) => part.set), collect };
}

function buildBar(request: Waiting): HTMLElement[] {
  const error = el("p", { class: "error", role: "alert" });
  // Another session's request says so first: its answer goes to that session, not this one.
  const elsewhere = request.session_id !== currentSession;
  const where = elsewhere
    ? el("div", { class: "bar-from" }, currentSession ? "From another session: " : "From ",
        el("a", { class: "where", href: `#/s/${encodeURIComponent(request.session_id)}`, text: sessionLabel(request.session_id) }))
    : null;
  const others = waiting.count - 1;
  const head = el(
    "div",
    { class: "bar-head" },
    el("strong", { text: requestTitle(request.tool_name, request.is_question) }),
    elsewhere ? null : el("span", { class: "where", text: "in this session" }),
    others > 0 ? el("button", { type: "button", class: "link", text: `+${others} more`, onclick: () => toggleInbox() }) : null,
  );
  if (request.is_question) {
    const { sets, collect } = questionFields(request);
    const submit = (): void => {
      const answers = collect();
      if (!answers) {
        error.textContent = "Answer every question (pick an option or type one) first.";
        return;
      }
      void answer(request.request_id, { answers }, error);
    };
    return [
      ...(where ? [where] : []),
      head,
      el("div", { class: "bar-body" }, ...sets),
      el("div", { class: "bar-actions" }, el("button", { type: "button", class: "primary", onclick: submit, text: "Submit answers" })),
      error,
    ];
  }
  const message = el("input", { type: "text", "aria-label": "Deny message", placeholder: "Why not (sent to claude with Deny)" });
  const decide = (decision: string) => () => void answer(request.request_id, { decision, message: message.value }, error);
  const costLimit = request.tool_name === COST_LIMIT_TOOL;
  return [
    ...(where ? [where] : []),
    head,
    el(
      "div",
      { class: "bar-body" },
      costLimit ? null : el("div", { class: "summary", text: toolSummary(request.tool_name, request.input) }),
      request.description ? el("div", { class: "description", text: request.description }) : null,
      inputView(request),
      el("p", { class: "rule", text: ruleText(request) }),
    ),
    el(
      "div",
      { class: "bar-actions" },
      el("button", { type: "button", class: "primary", onclick: decide("allow_once"), text: "Allow once" }),
      el("button", { type: "button", onclick: decide("allow_session"), text: "Allow for session" }),
      el("button", { type: "button", class: "danger", onclick: decide("deny"), text: "Deny" }),
    ),
    el("div", { class: "bar-deny" }, message),
    error,
  ];
}

export function renderBar(): void {
  const bar = byId("action-bar");
  const pinned = pinnedId ? waiting.all.find((w) => w.request_id === pinnedId) : undefined;
  const request = pinned ?? waiting.first(currentSession);
  if (!pinned) pinnedId = null;
  if (!request) {
    shownId = null;
    bar.hidden = true;
    bar.replaceChildren();
    delete bar.dataset.request;
  } else if (request.request_id !== shownId) {
    shownId = request.request_id;
    bar.replaceChildren(...buildBar(request));
    bar.dataset.request = request.request_id;
    bar.hidden = false;
    const id = request.request_id;
    requestAnimationFrame(() => {
      stats.shown[id] ??= Date.now();
    });
  } else {
    const rule = bar.querySelector(".rule");
    if (rule) rule.textContent = ruleText(request);
    const where = bar.querySelector("a.where");
    if (where) where.textContent = sessionLabel(request.session_id); // the list came
  }
  renderBadge();
  if (!byId("inbox").hidden) renderInbox();
}

function renderBadge(): void {
  const badge = byId<HTMLButtonElement>("badge");
  const count = waiting.count;
  badge.hidden = count === 0;
  badge.textContent = String(count);
  badge.setAttribute("aria-label", `${count} waiting for an answer: show them`);
  document.title = (count ? `(${count}) ` : "") + "BetCode";
}

function renderInbox(): void {
  const inbox = byId("inbox");
  const now = Date.now();
  inbox.replaceChildren(
    el("h2", { text: "Waiting for an answer" }),
    el(
      "ul",
      { class: "inbox-list" },
      ...waiting.all.map((request) =>
        el(
          "li",
          {},
          el("button", { type: "button", class: "inbox-item", onclick: () => pin(request.request_id) },
            el("span", { text: request.is_question ? "Question" : toolSummary(request.tool_name, request.input) }),
            el("span", { class: "meta", text: `${sessionLabelLong(request.session_id)} · ${Math.max(0, Math.round((now - request.received_at) / 1000))} s ago` })),
        ),
      ),
    ),
  );
}

export function toggleInbox(): void {
  const inbox = byId("inbox");
  inbox.hidden = !inbox.hidden;
  if (!inbox.hidden) renderInbox();
}

export function startActionBar(): void {
  waiting.onChange(renderBar);
  byId("badge").addEventListener("click", toggleInbox);
  waiting.start();
}
