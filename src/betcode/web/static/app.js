// BetCode's web client: plain JavaScript, no framework, nothing loaded from elsewhere.
// One WebSocket per open session carries AgentEvents as JSON (betcode/web/stream.py); it is
// always opened with `from` = the last sequence this page has, so a reconnect after any drop
// resumes with no gap and no duplicate. The JSON endpoints are in betcode/web/api.py.
"use strict";

const $ = (id) => document.getElementById(id);
const HEARTBEAT_MS = 15000;
const LIST_REFRESH_MS = 10000;
const FOLD_LINES = 12;

function newId(prefix) {
  if (crypto.randomUUID) return prefix + crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// One id per tab, kept across reloads: the audit log and other clients see who answered.
const clientId = sessionStorage.getItem("betcode-client") || newId("web-");
sessionStorage.setItem("betcode-client", clientId);

// What tests, benchmarks and curious users can inspect: every sequence received (before
// de-duplication), and when each approval was first on screen (ms since the epoch).
const stats = { received: [], gaps: 0, connects: 0, caughtUp: false, shown: {} };
window.betcode = { clientId, stats };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== false && value !== undefined) node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json", "X-BetCode-Client": clientId },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  if (response.status === 401) {
    location.reload(); // the token changed: the daemon's page says how to get a new link
    throw new Error("not signed in");
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error((data.error && data.error.message) || `HTTP ${response.status}`);
  return data;
}

// ---- pending approvals: badge and title, so a background tab shows that something waits ----

let listPending = 0;
const pending = new Set();

function showPending() {
  const count = view.session ? pending.size : listPending;
  $("badge").hidden = count === 0;
  $("badge").textContent = String(count);
  $("badge").setAttribute("aria-label", `${count} approvals waiting`);
  document.title = (count ? `(${count}) ` : "") + "BetCode";
}

// ---- views ----

const view = { session: null, stream: null };

function route() {
  const match = location.hash.match(/^#\/s\/(.+)$/);
  if (view.stream) view.stream.close();
  view.stream = null;
  view.session = match ? decodeURIComponent(match[1]) : null;
  $("sessions-view").hidden = Boolean(view.session);
  $("session-view").hidden = !view.session;
  pending.clear();
  if (view.session) {
    view.stream = new SessionStream(view.session);
  } else {
    refreshList();
  }
  showPending();
}

async function refreshList() {
  if (view.session) return;
  try {
    const data = await api("GET", "/api/sessions");
    listPending = data.pending;
    const list = $("session-list");
    list.replaceChildren(
      ...data.sessions.map((s) => {
        const cost = `$${(s.total_cost_usd || 0).toFixed(4)}`;
        const when = s.updated_at ? new Date(s.updated_at).toLocaleString() : "";
        const waiting = s.pending ? el("span", { class: "waiting", text: ` · ${s.pending} waiting` }) : null;
        return el("li", {},
          el("a", { href: `#/s/${encodeURIComponent(s.id)}` },
            el("div", { text: s.name || s.last_message_preview || s.id }),
            el("div", { class: "meta", text: `${s.working_directory} · ${s.status} · ${when} · ${cost}` }, waiting)));
      }),
    );
    if (!data.sessions.length) list.append(el("li", { class: "meta", text: "No sessions yet." }));
    $("connection").textContent = "";
  } catch (error) {
    $("connection").textContent = `offline: ${error.message}`;
  }
  showPending();
}

$("new-session").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  $("new-session-error").textContent = "";
  try {
    const created = await api("POST", "/api/sessions", {
      working_directory: form.working_directory.value.trim(),
      model: form.model.value.trim(),
    });
    const prompt = form.prompt.value.trim();
    if (prompt) sessionStorage.setItem(`betcode-prompt-${created.session_id}`, prompt);
    form.prompt.value = "";
    location.hash = `#/s/${encodeURIComponent(created.session_id)}`;
  } catch (error) {
    $("new-session-error").textContent = error.message;
  }
});

