// One open session: its WebSocket (always opened with `from` = the last sequence this page
// has, so a reconnect after any drop resumes with no gap and no duplicate) and its rendering.
// Viewing takes nothing: the daemon gives the input lock at the page's first input or when
// it is asked for (the "Request input lock" button).
import { api, ApiError, clientId, openStream } from "./api";
import { inputView, setCurrentSession } from "./actionbar";
import { byId, el, newId } from "./dom";
import { toolDiff } from "./render/diff";
import { diffView } from "./render/diffview";
import { setMarkdown } from "./render/sanitize";
import {
  clientLabel,
  COST_LIMIT_TOOL,
  outcomeText,
  requestTitle,
  toolSummary,
  turnEnding,
  turnEndingText,
} from "./render/tools";
import { stats } from "./stats";
import type { StreamSocket } from "./transport";
import { waiting } from "./waiting";

const HEARTBEAT_MS = 15000;
const SIGNED_OUT = 4401; // the daemon closed the stream: this device was signed out
const FOLD_LINES = 12;
const FOLLOW_SLACK_PX = 48;
// A long session opens with its recent part; older pages load as the reader scrolls up, and
// while following the bottom the page keeps at most MAX_ITEMS items (memory stays bounded).
const PAGE_EVENTS = 300;
const MAX_ITEMS = 1500;
const LOAD_OLDER_PX = 400;

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
type Handler = (body: Json, parent: string, event: Json) => void;

const conversation = (): HTMLElement => byId("conversation");
/** Each session's spend so far (the list's figure, plus this page's usage reports since). */
export const sessionCosts = new Map<string, number>();

/** Follows the bottom while the reader is there; stops when they scroll up, and offers a
 * "jump to latest" button until they are back. */
class Follower {
  following = true;
  private placedAt = -1; // the scrollTop this page set last: its own scroll, not the reader's

  constructor(private readonly box: HTMLElement, private readonly jump: HTMLButtonElement) {
    box.addEventListener("scroll", () => this.onScroll(), { passive: true });
    jump.addEventListener("click", () => this.toBottom());
  }

  private atBottom(): boolean {
    return this.box.scrollTop + this.box.clientHeight >= this.box.scrollHeight - FOLLOW_SLACK_PX;
  }

  private onScroll(): void {
    // Content may have grown since the page scrolled down itself: still following then.
    if (Math.abs(this.box.scrollTop - this.placedAt) < 2) return;
    this.following = this.atBottom();
    this.jump.hidden = this.following;
  }

  toBottom(): void {
    this.following = true;
    this.jump.hidden = true;
    this.keep();
  }

  /** After new content: stay at the bottom if following, stay put otherwise. */
  keep(): void {
    if (!this.following) {
      this.jump.hidden = false;
      return;
    }
    if (this.box.scrollTop + this.box.clientHeight < this.box.scrollHeight) {
      this.box.scrollTop = this.box.scrollHeight;
      this.placedAt = this.box.scrollTop;
    }
  }
}

export class SessionStream {
  private lastSeq = 0;
  private closed = false;
  private retryMs = 500;
  private socket: StreamSocket | null = null;
  private heartbeat: number | undefined;
  private holder = "";
  private lockAsk: { until: number; timer: number } | null = null;
  private readonly openText = new Map<string, { node: HTMLElement; text: string }>();
  private readonly dirty = new Set<HTMLElement>();
  private readonly texts = new WeakMap<HTMLElement, string>();
  private readonly tools = new Map<string, HTMLDetailsElement>();
  private readonly cards = new Map<string, HTMLElement>();
  private readonly follower: Follower;
  private frame = 0;
  private firstSeq = 1; // the oldest event shown; older ones are loaded on demand
  private seq = 0; // the event being rendered
  private target: DocumentFragment | null = null; // where older events go while loaded
  private loadingOlder = false;
  private live = false;

  constructor(readonly sessionId: string) {
    conversation().replaceChildren();
    this.showName();
    this.showCost();
    this.follower = new Follower(conversation(), byId<HTMLButtonElement>("jump-latest"));
    this.showLock("");
    setCurrentSession(sessionId);
    conversation().addEventListener("scroll", this.onScroll, { passive: true });
    void this.open();
  }

