// Pairing through the relay in the page (src/pairing.ts): the QR code's fragment and the typed
// form read; the machine's key from the QR code pinned before the key exchange, so that a
// machine presenting another key is refused before the daemon's code is sent anywhere. A pairing
// that fails after the relay's login revokes that login and says why.
// (tests/relay/test_relay_pairing.py runs the relay's side, the browser test the whole way.)
import assert from "node:assert/strict";
import { test } from "node:test";
import { fromHex, hex, KeyChanged } from "../src/e2e";
import { FETCH } from "../src/gateway";
import { encodeMessage } from "../src/proto";
import { NotPaired, pairThroughRelay, readPairing, readTypedPairing, type DeviceLogin, type PairingWays, type RelayPairing } from "../src/pairing";
import { RelayRefused, Unreachable } from "../src/transport";
import vectors from "./e2e-vectors.json";
import { FakeSocket, Pins } from "./fakes";

const KEY = vectors.daemon_identity_public;

test("the QR code's fragment: ticket, code, machine and key", () => {
  const pairing = readPairing(`#pair=ABCDEFGHJK.12345678&machine=box-1&key=${KEY.toUpperCase()}`);
  assert.ok(pairing);
  assert.deepEqual([pairing.ticket, pairing.code, pairing.machineId], ["ABCDEFGHJK", "12345678", "box-1"]);
  assert.equal(hex(pairing.key as Uint8Array), KEY);
  for (const malformed of [
    "",
    "#code=12345678",
    `#pair=ABCDEFGHJK.12345678&key=${KEY}`, // no machine
    "#pair=ABCDEFGHJK.12345678&machine=box", // no key
    `#pair=ABCDEFGHJK.12345678&machine=box&key=${KEY.slice(2)}`,
    `#pair=ABCDEFGHJ.K12345678&machine=box&key=${KEY}`, // the ticket one short
    `#pair=ABCDEFGHJK.12345678.9&machine=box&key=${KEY}`,
    `#pair=ABCDEFGHJK.1234567U&machine=box&key=${KEY}`, // U is no Crockford character
  ]) {
    assert.equal(readPairing(malformed), null, malformed);
  }
});

test("the typed form, in any case, with spaces or dashes, O for 0, I or L for 1", () => {
  assert.deepEqual(readTypedPairing(" abcde-fghjk 1234-567o "), {
    ticket: "ABCDEFGHJK",
    code: "12345670",
    machineId: "",
    key: null,
  });
  assert.deepEqual(readTypedPairing("ILLLL-00000-1111-2222")?.ticket, "1111100000");
  assert.equal(readTypedPairing("ABCDE-FGHJK-1234"), null);
});

const LOGIN: DeviceLogin = {
  access_token: "device-access",
  refresh_token: "device-refresh",
  expires_in_secs: 900,
  user_id: "alice",
  machine_id: "box 1",
  device_id: "d-1",
};

