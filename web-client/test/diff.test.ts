import assert from "node:assert/strict";
import { test } from "node:test";
import { toolDiff } from "../src/render/diff";

test("an Edit is a unified diff of old_string against new_string", () => {
  const diff = toolDiff("Edit", {
    file_path: "/repo/app.py",
    old_string: "a = 1\nb = 2\nc = 3\n",
    new_string: "a = 1\nb = 20\nc = 3\n",
  });
  assert.ok(diff);
  assert.equal(diff.path, "/repo/app.py");
  assert.deepEqual(
    diff.lines.map((line) => `${line.kind}|${line.text}`),
    ["hunk|@@ -1,3 +1,3 @@", "context| a = 1", "del|-b = 2", "add|+b = 20", "context| c = 3"],
  );
  assert.equal(diff.added, 1);
  assert.equal(diff.removed, 1);
});

test("a Write is all added lines", () => {
  const diff = toolDiff("Write", { file_path: "/repo/new.txt", content: "one\ntwo\n" });
  assert.ok(diff);
  assert.deepEqual(diff.lines.filter((l) => l.kind === "add").map((l) => l.text), ["+one", "+two"]);
  assert.equal(diff.removed, 0);
});

test("a MultiEdit shows each edit under its own heading", () => {
  const diff = toolDiff("MultiEdit", {
    file_path: "/repo/x.ts",
    edits: [
      { old_string: "let a", new_string: "const a" },
      { old_string: "let b", new_string: "const b" },
    ],
  });
  assert.ok(diff);
  assert.deepEqual(diff.lines.filter((l) => l.kind === "note").map((l) => l.text), [
    "edit 1 of 2",
    "edit 2 of 2",
  ]);
  assert.equal(diff.added, 2);
  assert.equal(diff.removed, 2);
});

test("other tools and inputs without the fields have no diff", () => {
  assert.equal(toolDiff("Bash", { command: "ls" }), null);
  assert.equal(toolDiff("Edit", { file_path: "/x" }), null);
  assert.equal(toolDiff("Write", undefined), null);
});
