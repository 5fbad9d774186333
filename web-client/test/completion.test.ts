import assert from "node:assert/strict";
import { test } from "node:test";
import { applyChoice, matchCommands, tokenAt } from "../src/render/completion";

test("a slash command only at the start of the message", () => {
  assert.deepEqual(tokenAt("/rev", 4), { kind: "command", query: "rev", start: 0, end: 4 });
  assert.equal(tokenAt("see /rev", 8), null);
  assert.equal(tokenAt("/review now", 11), null);
});

test("an @ path anywhere, after a space or at the start", () => {
  assert.deepEqual(tokenAt("look at @src/ma", 15), { kind: "file", query: "src/ma", start: 8, end: 15 });
  assert.deepEqual(tokenAt("@", 1), { kind: "file", query: "", start: 0, end: 1 });
  assert.equal(tokenAt("mail me@example", 15), null);
});

test("a choice replaces the token and what is left of its word", () => {
  const token = tokenAt("look at @src/ma and fix", 15);
  assert.ok(token);
  assert.deepEqual(applyChoice("look at @src/ma and fix", token, "src/main.ts"), {
    text: "look at @src/main.ts and fix",
    cursor: 21,
  });
  const command = tokenAt("/rev", 4);
  assert.ok(command);
  assert.deepEqual(applyChoice("/rev", command, "review"), { text: "/review ", cursor: 8 });
});

test("commands starting with the query come first", () => {
  const commands = [{ name: "compact" }, { name: "review" }, { name: "pr-review" }, { name: "init" }];
  assert.deepEqual(matchCommands(commands, "rev").map((c) => c.name), ["review", "pr-review"]);
  assert.equal(matchCommands(commands, "").length, 4);
});
