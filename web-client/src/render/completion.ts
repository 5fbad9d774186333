// What the message box completes at the cursor: a `/command` at the very start, or an `@path`
// word anywhere (pure: the page fetches the candidates and applies the choice).

export interface Token {
  kind: "command" | "file";
  query: string; // what follows the `/` or `@`
  start: number; // where the token begins (its `/` or `@`)
  end: number; // the cursor
}

/** The token being typed at `cursor`, if it is one to complete. */
export function tokenAt(text: string, cursor: number): Token | null {
  const before = text.slice(0, cursor);
  const command = before.match(/^\/(\S*)$/);
  if (command) return { kind: "command", query: command[1], start: 0, end: cursor };
  const file = before.match(/(^|\s)@(\S*)$/);
  if (file) {
    const start = cursor - file[2].length - 1;
    return { kind: "file", query: file[2], start, end: cursor };
  }
  return null;
}

/** The text with the token replaced by the choice (and a space after it), and the cursor. */
export function applyChoice(text: string, token: Token, choice: string): { text: string; cursor: number } {
  const sigil = token.kind === "command" ? "/" : "@";
  const inserted = `${sigil}${choice} `;
  const rest = text.slice(token.end).replace(/^\S*/, "").replace(/^ /, "");
  return { text: text.slice(0, token.start) + inserted + rest, cursor: token.start + inserted.length };
}

/** Commands whose name starts with the query first, then those that contain it. */
export function matchCommands<T extends { name: string }>(commands: T[], query: string, limit = 8): T[] {
  const wanted = query.toLowerCase();
  const starts = commands.filter((c) => c.name.toLowerCase().startsWith(wanted));
  const contains = commands.filter((c) => !c.name.toLowerCase().startsWith(wanted) && c.name.toLowerCase().includes(wanted));
  return [...starts, ...contains].slice(0, limit);
}
