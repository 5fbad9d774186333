// The change an Edit, MultiEdit or Write call makes, as unified diff lines: what a person
// needs to judge an edit on a phone, instead of old_string/new_string in JSON.
import { structuredPatch } from "diff";

export type DiffLineKind = "hunk" | "add" | "del" | "context" | "note";
export interface DiffLine {
  kind: DiffLineKind;
  text: string;
}
export interface FileDiff {
  path: string;
  lines: DiffLine[];
  added: number;
  removed: number;
}

type Input = Record<string, unknown>;
const text = (value: unknown): string => (typeof value === "string" ? value : "");

function patchLines(path: string, before: string, after: string): FileDiff {
  const patch = structuredPatch(path, path, before, after, "", "", { context: 3 });
  const lines: DiffLine[] = [];
  let added = 0;
  let removed = 0;
  for (const hunk of patch.hunks) {
    lines.push({
      kind: "hunk",
      text: `@@ -${hunk.oldStart},${hunk.oldLines} +${hunk.newStart},${hunk.newLines} @@`,
    });
    for (const line of hunk.lines) {
      // "\ No newline at end of file": noise for an edit's snippet, which rarely ends in one.
      if (line.startsWith("\\")) continue;
      const kind: DiffLineKind = line[0] === "+" ? "add" : line[0] === "-" ? "del" : "context";
      if (kind === "add") added += 1;
      if (kind === "del") removed += 1;
      lines.push({ kind, text: line });
    }
  }
  return { path, lines, added, removed };
}

/** Edit: old_string → new_string; MultiEdit: each edit's spans, in order (the file itself is
 * not known to the page); Write: the whole new content.
 * Null for any other tool, or an input without the fields. */
export function toolDiff(toolName: string, input: Input | undefined): FileDiff | null {
  if (!input) return null;
  const path = text(input.file_path) || text(input.notebook_path);
  if (toolName === "Edit" && typeof input.old_string === "string") {
    return patchLines(path, text(input.old_string), text(input.new_string));
  }
  if (toolName === "MultiEdit" && Array.isArray(input.edits)) {
    const edits = input.edits as Input[];
    const whole: FileDiff = { path, lines: [], added: 0, removed: 0 };
    edits.forEach((edit, index) => {
      const one = patchLines(path, text(edit?.old_string), text(edit?.new_string));
      whole.lines.push({ kind: "note", text: `edit ${index + 1} of ${edits.length}` }, ...one.lines);
      whole.added += one.added;
      whole.removed += one.removed;
    });
    return whole;
  }
  if (toolName === "Write" && typeof input.content === "string") {
    return patchLines(path, "", text(input.content));
  }
  return null;
}