  /** The recent part first, then the stream from its last sequence. */
  private async open(): Promise<void> {
    try {
      const page = await this.eventsPage();
      this.lastSeq = page.first - 1;
      this.firstSeq = page.first;
      this.onBatch(page.events);
    } catch {
      // the stream replays everything instead
    }
    this.showOlder();
    if (!this.closed) this.connect();
  }

  private eventsPage(before?: number): Promise<{ events: Json[]; first: number; last: number }> {
    const query = `limit=${PAGE_EVENTS}${before ? `&before=${before}` : ""}`;
    return api("GET", `/api/sessions/${encodeURIComponent(this.sessionId)}/events?${query}`);
  }

  private readonly onScroll = (): void => {
    if (conversation().scrollTop < LOAD_OLDER_PX) void this.loadOlder();
  };

  private showOlder(): void {
    const box = conversation();
    let button = box.querySelector<HTMLButtonElement>(":scope > .older");
    if (this.firstSeq <= 1) {
      button?.remove();
      return;
    }
    if (!button) {
      button = el("button", { type: "button", class: "older", onclick: () => void this.loadOlder() });
      box.prepend(button);
    }
    button.textContent = `Show earlier (${this.firstSeq - 1} events)`;
  }

  /** One older page, rendered apart and put above what is shown, the reader's view kept. */
  private async loadOlder(): Promise<void> {
    if (this.loadingOlder || this.firstSeq <= 1 || this.closed) return;
    this.loadingOlder = true;
    try {
      const page = await this.eventsPage(this.firstSeq);
      const box = conversation();
      const openText = new Map(this.openText);
      this.openText.clear();
      this.target = document.createDocumentFragment();
      for (const event of page.events) {
        this.seq = Number(event.sequence || 0);
        this.render(event);
      }
      const older = this.target;
      this.target = null;
      this.openText.clear();
      for (const [key, value] of openText) this.openText.set(key, value);
      for (const node of this.dirty) setMarkdown(node, this.texts.get(node) ?? "");
      this.dirty.clear();
      const height = box.scrollHeight;
      const button = box.querySelector(":scope > .older");
      box.insertBefore(older, button ? button.nextSibling : box.firstChild);
      box.scrollTop += box.scrollHeight - height;
      this.firstSeq = page.first;
      this.showOlder();
    } finally {
      this.loadingOlder = false;
    }
  }

  /** While following the bottom: the oldest items go once there are more than MAX_ITEMS. */
  private trim(): void {
    if (!this.follower.following) return;
    const items = conversation().querySelectorAll<HTMLElement>(":scope > .item");
    const extra = items.length - MAX_ITEMS;
    if (extra <= 0) return;
    for (let index = 0; index < extra; index += 1) items[index].remove();
    this.firstSeq = Number(items[extra].dataset.seq || this.firstSeq);
    // What was trimmed is let go of entirely (a late result of a trimmed call shows alone).
    for (const map of [this.tools, this.cards] as Map<string, HTMLElement>[]) {
      for (const [key, node] of map) if (!node.isConnected) map.delete(key);
    }
    this.showOlder();
  }

  // ---- the connection ----

  private connect(): void {
    const socket = openStream(this.sessionId, this.lastSeq);
    this.socket = socket;
    byId("connection").textContent = "connecting…";
    let opened = false;
    socket.onopen = () => {
      opened = true;
      stats.connects += 1;
      this.retryMs = 500;
      byId("connection").textContent = "live";
      this.heartbeat = window.setInterval(() => this.send({}), HEARTBEAT_MS);
    };
    socket.onmessage = (text) => this.onBatch(JSON.parse(text) as Json[]);
    socket.onclose = (code, reason) => {
      clearInterval(this.heartbeat);
      if (this.closed || this.socket !== socket) return;
      // Signed out (revoked, rotated) or refused before opening: api() tells on a 401.
      if (!opened || code === SIGNED_OUT) {
        api("GET", "/api/whoami").catch(() => {});
        if (code === SIGNED_OUT) return;
      }
      byId("connection").textContent = reason ? `reconnecting… ${reason}` : "reconnecting…";
      setTimeout(() => this.closed || this.connect(), this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, 5000);
    };
  }

  close(): void {
    this.closed = true;
    conversation().removeEventListener("scroll", this.onScroll);
    clearInterval(this.heartbeat);
    this.socket?.close();
    if (this.lockAsk) clearInterval(this.lockAsk.timer);
    setCurrentSession(null);
  }

