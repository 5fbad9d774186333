// Model-written HTML (rendered Markdown) into the page: DOMPurify keeps only inert markup,
// whatever markdown-it let through. Nothing else in the page uses innerHTML.
import DOMPurify from "dompurify";
import { renderMarkdown } from "./markdown";

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

export function setMarkdown(target: HTMLElement, text: string): void {
  target.innerHTML = DOMPurify.sanitize(renderMarkdown(text), {
    FORBID_TAGS: ["style", "form", "input", "button", "iframe"],
    FORBID_ATTR: ["style"],
  });
}
