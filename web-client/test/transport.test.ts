// The web gateway's messages (against bytes made by Python's protobuf from the field numbers of
// proto/betcode/v1/web_gateway.proto) and the relay transport's framing on the relay front's call
// WebSocket, with a socket and a sealing of the test's own (e2e.test.ts tests the sealing).
import assert from "node:assert/strict";
import { test } from "node:test";
import { fingerprint, fromHex, hex, KeyChanged } from "../src/e2e";
import { decodeSocketFrame, decodeWebResponse, encodeSocketFrame, encodeWebRequest, FETCH, SOCKET } from "../src/gateway";
import { concat, decodeMessage, encodeMessage, mapEntries, mapOf, textOf } from "../src/proto";
import { exchangeKeys, RelayRefused, RelayTransport, Unreachable, type RelayLink, type Sealing } from "../src/transport";
import vectors from "./e2e-vectors.json";
import { FakeSocket, Pins } from "./fakes";

// Made by Python's protobuf (betcode.v1.web_gateway_pb2).
const PYTHON = {
  request:
    "0a04504f535412142f6170692f7065726d697373696f6e732f722d311a1c0a0d617574686f72697a6174696f6e120b426561726572206372656422197b226465636973696f6e223a22616c6c6f775f6f6e6365227d",
  response: "08c80112200a0c636f6e74656e742d7479706512106170706c69636174696f6e2f6a736f6e1a0b7b226f6b223a747275657d",
  open: "0a480a1f2f6170692f73657373696f6e732f732d312f73747265616d3f66726f6d3d30121c0a0d617574686f72697a6174696f6e120b42656172657220637265641a07626574636f6465",
  emptyText: "1200",
  text: "12105b7b2273657175656e6365223a317d5d",
  close: "220f08b122120a7369676e6564206f7574",
};
const encoder = new TextEncoder();
const decoder = new TextDecoder();

test("a WebRequest is Python's bytes; a WebResponse of Python's reads back", () => {
  const request = encodeWebRequest({
    method: "POST",
    path: "/api/permissions/r-1",
    headers: { authorization: "Bearer cred" },
    body: encoder.encode('{"decision":"allow_once"}'),
  });
  assert.equal(hex(request), PYTHON.request);
  const response = decodeWebResponse(fromHex(PYTHON.response));
  assert.equal(response.status, 200);
  assert.deepEqual(response.headers, { "content-type": "application/json" });
  assert.equal(decoder.decode(response.body), '{"ok":true}');
});

test("socket frames are Python's bytes both ways, an empty text frame included", () => {
  const open = { open: { path: "/api/sessions/s-1/stream?from=0", headers: { authorization: "Bearer cred" }, protocols: ["betcode"] } };
  const frames = [
    [open, PYTHON.open],
    [{ text: "" }, PYTHON.emptyText],
    [{ text: '[{"sequence":1}]' }, PYTHON.text],
    [{ close: { code: 4401, reason: "signed out" } }, PYTHON.close],
  ] as const;
  for (const [frame, bytes] of frames) {
    assert.equal(hex(encodeSocketFrame(frame)), bytes);
    assert.deepEqual(decodeSocketFrame(fromHex(bytes)), frame);
  }
  const binary = { binary: Uint8Array.of(0, 1, 2) };
  assert.deepEqual(decodeSocketFrame(encodeSocketFrame(binary)), binary);
  assert.equal(decodeSocketFrame(new Uint8Array()), null); // no member set
});

test("map fields keep every entry, in any order, and empty values", () => {
  const headers = { "content-type": "application/json", "x-betcode-client": "web-1", accept: "" };
  const fields = decodeMessage(encodeMessage(mapEntries(3, headers)));
  assert.deepEqual(mapOf(fields, 3), headers);
  const reversed = decodeMessage(concat(...[...fields].reverse().map((f) => encodeMessage([[3, f.bytes as Uint8Array]]))));
  assert.deepEqual(mapOf(reversed, 3), headers);
});

// ---- the framing, with a socket the test drives ----

/** Sealed as `call number, 0xC2, plaintext`; opened from `call number, 0xD2, plaintext`. */
class TestSealing implements Sealing {
  calls: string[] = [];
  nextCall(method: string) {
    this.calls.push(method);
    const call = this.calls.length;
    return {
      header: `2;s=test;c=${call}`,
      cipher: {
        seal: (plain: Uint8Array) => concat(Uint8Array.of(call, 0xc2), plain),
        open: (sealed: Uint8Array) => {
          if (sealed[0] !== call || sealed[1] !== 0xd2) throw new Error("not this call's");
          return sealed.subarray(2);
        },
      },
    };
  }
}

function fromDaemon(call: number, plain: Uint8Array): Uint8Array {
  return concat(Uint8Array.of(call, 0xd2), plain);
}