  send(request: Json): boolean {
    if (!this.socket || !this.socket.isOpen) {
      byId("composer-error").textContent = "not connected; try again in a moment";
      return false;
    }
    this.socket.send(JSON.stringify(request));
    return true;
  }

  say(text: string): boolean {
    byId("composer-error").textContent = "";
    const sent = this.send({ message: { content: text, idempotency_key: newId("web-") } });
    if (sent) this.follower.toBottom(); // who writes wants to see the answer
    return sent;
  }

  private onBatch(events: Json[]): void {
    if (events.length === 0) return this.caughtUp();
    for (const event of events) {
      const seq = Number(event.sequence || 0);
      const reminder = (event.permission_request || event.user_question || {}).is_replay;
      if (seq > 0 && !reminder) {
        stats.received.push(seq);
        if (seq <= this.lastSeq) continue; // already shown
        if (seq !== this.lastSeq + 1) stats.gaps += 1;
        this.lastSeq = seq;
      }
      this.seq = seq;
      this.render(event);
    }
    this.scheduleFrame();
  }

  private caughtUp(): void {
    stats.caughtUp = true;
    this.live = true; // usage from now on adds to the listed cost
    // Interactive: the recent part is on screen (the frame after the live edge).
    requestAnimationFrame(() => {
      stats.interactiveAt ||= performance.now();
    });
    const key = `betcode-prompt-${this.sessionId}`;
    const prompt = sessionStorage.getItem(key);
    if (prompt && this.say(prompt)) sessionStorage.removeItem(key);
  }