// ---- one session: the stream and its rendering ----

class SessionStream {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.lastSeq = 0;
    this.closed = false;
    this.retryMs = 500;
    this.holder = "";
    this.openText = new Map(); // parent tool id ("" = top level) -> open text element
    this.tools = new Map(); // tool id -> tool element
    this.cards = new Map(); // request id -> approval element
    $("conversation").replaceChildren();
    $("session-head").textContent = sessionId;
    this.connect();
  }

  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const query = `from=${this.lastSeq}&client=${encodeURIComponent(clientId)}`;
    const url = `${scheme}://${location.host}/api/sessions/${encodeURIComponent(this.sessionId)}/stream?${query}`;
    const socket = new WebSocket(url);
    this.socket = socket;
    $("connection").textContent = "connecting…";
    let opened = false;
    socket.onopen = () => {
      opened = true;
      stats.connects += 1;
      this.retryMs = 500;
      $("connection").textContent = "live";
      this.heartbeat = setInterval(() => this.send({}), HEARTBEAT_MS);
    };
    socket.onmessage = (message) => this.onBatch(JSON.parse(message.data));
    socket.onclose = () => {
      clearInterval(this.heartbeat);
      if (this.closed || this.socket !== socket) return;
      // Refused before opening: a rotated token shows the sign-in hint (api() reloads on 401).
      if (!opened) api("GET", "/api/sessions").catch(() => {});
      $("connection").textContent = "reconnecting…";
      setTimeout(() => this.closed || this.connect(), this.retryMs);
      this.retryMs = Math.min(this.retryMs * 2, 5000);
    };
  }

  close() {
    this.closed = true;
    clearInterval(this.heartbeat);
    if (this.socket) this.socket.close();
  }

  send(request) {
    if (!this.socket || this.socket.readyState !== WebSocket.OPEN) {
      $("composer-error").textContent = "not connected; try again in a moment";
      return false;
    }
    this.socket.send(JSON.stringify(request));
    return true;
  }

  onBatch(events) {
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
      this.render(event);
    }
    showPending();
    const log = $("conversation");
    log.lastElementChild && log.lastElementChild.scrollIntoView({ block: "end" });
  }

  caughtUp() {
    stats.caughtUp = true;
    const key = `betcode-prompt-${this.sessionId}`;
    const prompt = sessionStorage.getItem(key);
    if (prompt && this.send({ message: { content: prompt, idempotency_key: newId("web-") } })) {
      sessionStorage.removeItem(key);
    }
  }

  add(node, parent) {
    const host = parent && this.tools.get(parent);
    (host ? host.querySelector(".children") : $("conversation")).append(node);
    return node;
  }

  render(event) {
    const parent = event.parent_tool_use_id || "";
    const kind = Object.keys(event).find((key) => !["sequence", "timestamp", "parent_tool_use_id"].includes(key));
    const handler = this["on_" + kind];
    if (handler) handler.call(this, event[kind], parent);
  }

  note(text, parent, extra = "") {
    this.openText.delete(parent);
    return this.add(el("div", { class: `item note ${extra}`, text }), parent);
  }

  on_session_info(info) {
    $("session-head").textContent = `${info.working_directory || ""} · ${info.model || "default model"} · ${info.session_id}`;
  }

  on_user_input(input, parent) {
    this.openText.delete(parent);
    this.add(el("div", { class: "item user text", text: input.content || "" }), parent);
  }

  on_text_delta(delta, parent) {
    let block = this.openText.get(parent);
    if (!block && delta.text) {
      block = this.add(el("div", { class: "item text assistant" }, document.createTextNode("")), parent);
      this.openText.set(parent, block);
    }
    if (block && delta.text) block.firstChild.appendData(delta.text); // no re-copy per delta
    if (delta.is_complete) this.openText.delete(parent);
  }

  on_tool_call_start(call, parent) {
    this.openText.delete(parent);
    if (this.tools.has(call.tool_id)) return;
    const title = `${call.tool_name}${call.description ? ": " + call.description : ""}`;
    const node = el("details", { class: "item tool", open: call.tool_name === "Task" },
      el("summary", { text: title }),
      el("pre", { class: "input", text: JSON.stringify(call.input || {}, null, 2) }),
      el("div", { class: "result" }),
      el("div", { class: "children" }));
    this.tools.set(call.tool_id, node);
    this.add(node, parent);
  }

  on_tool_call_result(result) {
    const node = this.tools.get(result.tool_id);
    const output = result.output || "";
    const lines = output.split("\n");
    const shown = el("pre", { class: result.is_error ? "failure" : "", text: lines.slice(0, FOLD_LINES).join("\n") });
    const box = node ? node.querySelector(".result") : this.add(el("div", { class: "item" }));
    box.replaceChildren(shown);
    if (lines.length > FOLD_LINES) {
      box.append(el("details", {}, el("summary", { text: `${lines.length - FOLD_LINES} more lines` }),
        el("pre", { text: lines.slice(FOLD_LINES).join("\n") })));
    }
    if (node) {
      node.open = true;
      node.querySelector("summary").append(result.is_error ? " ✗" : " ✓");
    }
  }

  on_permission_request(request, parent) {
    if (this.cards.has(request.request_id)) return;
    const message = el("input", { type: "text", "aria-label": "Deny message", placeholder: "Why not (sent to claude)" });
    const answer = (decision) => this.answer(request.request_id, { decision, message: message.value });
    const card = el("div", { class: "item approval", "data-request": request.request_id },
      el("strong", { text: `Permission: ${request.tool_name}` }),
      request.description ? el("div", { text: request.description }) : null,
      request.decision_reason ? el("div", { class: "note", text: request.decision_reason }) : null,
      el("pre", { text: JSON.stringify(request.input || {}, null, 2) }),
      el("div", { class: "actions" },
        el("button", { type: "button", onclick: () => answer("allow_once"), text: "Allow once" }),
        el("button", { type: "button", onclick: () => answer("allow_session"), text: "Allow for session" }),
        el("button", { type: "button", onclick: () => answer("deny"), text: "Deny" })),
      message,
      el("p", { class: "error", role: "alert" }));
    this.pendingCard(request.request_id, card, parent);
  }

  on_user_question(question, parent) {
    if (this.cards.has(question.question_id)) return;
    const prompts = question.questions && question.questions.length ? question.questions
      : [{ question: question.question, options: question.options, multi_select: question.multi_select }];
    const fields = prompts.map((prompt, index) => {
      const type = prompt.multi_select ? "checkbox" : "radio";
      const name = `q-${question.question_id}-${index}`;
      const other = el("input", { type: "text", "aria-label": `Other answer: ${prompt.question}`, placeholder: "Other" });
      const set = el("fieldset", {}, el("legend", { text: prompt.header ? `${prompt.header}: ${prompt.question}` : prompt.question }),
        ...(prompt.options || []).map((option) => el("label", {},
          el("input", { type, name, value: option.label }),
          el("span", { text: option.label + (option.description ? ` (${option.description})` : "") }))),
        el("label", {}, el("input", { type, name, value: "", "data-other": true }), el("span", { text: "Other" }), other));
      return { prompt, set, other };
    });
    const submit = () => {
      const answers = {};
      for (const { prompt, set, other } of fields) {
        const picked = [...set.querySelectorAll("input:checked")].map((box) => (box.dataset.other !== undefined ? other.value.trim() : box.value));
        answers[prompt.question] = picked.filter(Boolean).join(", ");
      }
      this.answer(question.question_id, { answers });
    };
    const card = el("div", { class: "item approval question", "data-request": question.question_id },
      el("strong", { text: "Question" }), ...fields.map((f) => f.set),
      el("div", { class: "actions" }, el("button", { type: "button", onclick: submit, text: "Submit answers" })),
      el("p", { class: "error", role: "alert" }));
    this.pendingCard(question.question_id, card, parent);
  }

  pendingCard(requestId, card, parent) {
    this.openText.delete(parent);
    this.cards.set(requestId, card);
    pending.add(requestId);
    this.add(card, parent);
    requestAnimationFrame(() => { stats.shown[requestId] = Date.now(); });
  }

  async answer(requestId, body) {
    const card = this.cards.get(requestId);
    const error = card.querySelector(".error");
    error.textContent = "";
    try {
      await api("POST", `/api/permissions/${encodeURIComponent(requestId)}`, body);
    } catch (failure) {
      error.textContent = failure.message;
    }
  }

  on_permission_resolved(resolved) {
    const card = this.cards.get(resolved.request_id);
    pending.delete(resolved.request_id);
    if (!card) return;
    card.classList.add("settled");
    card.querySelectorAll("button, input").forEach((control) => (control.disabled = true));
    const by = resolved.decided_by_client_id ? ` by ${resolved.decided_by_client_id}` : "";
    const why = resolved.message ? `: ${resolved.message}` : "";
    card.append(el("div", { class: "outcome", role: "status", text: `${resolved.outcome}${by}${why}` }));
  }

  on_permission_reminder() {}

  on_usage(usage, parent) {
    const cost = usage.cost_usd ? ` · $${usage.cost_usd.toFixed(4)}` : "";
    this.note(`${usage.input_tokens || 0} tokens in · ${usage.output_tokens || 0} out${cost}`, parent);
  }

  on_turn_complete(done, parent) {
    this.openText.delete(parent);
    const denials = (done.permission_denials || []).length;
    this.note(`turn complete${denials ? ` · ${denials} tool call(s) denied` : ""}`, parent);
  }

  on_status_change(change) {
    const name = (change.status || "").replace("AGENT_STATUS_", "").toLowerCase();
    $("connection").textContent = `live · ${name}`;
  }

  on_error(error, parent) {
    this.note(`${error.code}: ${error.message}`, parent, "failure");
  }

  on_input_lock(change) {
    this.holder = change.holder_client_id || "";
    const readOnly = this.holder !== "" && this.holder !== clientId;
    $("lock-banner").hidden = !readOnly;
    $("lock-banner").textContent = readOnly ? `Read-only: ${this.holder} holds the input lock.` : "";
    for (const control of $("composer").querySelectorAll("textarea, button[type=submit], #interrupt")) {
      control.disabled = readOnly;
    }
  }

  on_input_lock_requested(request, parent) {
    if ((request.state || "").endsWith("PENDING")) {
      this.note(`${request.requested_by_client_id} asked for the input lock`, parent);
    }
  }

  on_todo_update(update, parent) {
    const items = (update.items || []).map((item) => `${(item.status || "").replace("TODO_STATUS_", "").toLowerCase()}: ${item.content || ""}`);
    this.note(`todo\n${items.join("\n")}`, parent);
  }

  on_plan_mode(plan, parent) {
    this.note(plan.active ? "plan mode on" : "plan mode off", parent);
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = event.target.text.value;
  $("composer-error").textContent = "";
  if (!text.trim() || !view.stream) return;
  if (view.stream.send({ message: { content: text, idempotency_key: newId("web-") } })) event.target.text.value = "";
});
$("interrupt").addEventListener("click", () => view.stream && view.stream.send({ cancel: {} }));
$("take-lock").addEventListener("click", async () => {
  $("composer-error").textContent = "";
  try {
    const result = await api("POST", `/api/sessions/${encodeURIComponent(view.session)}/lock`);
    if (!result.granted) $("composer-error").textContent = `${result.previous_holder} kept the input lock`;
  } catch (error) {
    $("composer-error").textContent = error.message;
  }
});

window.addEventListener("hashchange", route);
setInterval(refreshList, LIST_REFRESH_MS);
route();
