// An answer sealed for a machine that is offline (src/answer.ts): the web API's answer body as
// an AnswerPermissionRequest. (The browser test sends it through a real relay to a daemon
// that comes back: tests/relay/test_relay_web_app.py.)
import assert from "node:assert/strict";
import { test } from "node:test";
import { encodeAnswer } from "../src/answer";
import { decodeMessage, mapOf, numberOf, textOf } from "../src/proto";
import { RelayRefused } from "../src/transport";

test("a decision, its message and a question's answers keep their fields", () => {
  const allow = decodeMessage(encodeAnswer("req-1", { decision: "allow_once", message: "ok" }));
  assert.equal(textOf(allow, 1), ""); // the request's own session
  assert.equal(textOf(allow, 2), "req-1");
  assert.equal(numberOf(allow, 3), 1);
  assert.equal(textOf(allow, 5), "ok");
  assert.equal(numberOf(decodeMessage(encodeAnswer("req-1", { decision: "deny" })), 3), 3);
  const question = decodeMessage(encodeAnswer("req-2", { answers: { "Which?": "B" } }));
  assert.equal(numberOf(question, 3), 0); // a question's answers carry no decision
  assert.deepEqual(mapOf(question, 6), { "Which?": "B" });
});

test("an unknown decision is refused before anything is sent", () => {
  assert.throws(() => encodeAnswer("req-1", { decision: "maybe" }), RelayRefused);
  assert.throws(() => encodeAnswer("req-1", { decision: "toString" }), RelayRefused);
});