  /** Markdown is rendered at most once a frame per block, however many deltas came. */
  private scheduleFrame(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      for (const node of this.dirty) setMarkdown(node, this.texts.get(node) ?? "");
      this.dirty.clear();
      this.trim();
      this.follower.keep();
    });
  }

  // ---- rendering ----

  private add(node: HTMLElement, parent: string): HTMLElement {
    const host = parent ? this.tools.get(parent) : undefined;
    const children = host?.querySelector(".children");
    if (children) {
      children.append(node);
    } else {
      node.dataset.seq = String(this.seq);
      (this.target ?? conversation()).append(node);
    }
    return node;
  }

  private render(event: Json): void {
    const parent: string = event.parent_tool_use_id || "";
    const kind = Object.keys(event).find((key) => !["sequence", "timestamp", "parent_tool_use_id"].includes(key));
    const handler = kind ? (this.handlers as Record<string, Handler | undefined>)[kind] : undefined;
    handler?.call(this, event[kind as string] as Json, parent, event);
  }

  private note(text: string, parent: string, extra = ""): HTMLElement {
    this.openText.delete(parent);
    return this.add(el("div", { class: `item note ${extra}`, text }), parent);
  }

  private readonly handlers: Record<string, Handler> = {
    session_info: (info) => {
      const where = [info.working_directory, info.model || "default model"].filter(Boolean).join(" · ");
      byId("session-where").textContent = ` ${where}`;
    },
    user_input: (input, parent) => {
      this.openText.delete(parent);
      this.add(el("div", { class: "item user text", text: input.content || "" }), parent);
    },
    text_delta: (delta, parent) => {
      let block = this.openText.get(parent);
      if (!block && delta.text) {
        block = { node: this.add(el("div", { class: "item text assistant markdown" }), parent), text: "" };
        this.openText.set(parent, block);
      }
      if (block && delta.text) {
        block.text += delta.text;
        this.texts.set(block.node, block.text);
        this.dirty.add(block.node);
      }
      if (delta.is_complete) this.openText.delete(parent);
    },
    tool_call_start: (call, parent) => {
      this.openText.delete(parent);
      if (this.tools.has(call.tool_id)) return;
      const diff = toolDiff(call.tool_name, call.input);
      const summary = toolSummary(call.tool_name, call.input, call.description || "");
      const node = el(
        "details",
        { class: "item tool running", open: call.tool_name === "Task" },
        el("summary", {}, el("span", { class: "state", text: "…" }), el("span", { class: "title", text: summary })),
        diff ? diffView(diff) : el("pre", { class: "input", text: JSON.stringify(call.input || {}, null, 2) }),
        el("div", { class: "result" }),
        el("div", { class: "children" }),
      );
      this.tools.set(call.tool_id, node);
      this.add(node, parent);
    },
    tool_call_result: (result, parent) => {
      const node = this.tools.get(result.tool_id);
      const output: string = result.output || "";
      const lines = output.split("\n");
      const shown = el("pre", { class: result.is_error ? "failure" : "", text: lines.slice(0, FOLD_LINES).join("\n") });
      const box = node?.querySelector<HTMLElement>(".result") ?? this.add(el("div", { class: "item" }), parent);
      box.replaceChildren(shown);
      if (lines.length > FOLD_LINES) {
        box.append(el("details", {}, el("summary", { text: `${lines.length - FOLD_LINES} more lines` }),
          el("pre", { text: lines.slice(FOLD_LINES).join("\n") })));
      }
      if (node) {
        node.classList.remove("running");
        node.classList.add(result.is_error ? "failed" : "done");
        node.open = false; // finished: one line, opened on demand
        const state = node.querySelector(".state");
        if (state) state.textContent = result.is_error ? "✗" : "✓";
      }
    },
    permission_request: (request, parent, event) => {
      // A cost limit's question says all (who spent what of which limit): shown as it is.
      const costLimit = request.tool_name === COST_LIMIT_TOOL;
      this.requestCard(request.request_id, parent, el("strong", { text: requestTitle(request.tool_name) }),
        costLimit
          ? el("div", { class: "description", text: request.description || "" })
          : el("div", { class: "summary", text: toolSummary(request.tool_name, request.input) }),
        request.decision_reason ? el("div", { class: "note", text: request.decision_reason }) : null,
        // The bar below shows it in full while it waits: here it is folded, one tap away.
        el("details", { class: "request-input" }, el("summary", { text: "What it will do" }),
          inputView(request as { tool_name: string; input: Record<string, unknown> })),
        el("div", { class: "waiting-note note", text: "Waiting for an answer: see the bar above the message box" }));
      waiting.add({
        request_id: request.request_id,
        session_id: this.sessionId,
        tool_name: request.tool_name,
        description: request.description || "",
        input: request.input || {},
        is_question: false,
        received_at: event.timestamp ? Date.parse(event.timestamp) : Date.now(),
      });
    },
    user_question: (question, parent, event) => {
      const prompts: Json[] = question.questions?.length ? question.questions : [{ question: question.question, options: question.options, multi_select: question.multi_select }];
      this.requestCard(question.question_id, parent, el("strong", { text: "Question" }),
        ...prompts.map((prompt) => el("div", { text: prompt.question })));
      waiting.add({
        request_id: question.question_id,
        session_id: this.sessionId,
        tool_name: "AskUserQuestion",
        description: "",
        input: { questions: prompts.map((p) => ({ question: p.question, header: p.header, multiSelect: p.multi_select, options: p.options })) },
        is_question: true,
        received_at: event.timestamp ? Date.parse(event.timestamp) : Date.now(),
      });
    },
    permission_resolved: (resolved) => {
      waiting.remove(resolved.request_id);
      const card = this.cards.get(resolved.request_id);
      if (!card) return;
      card.classList.add("settled");
      card.querySelector(".waiting-note")?.remove();
      const by = clientLabel(resolved.decided_by_client_id || "", clientId);
      card.append(el("div", { class: "outcome", role: "status", text: outcomeText(resolved.outcome, by, resolved.message || "") }));
    },
    usage: (usage, parent) => {
      if (this.live && usage.cost_usd) {
        sessionCosts.set(this.sessionId, (sessionCosts.get(this.sessionId) ?? 0) + Number(usage.cost_usd));
        this.showCost();
      }
      const cost = usage.cost_usd ? ` · $${Number(usage.cost_usd).toFixed(4)}` : "";
      this.note(`${usage.input_tokens || 0} tokens in · ${usage.output_tokens || 0} out${cost}`, parent, "usage");
    },
    turn_complete: (done, parent) => {
      const stop: string = done.stop_reason || "";
      this.note(turnEndingText(stop, (done.permission_denials || []).length), parent, `turn-end ${turnEnding(stop)}`);
    },
    status_change: (change) => {
      const name = String(change.status || "").replace("AGENT_STATUS_", "").toLowerCase();
      // A queued message's status says where it stands ("queued: 2 of 3 waiting …").
      const shown = name === "queued" && change.message ? String(change.message) : name;
      byId("connection").textContent = `live · ${shown}`;
    },
    error: (error, parent) => {
      if (error.code === "NO_INPUT_LOCK") {
        byId("composer-error").textContent = `${error.message}`;
        return;
      }
      this.note(`${error.code}: ${error.message}`, parent, "failure");
    },
    input_lock: (change) => this.showLock(change.holder_client_id || ""),
    input_lock_requested: (request, parent) => {
      const state = String(request.state || "");
      if (state.endsWith("PENDING")) {
        this.note(`${clientLabel(request.requested_by_client_id, clientId)} asked for the input lock`, parent);
        if (request.requested_by_client_id === clientId && this.lockAsk && request.request_deadline) {
          this.lockAsk.until = Date.parse(request.request_deadline); // the daemon's own deadline
        }
      }
      if (state.endsWith("KEPT") && request.requested_by_client_id === clientId) {
        this.lockAsked(`${clientLabel(request.holder_client_id || "", clientId) || "the holder"} kept the input lock`);
      }
    },
    todo_update: (update, parent) => {
      const items = (update.items || []).map((item: Json) => `${String(item.status || "").replace("TODO_STATUS_", "").toLowerCase()}: ${item.content || item.subject || ""}`);
      this.note(`todo\n${items.join("\n")}`, parent);
    },
    plan_mode: (plan, parent) => {
      this.note(plan.active ? "plan mode on" : "plan mode off", parent);
    },
  };

  private requestCard(requestId: string, parent: string, ...content: (HTMLElement | null)[]): void {
    if (this.cards.has(requestId)) return;
    this.openText.delete(parent);
    const card = el("div", { class: "item request-card", "data-request": requestId }, ...content);
    this.cards.set(requestId, card);
    this.add(card, parent);
  }

  showName(): void {
    byId("session-name").textContent = waiting.sessionNames.get(this.sessionId) || this.sessionId;
  }

  showCost(): void {
    const cost = sessionCosts.get(this.sessionId);
    byId("session-cost").textContent = cost === undefined ? "" : ` · $${cost.toFixed(4)}`;
  }

  // ---- the input lock ----

  private showLock(holder: string): void {
    this.holder = holder;
    const readOnly = holder !== "" && holder !== clientId;
    const bar = byId("lock-banner");
    bar.hidden = !readOnly;
    const who = clientLabel(holder, clientId);
    byId("lock-holder").textContent = readOnly ? `Read-only: ${who} holds the input lock.` : "";
    byId<HTMLButtonElement>("send").disabled = readOnly;
    byId<HTMLTextAreaElement>("message").disabled = readOnly;
    // Read-only, the message box is put away (only Interrupt stays): its room goes to reading.
    byId("composer").classList.toggle("read-only", readOnly);
    if (!readOnly) this.lockAsked("");
  }

  async requestLock(): Promise<void> {
    const button = byId<HTMLButtonElement>("take-lock");
    const progress = byId("lock-progress");
    if (this.lockAsk) return;
    const tick = (): void => {
      if (!this.lockAsk) return;
      const left = this.lockAsk.until ? `${Math.max(0, Math.ceil((this.lockAsk.until - Date.now()) / 1000))} s left` : "";
      progress.textContent = `Asking ${clientLabel(this.holder, clientId) || "the holder"} for the input lock… ${left}`;
    };
    this.lockAsk = { until: 0, timer: window.setInterval(tick, 250) };
    tick();
    button.disabled = true;
    try {
      const result = await api<{ granted: boolean; previous_holder: string }>(
        "POST",
        `/api/sessions/${encodeURIComponent(this.sessionId)}/lock`,
      );
      this.lockAsked(result.granted ? "" : `${clientLabel(result.previous_holder, clientId) || "the holder"} kept the input lock`);
    } catch (error) {
      this.lockAsked(error instanceof ApiError ? error.message : String(error));
    }
  }

  private lockAsked(outcome: string): void {
    if (this.lockAsk) clearInterval(this.lockAsk.timer);
    this.lockAsk = null;
    byId("lock-progress").textContent = outcome;
    byId<HTMLButtonElement>("take-lock").disabled = false;
  }
}
