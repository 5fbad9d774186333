// The message box's suggestions: `/` commands and `@` files of the open session, from the
// daemon's command catalog (GET /api/sessions/{id}/commands and .../files). Shown in the dock
// above the box, in the flow, so they cover nothing; a tap (or Tab) takes one.
import { api } from "./api";
import { byId, el } from "./dom";
import { applyChoice, matchCommands, tokenAt, type Token } from "./render/completion";

interface CommandEntry {
  name: string;
  description: string;
  args: string;
}
interface Suggestion {
  value: string;
  label: string;
  detail: string;
}

const FILE_DELAY_MS = 120;
let sessionId: string | null = null;
let commands: CommandEntry[] | null = null;
let shown: { token: Token; suggestions: Suggestion[] } | null = null;
let fileTimer = 0;
let asked = 0;

export function completeFor(session: string | null): void {
  sessionId = session;
  commands = null;
  hide();
}

function hide(): void {
  shown = null;
  byId("suggestions").hidden = true;
  byId("suggestions").replaceChildren();
}

function show(token: Token, suggestions: Suggestion[]): void {
  if (!suggestions.length) return hide();
  shown = { token, suggestions };
  const list = byId("suggestions");
  list.replaceChildren(
    ...suggestions.map((suggestion) =>
      el("li", {},
        el("button", { type: "button", class: "suggestion", onclick: () => take(suggestion.value) },
          el("span", { class: "name", text: suggestion.label }),
          el("span", { class: "meta", text: suggestion.detail ? ` ${suggestion.detail}` : "" }))),
    ),
  );
  list.hidden = false;
}

function take(value: string): void {
  if (!shown) return;
  const box = byId<HTMLTextAreaElement>("message");
  const { text, cursor } = applyChoice(box.value, shown.token, value);
  box.value = text;
  box.focus();
  box.setSelectionRange(cursor, cursor);
  hide();
}

async function update(): Promise<void> {
  const box = byId<HTMLTextAreaElement>("message");
  const token = sessionId ? tokenAt(box.value, box.selectionStart ?? box.value.length) : null;
  if (!token || !sessionId) return hide();
  const session = encodeURIComponent(sessionId);
  const ticket = ++asked;
  if (token.kind === "command") {
    commands ??= (await api<{ commands: CommandEntry[] }>("GET", `/api/sessions/${session}/commands`).catch(() => ({ commands: [] }))).commands;
    if (ticket !== asked) return;
    show(token, matchCommands(commands, token.query).map((c) => ({ value: c.name, label: `/${c.name}`, detail: c.args || c.description })));
    return;
  }
  clearTimeout(fileTimer);
  fileTimer = window.setTimeout(async () => {
    const query = encodeURIComponent(token.query);
    const found = await api<{ files: { path: string; kind: string }[] }>("GET", `/api/sessions/${session}/files?query=${query}`).catch(() => ({ files: [] }));
    if (ticket !== asked) return;
    show(token, found.files.map((f) => ({ value: f.path, label: `@${f.path}`, detail: f.kind === "file" ? "" : f.kind })));
  }, FILE_DELAY_MS);
}

export function startCompleter(): void {
  const box = byId<HTMLTextAreaElement>("message");
  box.addEventListener("input", () => void update());
  box.addEventListener("keydown", (event) => {
    if (event.key === "Tab" && shown) {
      event.preventDefault();
      take(shown.suggestions[0].value);
    } else if (event.key === "Escape") {
      hide();
    }
  });
}
