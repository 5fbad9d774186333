import assert from "node:assert/strict";
import { test } from "node:test";
import {
  clientLabel,
  COST_LIMIT_TOOL,
  outcomeText,
  requestTitle,
  toolSummary,
  turnEnding,
  turnEndingText,
} from "../src/render/tools";

test("a tool call in one line, from its most telling input", () => {
  assert.equal(toolSummary("Bash", { command: "npm   test\n  --watch" }), "Bash: npm test --watch");
  assert.equal(toolSummary("Edit", { file_path: "/repo/a.ts", old_string: "x" }), "Edit: /repo/a.ts");
  assert.equal(toolSummary("TodoWrite", {}), "TodoWrite");
  assert.equal(toolSummary("Task", {}, "look around"), "Task: look around");
  assert.equal(toolSummary("Bash", { command: "x".repeat(300) }).length, "Bash: ".length + 120);
});

test("outcomes read as words, with who answered", () => {
  assert.equal(outcomeText("allowed", "Phone (web-1)"), "Allowed by Phone (web-1)");
  assert.equal(outcomeText("denied", "", "not on a Friday"), "Denied: not on a Friday");
  assert.equal(outcomeText("something_new"), "something_new");
});

test("interrupted and failed turns are not called complete", () => {
  assert.equal(turnEnding("end_turn"), "complete");
  assert.equal(turnEnding(""), "complete");
  assert.equal(turnEnding("cancelled"), "interrupted");
  assert.equal(turnEnding("aborted_streaming"), "interrupted");
  assert.equal(turnEnding("error_during_execution"), "failed");
  assert.equal(turnEndingText("end_turn", 2), "turn complete · 2 tool call(s) denied");
  assert.equal(turnEndingText("cancelled", 0), "turn interrupted");
  assert.equal(turnEndingText("error_max_turns", 0), "turn failed (error_max_turns)");
});

test("clients read as who they are", () => {
  assert.equal(clientLabel("web-1234567890abcdef", "web-1234567890abcdef"), "this page");
  assert.equal(clientLabel("web-1234567890abcdef", "web-other"), "another browser (web-12345678…)");
  assert.equal(clientLabel("terminal", "web-me"), "terminal");
  assert.equal(clientLabel("", "web-me"), "");
});

test("a cost limit's request is named as one, never by its raw tool name", () => {
  assert.equal(requestTitle(COST_LIMIT_TOOL), "Cost limit reached");
  assert.equal(requestTitle("Bash"), "Permission: Bash");
  assert.equal(requestTitle("AskUserQuestion", true), "Question");
  assert.equal(toolSummary(COST_LIMIT_TOOL, { message: "go on", spent_usd: 1 }), 'Cost limit: holds "go on"');
});
