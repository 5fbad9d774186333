// The browser's end-to-end scheme against vectors made by the daemon's Python implementation
// (scripts/e2e_vectors.py; tests/unit/test_e2e_vectors.py keeps the file current).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ClientHandshake,
  E2EError,
  KeyChanged,
  checkPinned,
  fingerprint,
  fromHex,
  hex,
  sealedSession,
  trust,
  type PinStore,
} from "../src/e2e";
import vectors from "./e2e-vectors.json";

function session() {
  const handshake = new ClientHandshake(fromHex(vectors.client_ephemeral_secret));
  assert.equal(hex(handshake.publicKey), vectors.client_ephemeral_public);
  return handshake.complete(fromHex(vectors.daemon_ephemeral_public), fromHex(vectors.daemon_identity_public));
}

function nonce(call: number, direction: string, counter: number): Uint8Array {
  return Uint8Array.from({ length: 12 }, (_, i) => [call, direction.charCodeAt(0), counter][i % 3]);
}

test("the fingerprint is the daemon's", () => {
  assert.equal(fingerprint(fromHex(vectors.daemon_identity_public)), vectors.daemon_fingerprint);
});

test("requests seal to the Python implementation's bytes; its responses open", () => {
  const online = session();
  for (const expected of vectors.calls) {
    const { header, cipher } = online.nextCall(`/${vectors.method}`);
    assert.equal(header, expected.header);
    expected.messages.forEach((message, counter) => {
      const sealed = cipher.seal(fromHex(message.plaintext), nonce(expected.call, "c2d", counter));
      assert.equal(hex(sealed), message.c2d);
      assert.equal(hex(cipher.open(fromHex(message.d2c))), message.plaintext);
    });
  }
});

test("a response replayed, reordered, tampered or from another call does not open", () => {
  const online = session();
  const [first, second] = vectors.calls;
  const call1 = online.nextCall(vectors.method).cipher;
  const call2 = online.nextCall(vectors.method).cipher;
  // From another call: call 2's first response offered to call 1.
  assert.throws(() => call1.open(fromHex(second.messages[0].d2c)), E2EError);
  // Reordered: the second response first.
  assert.throws(() => call1.open(fromHex(first.messages[1].d2c)), E2EError);
  assert.equal(hex(call1.open(fromHex(first.messages[0].d2c))), first.messages[0].plaintext);
  // Replayed: the first again, where the second belongs.
  assert.throws(() => call1.open(fromHex(first.messages[0].d2c)), E2EError);
  const tampered = fromHex(second.messages[0].d2c);
  tampered[5] ^= 1;
  assert.throws(() => call2.open(tampered), E2EError);
  // A request sealed for the daemon does not open as a response (the direction is bound).
  assert.throws(() => call2.open(fromHex(second.messages[0].c2d)), E2EError);
});

test("another identity key derives other keys: the daemon's answers do not open", () => {
  const handshake = new ClientHandshake(fromHex(vectors.client_ephemeral_secret));
  const impostor = new Uint8Array(32).fill(9);
  const cipher = handshake.complete(fromHex(vectors.daemon_ephemeral_public), impostor).nextCall(vectors.method).cipher;
  assert.throws(() => cipher.open(fromHex(vectors.calls[0].messages[0].d2c)), E2EError);
});

test("the first key is pinned, a changed one refused until trusted", () => {
  const stored = new Map<string, string>();
  const store: PinStore = { getItem: (k) => stored.get(k) ?? null, setItem: (k, v) => void stored.set(k, v) };
  const identity = fromHex(vectors.daemon_identity_public);
  assert.equal(checkPinned(store, "m1", identity), vectors.daemon_fingerprint);
  assert.equal(checkPinned(store, "m1", identity), vectors.daemon_fingerprint);
  const other = new Uint8Array(32).fill(7);
  assert.throws(
    () => checkPinned(store, "m1", other),
    (error: unknown) => error instanceof KeyChanged && error.pinned === vectors.daemon_fingerprint,
  );
  assert.equal(checkPinned(store, "m2", other), fingerprint(other)); // pins are per machine
  trust(store, "m1", other);
  assert.equal(checkPinned(store, "m1", other), fingerprint(other));
  assert.throws(() => checkPinned(store, "m1", new Uint8Array(31)), E2EError);
});

test("a sealed session (machine offline) seals to the Python implementation's bytes", () => {
  const { sealed } = vectors;
  const session = sealedSession(
    fromHex(vectors.daemon_identity_public),
    sealed.created * 1000 + 999,
    fromHex(vectors.client_ephemeral_secret),
  );
  const { header, cipher } = session.nextCall(vectors.method);
  assert.equal(header, sealed.header);
  assert.equal(hex(cipher.seal(fromHex(sealed.plaintext), nonce(1, "c2d", 0))), sealed.c2d);
});
