// A FileDiff as DOM: one line per row, colored by kind, text only.
import { el } from "../dom";
import type { FileDiff } from "./diff";

const MAX_LINES = 400;

export function diffView(diff: FileDiff): HTMLElement {
  const shown = diff.lines.slice(0, MAX_LINES);
  const body = el(
    "pre",
    { class: "diff-lines" },
    ...shown.map((line) => el("span", { class: `diff-${line.kind}`, text: `${line.text}\n` })),
  );
  const more = diff.lines.length - shown.length;
  return el(
    "div",
    { class: "diff" },
    el("div", { class: "diff-head" },
      el("span", { class: "diff-path", text: diff.path || "(no path)" }),
      el("span", { class: "diff-count", text: ` +${diff.added} −${diff.removed}` })),
    body,
    more > 0 ? el("div", { class: "note", text: `${more} more lines not shown` }) : null,
  );
}