function rig(): { link: RelayLink; sockets: FakeSocket[]; sealing: TestSealing; transport: RelayTransport } {
  const sockets: FakeSocket[] = [];
  let token = "token-1";
  const link: RelayLink = {
    origin: "wss://relay.test:8443",
    machineId: "box 1",
    clientId: "web-phone",
    token: () => token,
    openSocket: (url, protocols) => {
      const socket = new FakeSocket(url, protocols);
      sockets.push(socket);
      token = `token-${sockets.length + 1}`; // refreshed since: the next call carries the new one
      return socket;
    },
  };
  const sealing = new TestSealing();
  return { link, sockets, sealing, transport: new RelayTransport(link, sealing) };
}

/** Another request's socket, opened (its head carries the token current then). */
async function nextCallHead(transport: RelayTransport, sockets: FakeSocket[]): Promise<FakeSocket> {
  void transport.request("GET", "/api/whoami", {}).catch(() => {});
  const socket = sockets[sockets.length - 1];
  socket.onopen?.();
  return socket;
}

function sealedPart(sent: string | Uint8Array, call: number): Uint8Array {
  assert.ok(sent instanceof Uint8Array, `a binary message, not ${String(sent)}`);
  assert.deepEqual([sent[0], sent[1]], [call, 0xc2]);
  return sent.subarray(2);
}

test("a request is one Fetch call: the head, the sealed WebRequest, end; the sealed answer opened", async () => {
  const { sockets, sealing, transport } = rig();
  const reply = transport.request("GET", "/api/sessions", { "Content-Type": "application/json", Authorization: "Bearer dev" });
  const [socket] = sockets;
  assert.equal(socket.url, "wss://relay.test:8443/relay/api/machines/box%201/call");
  assert.deepEqual(socket.protocols, ["betcode"]);
  assert.equal(socket.binaryType, "arraybuffer");
  assert.deepEqual(socket.sent, []); // nothing before the socket opens
  socket.onopen?.();
  assert.deepEqual(sealing.calls, [FETCH]);
  assert.equal(socket.sent.length, 3);
  assert.deepEqual(JSON.parse(socket.sent[0] as string), { method: FETCH, e2e: "2;s=test;c=1", token: "token-1", client_id: "web-phone" });
  assert.equal(JSON.parse((await nextCallHead(transport, sockets)).sent[0] as string).token, "token-2");
  const request = decodeMessage(sealedPart(socket.sent[1], 1));
  assert.equal(textOf(request, 1), "GET");
  assert.equal(textOf(request, 2), "/api/sessions");
  // Header names go lower case, as the gateway reads them.
  assert.deepEqual(mapOf(request, 3), { "content-type": "application/json", authorization: "Bearer dev" });
  assert.equal(socket.sent[2], "end");
  socket.answer(fromDaemon(1, fromHex(PYTHON.response)));
  socket.status("OK");
  assert.deepEqual(await reply, { status: 200, body: '{"ok":true}' });
  assert.ok(socket.closed);
});

test("a call's failures say where: the relay gone, the machine offline, a refusal", async () => {
  const { link, sockets, transport } = rig();
  const gone = transport.request("GET", "/api/sessions", {});
  sockets[0].onerror?.(); // the relay cannot be reached
  await assert.rejects(gone, (failure) => failure instanceof Unreachable && failure.place === "relay" && failure.message.startsWith("relay unreachable"));

  const offline = transport.request("GET", "/api/sessions", {});
  sockets[1].onopen?.();
  sockets[1].status("UNAVAILABLE", "machine box 1 is not connected");
  await assert.rejects(offline, (failure) => failure instanceof Unreachable && failure.place === "machine" && failure.message.startsWith("machine offline"));

  let signedOut = 0;
  link.onUnauthenticated = () => (signedOut += 1);
  const refused = transport.request("GET", "/api/sessions", {});
  sockets[2].onopen?.();
  sockets[2].status("UNAUTHENTICATED", "token expired");
  await assert.rejects(refused, (failure) => failure instanceof RelayRefused && failure.code === "UNAUTHENTICATED");
  assert.equal(signedOut, 1); // the page goes back to the relay's login

  // A status after the socket closed is not taken twice, nor a close after the status.
  const answered = transport.request("POST", "/api/permissions/r-1", {}, "{}");
  sockets[3].onopen?.();
  sockets[3].status("UNAVAILABLE", "kept", { buffered: "7" });
  sockets[3].onclose?.();
  await assert.rejects(answered, (failure) => failure instanceof RelayRefused && failure.buffered === "7");
});

