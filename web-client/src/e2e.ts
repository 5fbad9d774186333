// The end-to-end scheme, version 2 (docs/RELAY.md "End-to-end encryption"), the client's side of
// an online session, as the CLI speaks it: X25519 (RFC 7748), HKDF-SHA256, ChaCha20-Poly1305
// (RFC 8439) from the audited @noble packages (WebCrypto has no ChaCha20-Poly1305, and its
// X25519 is missing from older mobile browsers). What goes through a relay is sealed here, in
// the browser: the relay and NATS see only ciphertext. Tested against vectors made by the
// Python implementation (scripts/e2e_vectors.py, test/e2e.test.ts).
import { chacha20poly1305 } from "@noble/ciphers/chacha.js";
import { x25519 } from "@noble/curves/ed25519.js";
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { bytesOf, concat, decodeMessage, encodeMessage } from "./proto";

export const VERSION = "2";
const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const encoder = new TextEncoder();
const HKDF_SALT = encoder.encode("betcode-e2e-hkdf-salt-v1");
const ONLINE_INFO = encoder.encode("betcode-e2e-v2 online");
const SEALED_INFO = encoder.encode("betcode-e2e-v2 sealed");
const AAD_LABEL = encoder.encode("betcode-e2e-v2");
const TO_DAEMON = encoder.encode("c2d");
const TO_CLIENT = encoder.encode("d2c");

export class E2EError extends Error {}

/** The daemon's identity key is not the one pinned for this machine: refused, as in the CLI,
 * until the user trusts the new one (having checked its fingerprint on the machine). */
export class KeyChanged extends E2EError {
  constructor(
    readonly machineId: string,
    readonly pinned: string,
    readonly offered: string,
  ) {
    super(
      `the machine ${machineId} answered with another identity key (fingerprint ${offered}, ` +
        `pinned ${pinned}): refused. Check \`betcode daemon status\` on the machine before ` +
        "trusting the new key.",
    );
  }
}

function u64(value: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(value));
  return out;
}

export function hex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function fromHex(text: string): Uint8Array {
  if (text.length % 2 || /[^0-9a-f]/i.test(text)) throw new E2EError("not hex");
  return Uint8Array.from(text.match(/../g) ?? [], (pair) => parseInt(pair, 16));
}

/** SHA-256 of the identity public key, as 16 groups of 4 hex digits (what `betcode daemon
 * status` shows on the machine). */
export function fingerprint(identity: Uint8Array): string {
  return (hex(sha256(identity)).match(/.{4}/g) ?? []).join(":");
}

function checkKey(key: Uint8Array, what: string): Uint8Array {
  if (key.length !== KEY_BYTES) throw new E2EError(`${what} is not a ${KEY_BYTES}-byte X25519 key`);
  return key;
}

// ---- EncryptedPayload {bytes ciphertext = 1; bytes nonce = 2;} ----

export function encodePayload(ciphertext: Uint8Array, nonce: Uint8Array): Uint8Array {
  return encodeMessage([
    [1, ciphertext],
    [2, nonce],
  ]);
}

export function decodePayload(data: Uint8Array): { ciphertext: Uint8Array; nonce: Uint8Array } {
  let fields;
  try {
    fields = decodeMessage(data);
  } catch (error) {
    throw new E2EError(`an encrypted message does not parse: ${(error as Error).message}`);
  }
  return { ciphertext: bytesOf(fields, 1), nonce: bytesOf(fields, 2) };
}

// ---- sessions and calls ----

interface Keys {
  toDaemon: Uint8Array;
  toClient: Uint8Array;
}

function associatedData(call: number, direction: Uint8Array, counter: number, method: string): Uint8Array {
  return concat(AAD_LABEL, u64(call), direction, u64(counter), encoder.encode(method));
}

/** One call's messages, sealed and opened in order, each under its own counter. */
export class CallCipher {
  private sent = 0;
  private received = 0;
  private readonly method: string;

  constructor(
    private readonly keys: Keys,
    readonly call: number,
    method: string,
  ) {
    this.method = method.replace(/^\//, "");
  }

  /** A request message (its protobuf bytes) as a serialized EncryptedPayload. `nonce` is for
   * tests only: by default 12 random bytes. */
  seal(plaintext: Uint8Array, nonce: Uint8Array = crypto.getRandomValues(new Uint8Array(NONCE_BYTES))): Uint8Array {
    const aad = associatedData(this.call, TO_DAEMON, this.sent, this.method);
    this.sent += 1;
    return encodePayload(chacha20poly1305(this.keys.toDaemon, nonce, aad).encrypt(plaintext), nonce);
  }

  /** A response message; E2EError for one tampered, replayed, reordered or from another call. */
  open(data: Uint8Array): Uint8Array {
    const { ciphertext, nonce } = decodePayload(data);
    const aad = associatedData(this.call, TO_CLIENT, this.received, this.method);
    let plaintext: Uint8Array;
    try {
      plaintext = chacha20poly1305(this.keys.toClient, nonce, aad).decrypt(ciphertext);
    } catch {
      throw new E2EError("a message failed to decrypt: tampered, replayed, reordered or from another call");
    }
    this.received += 1; // only a message that opened moves the counter on
    return plaintext;
  }
}

/** A session: numbers its calls; each call's `x-betcode-e2e` value and cipher. Online (forward
 * secret, from ExchangeKeys) or sealed to the pinned identity key (`sealedSession`). */
export class ClientSession {
  private calls = 0;