function ways(
  answered: DeviceLogin = LOGIN,
  revocation: () => Promise<void> = async () => {},
): { ways: PairingWays; sockets: FakeSocket[]; pins: Pins; asked: string[]; revoked: string[] } {
  const sockets: FakeSocket[] = [];
  const pins = new Pins();
  const asked: string[] = [];
  const revoked: string[] = [];
  return {
    sockets,
    pins,
    asked,
    revoked,
    ways: {
      pins,
      name: "Chromium on Android",
      async pairAtRelay(ticket, name) {
        asked.push(`${ticket} ${name}`);
        return answered;
      },
      async revokeAtRelay(login) {
        revoked.push(login.device_id);
        await revocation();
      },
      link: (login) => ({
        origin: "wss://relay.test",
        machineId: login.machine_id,
        clientId: "web-phone",
        token: () => login.access_token,
        openSocket: (url, protocols) => {
          const socket = new FakeSocket(url, protocols);
          sockets.push(socket);
          return socket;
        },
      }),
    },
  };
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

/** A pairing refused after the relay's login, for `cause`, that login revoked (or not). */
function notPaired(cause: new (...args: never[]) => Error, revoked = true): (error: unknown) => boolean {
  return (error) => error instanceof NotPaired && error.cause instanceof cause && error.revoked === revoked;
}

/** Answers the page's ExchangeKeys call with the identity key `identity`. */
async function answerExchange(socket: FakeSocket, identity: string): Promise<void> {
  socket.onopen?.();
  assert.equal(JSON.parse(socket.sent[0] as string).method, "betcode.v1.AgentService/ExchangeKeys");
  assert.equal(JSON.parse(socket.sent[0] as string).token, "device-access"); // the device login's
  socket.answer(encodeMessage([[1, fromHex(identity)], [3, fromHex(vectors.daemon_ephemeral_public)]]));
  socket.status("OK");
  await tick();
}

function qrPairing(key = KEY): RelayPairing {
  return { ticket: "ABCDEFGHJK", code: "12345678", machineId: "box 1", key: fromHex(key) };
}

test("the QR code's key is pinned before the exchange: another key is refused, no code sent", async () => {
  const { ways: steps, sockets, pins, asked, revoked } = ways();
  const pairing = pairThroughRelay(qrPairing(), steps);
  await tick();
  assert.deepEqual(asked, ["ABCDEFGHJK Chromium on Android"]);
  assert.equal(pins.getItem("betcode-pin:box 1"), KEY);
  const refused = assert.rejects(pairing, notPaired(KeyChanged));
  await answerExchange(sockets[0], "07".repeat(32)); // not the QR code's
  await refused;
  assert.equal(sockets.length, 1); // the daemon's code went nowhere
  assert.deepEqual(revoked, ["d-1"]); // nor is the relay's login left behind
});

test("the QR code replaces an older pin; the daemon's code then goes sealed to the gateway", async () => {
  const { ways: steps, sockets, pins } = ways();
  pins.setItem("betcode-pin:box 1", "07".repeat(32)); // a key the machine had before
  const pairing = pairThroughRelay(qrPairing(), steps);
  await tick();
  await answerExchange(sockets[0], KEY);
  const [, fetch] = sockets;
  fetch.onopen?.();
  const head = JSON.parse(fetch.sent[0] as string);
  assert.equal(head.method, FETCH);
  assert.match(head.e2e, new RegExp(`^2;s=${vectors.daemon_ephemeral_public};c=1$`)); // sealed
  assert.ok(!new TextDecoder().decode(fetch.sent[1] as Uint8Array).includes("12345678"));
  fetch.status("UNAVAILABLE", "not connected");
  await assert.rejects(pairing, notPaired(Unreachable));
});

test("a ticket for another machine than the QR code's is refused, nothing pinned", async () => {
  const { ways: steps, sockets, pins, revoked } = ways({ ...LOGIN, machine_id: "elsewhere" });
  await assert.rejects(pairThroughRelay(qrPairing(), steps), notPaired(RelayRefused));
  assert.equal(pins.getItem("betcode-pin:elsewhere"), null);
  assert.equal(sockets.length, 0);
  assert.deepEqual(revoked, ["d-1"]);
});

test("typed: the first exchange's key is pinned (no QR code to check it by)", async () => {
  const { ways: steps, sockets, pins } = ways();
  const pairing = pairThroughRelay(readTypedPairing("ABCDE-FGHJK-1234-5678") as RelayPairing, steps);
  await tick();
  await answerExchange(sockets[0], KEY);
  assert.equal(pins.getItem("betcode-pin:box 1"), KEY);
  sockets[1].onopen?.();
  sockets[1].status("PERMISSION_DENIED", "no");
  await assert.rejects(pairing, notPaired(RelayRefused));
});

test("a login that could not be revoked is said, with where to revoke it", async () => {
  const { ways: steps, sockets, revoked } = ways(LOGIN, async () => {
    throw new Unreachable("relay", "gone");
  });
  const pairing = pairThroughRelay(qrPairing(), steps);
  await tick();
  await answerExchange(sockets[0], KEY);
  sockets[1].onopen?.();
  sockets[1].status("UNAVAILABLE", "machine box 1 is offline");
  await assert.rejects(pairing, (error: unknown) => {
    assert.ok(notPaired(Unreachable, false)(error));
    assert.match((error as Error).message, /is offline\); this phone's relay sign-in could not be removed: revoke it under Paired phones$/);
    return true;
  });
  assert.deepEqual(revoked, ["d-1"]);
});

test("a revoked login is said so", async () => {
  const { ways: steps, sockets } = ways();
  const pairing = pairThroughRelay(qrPairing(), steps);
  await tick();
  const refused = assert.rejects(pairing, /before trusting the new key; this phone's relay sign-in was removed$/);
  await answerExchange(sockets[0], "07".repeat(32));
  await refused;
});