test("a stream is one Socket call: the open frame first, text frames both ways, the close said", () => {
  const { sockets, sealing, transport } = rig();
  const stream = transport.socket("/api/sessions/s-1/stream?from=3&client=web-phone", "dev-cred");
  const events: string[] = [];
  stream.onopen = () => events.push("open");
  stream.onmessage = (text) => events.push(`message ${text}`);
  stream.onclose = (code, reason) => events.push(`close ${code} ${reason}`);
  const [socket] = sockets;
  assert.equal(stream.isOpen, false);
  stream.send("{}"); // not open yet: not sent
  socket.onopen?.();
  assert.deepEqual(events, []); // the relay's socket is open, the daemon's stream not yet
  assert.deepEqual(sealing.calls, [SOCKET]);
  assert.deepEqual(JSON.parse(socket.sent[0] as string).method, SOCKET);
  assert.deepEqual(decodeSocketFrame(sealedPart(socket.sent[1], 1)), {
    open: {
      path: "/api/sessions/s-1/stream?from=3&client=web-phone",
      headers: { "x-betcode-client": "web-phone", authorization: "Bearer dev-cred" },
      protocols: ["betcode"],
    },
  });
  assert.equal(socket.sent.length, 2); // no `end`: the stream stays open both ways
  socket.answer(fromDaemon(1, encodeSocketFrame({ text: "[]" }))); // the daemon's first batch
  stream.send('{"message":{"content":"hi"}}');
  assert.deepEqual(decodeSocketFrame(sealedPart(socket.sent[2], 1)), { text: '{"message":{"content":"hi"}}' });
  socket.answer(fromDaemon(1, encodeSocketFrame({ close: { code: 4401, reason: "signed out" } })));
  socket.status("OK");
  assert.deepEqual(events, ["open", "message []", "close 4401 signed out"]);
  assert.ok(socket.closed);
  assert.equal(stream.isOpen, false);
});

test("a stream whose way breaks closes as a broken connection, saying where", () => {
  const { sockets, transport } = rig();
  const closes: string[] = [];
  for (const [index, end] of [
    [0, (s: FakeSocket) => s.onclose?.()],
    [1, (s: FakeSocket) => s.status("UNAVAILABLE", "not connected")],
    [2, (s: FakeSocket) => s.answer(Uint8Array.of(9, 9))], // not sealed for this call
  ] as const) {
    const stream = transport.socket("/api/sessions/s/stream?from=0", "");
    stream.onclose = (code, reason) => closes.push(`${code} ${reason.split(":")[0]}`);
    sockets[index].onopen?.();
    end(sockets[index]);
  }
  assert.deepEqual(closes, ["1006 relay unreachable", "1006 machine offline", "1011 not this call's"]);
  // Closed by the page: said to nobody, the socket closed.
  const left = transport.socket("/api/sessions/s/stream?from=0", "");
  left.onclose = () => closes.push("again");
  sockets[3].onopen?.();
  left.close();
  sockets[3].onclose?.();
  assert.equal(closes.length, 3);
  assert.ok(sockets[3].closed);
});

test("the key exchange pins the machine's key, shows its fingerprint and refuses another", async () => {
  const { link, sockets } = rig();
  const pins = new Pins();
  const answer = encodeMessage([
    [1, fromHex(vectors.daemon_identity_public)],
    [3, fromHex(vectors.daemon_ephemeral_public)],
  ]);
  const exchange = (index: number) => {
    const made = exchangeKeys(link, pins);
    sockets[index].onopen?.();
    const head = JSON.parse(sockets[index].sent[0] as string);
    assert.deepEqual([head.method, head.e2e], ["betcode.v1.AgentService/ExchangeKeys", ""]); // plain
    const request = decodeMessage(sockets[index].sent[1] as Uint8Array);
    assert.equal(textOf(request, 1), "box 1");
    sockets[index].answer(answer);
    sockets[index].status("OK");
    return made;
  };
  const opened = await exchange(0);
  assert.equal(opened.fingerprint, fingerprint(fromHex(vectors.daemon_identity_public)));
  assert.equal(opened.session.nextCall(FETCH).header, `2;s=${vectors.daemon_ephemeral_public};c=1`);
  pins.setItem("betcode-pin:box 1", "07".repeat(32)); // as if the machine's key had changed
  await assert.rejects(exchange(1), KeyChanged);
});

test("a session the daemon forgot (it restarted) is made again once, and the call made again", async () => {
  const { link, sockets } = rig();
  const [stale, fresh] = [new TestSealing(), new TestSealing()];
  let rekeys = 0;
  const transport = new RelayTransport(link, stale, async () => {
    rekeys += 1;
    return fresh;
  });
  const forgotten = "end-to-end session unknown to the daemon (restarted?): exchange keys again";
  const settle = () => new Promise((resolve) => setImmediate(resolve));

  const reply = transport.request("GET", "/api/sessions", {});
  const stream = transport.socket("/api/sessions/s/stream?from=0", "");
  const closes: string[] = [];
  stream.onclose = (code, reason) => closes.push(`${code} ${reason.slice(0, 36)}`);
  for (const socket of sockets) {
    socket.onopen?.();
    socket.status("UNAVAILABLE", forgotten);
  }
  await settle();
  assert.equal(rekeys, 1); // one key exchange for both
  assert.deepEqual(closes, ["1006 end-to-end session unknown to the da"]); // the page reconnects
  const [retried] = sockets.slice(2);
  retried.onopen?.();
  assert.deepEqual([stale.calls.length, fresh.calls.length], [2, 1]);
  retried.answer(fromDaemon(1, fromHex(PYTHON.response)));
  retried.status("OK");
  assert.equal((await reply).status, 200);
  // The next stream uses the new session.
  transport.socket("/api/sessions/s/stream?from=0", "");
  assert.deepEqual(fresh.calls, [FETCH, SOCKET]);
  assert.equal(rekeys, 1);
});