  constructor(
    private readonly keys: Keys,
    private readonly headerFields: string, // `s=<daemon eph>` or `o=<client eph>;t=<created>`
  ) {}

  nextCall(method: string): { header: string; cipher: CallCipher } {
    this.calls += 1;
    const header = `${VERSION};${this.headerFields};c=${this.calls}`;
    return { header, cipher: new CallCipher(this.keys, this.calls, method) };
  }
}

function expand(ikm: Uint8Array, info: Uint8Array): Keys {
  const okm = hkdf(sha256, ikm, HKDF_SALT, info, 64);
  return { toDaemon: okm.slice(0, 32), toClient: okm.slice(32, 64) };
}

/** For a machine that cannot answer ExchangeKeys now (offline): requests sealed to its pinned
 * identity key can wait in the relay's buffer and run once it is back (no forward secrecy for
 * the daemon's side). `secret` and `now` are for tests only. */
export function sealedSession(
  identity: Uint8Array,
  now: number = Date.now(),
  secret: Uint8Array = x25519.utils.randomSecretKey(),
): ClientSession {
  const publicKey = x25519.getPublicKey(secret);
  const created = Math.floor(now / 1000);
  const ikm = x25519.getSharedSecret(secret, checkKey(identity, "the identity key"));
  const keys = expand(ikm, concat(SEALED_INFO, publicKey, identity, u64(created)));
  return new ClientSession(keys, `o=${hex(publicKey)};t=${created}`);
}

/** The browser's ephemeral key until the daemon's KeyExchangeResponse completes a session.
 * `secret` is for tests only. */
export class ClientHandshake {
  private readonly secret: Uint8Array;
  readonly publicKey: Uint8Array;

  constructor(secret: Uint8Array = x25519.utils.randomSecretKey()) {
    this.secret = secret;
    this.publicKey = x25519.getPublicKey(secret);
  }

  /** `identity` must be the pinned (checked) key: an impostor without its private half
   * derives other keys, and its first answer fails to open. */
  complete(daemonEphemeral: Uint8Array, identity: Uint8Array): ClientSession {
    const ikm = concat(
      x25519.getSharedSecret(this.secret, checkKey(daemonEphemeral, "the daemon's ephemeral key")),
      x25519.getSharedSecret(this.secret, checkKey(identity, "the identity key")),
    );
    const info = concat(ONLINE_INFO, this.publicKey, daemonEphemeral, identity);
    return new ClientSession(expand(ikm, info), `s=${hex(daemonEphemeral)}`);
  }
}

// ---- pinning the machine's identity key ----

/** Where pinned keys are kept: the page's localStorage, a Map in tests. */
export interface PinStore {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

const PIN_PREFIX = "betcode-pin:";

/** Where a machine's pinned key is kept (the page's localStorage, and IndexedDB for the
 * service worker). */
export function pinKey(machineId: string): string {
  return PIN_PREFIX + machineId;
}

/** First use pins the machine's identity key (returns its fingerprint, to show for checking);
 * any other key later is refused with KeyChanged. */
export function checkPinned(store: PinStore, machineId: string, identity: Uint8Array): string {
  checkKey(identity, "the identity key");
  const offered = fingerprint(identity);
  const pinned = store.getItem(pinKey(machineId));
  if (pinned === null) store.setItem(pinKey(machineId), hex(identity));
  else if (pinned !== hex(identity)) throw new KeyChanged(machineId, fingerprint(fromHex(pinned)), offered);
  return offered;
}

/** The key pinned for a machine (null: none yet). */
export function pinnedIdentity(store: PinStore, machineId: string): Uint8Array | null {
  const pinned = store.getItem(pinKey(machineId));
  return pinned === null ? null : fromHex(pinned);
}

/** After the user checked the new fingerprint on the machine: `betcode machine trust`'s twin. */
export function trust(store: PinStore, machineId: string, identity: Uint8Array): void {
  store.setItem(pinKey(machineId), hex(checkKey(identity, "the identity key")));
}
