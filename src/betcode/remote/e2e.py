"""End-to-end encryption between a client and a daemon over the relay (SEC-13), scheme v2.

docs/RELAY.md ("End-to-end encryption") specifies it precisely enough to implement from; in
short:

* The daemon has a long-lived X25519 identity key (``<config dir>/certs/e2e.key``, 0600); its
  fingerprint is what a person checks and what clients pin on first use.
* Online (forward secret): the client sends an ephemeral X25519 key in ``ExchangeKeys``; the
  daemon answers an ephemeral key of its own (``daemon_ephemeral_pubkey``), kept in memory
  only. Keys come from HKDF-SHA256 over DH(client eph, daemon eph) || DH(client eph, daemon
  identity): the second secret authenticates the daemon (only its identity key computes it),
  the first gives forward secrecy (both ephemeral keys are gone once the session is).
* Sealed (for a machine that is offline, so requests can wait in the relay's buffer): the
  keys come from DH(client eph, daemon identity) alone, with the session's creation time bound
  in; the daemon remembers, on disk, which of these sessions' calls it has run. A call opened
  but never answered (the daemon died, or the tunnel dropped, before it took the request) may
  be opened once more, for the same method, while no other opening of it runs and, in the same
  daemon process, only if none of its requests reached the daemon: that is the relay delivering
  the same buffered request again, and the request's own idempotency makes a second store of it
  a no-op. A call the daemon answered is refused for good.
* Every call carries its number in the ``x-betcode-e2e`` header; every message is a
  ChaCha20-Poly1305 ``EncryptedPayload`` (random 12-byte nonce) whose associated data binds
  the call number, the direction, the message's counter within the call and the method. A
  repeated call number, or a message repeated, reordered, or moved to another call, method or
  direction, is refused.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from google.protobuf.message import DecodeError

from betcode.remote.owner_only import write_private
from betcode.v1 import tunnel_pb2

E2E_METADATA_KEY = "x-betcode-e2e"
VERSION = "2"
KEY_BYTES = 32
NONCE_BYTES = 12
HKDF_SALT = b"betcode-e2e-hkdf-salt-v1"
ONLINE_INFO = b"betcode-e2e-v2 online"
SEALED_INFO = b"betcode-e2e-v2 sealed"
AAD_LABEL = b"betcode-e2e-v2"
TO_DAEMON = b"c2d"
TO_CLIENT = b"d2c"
REPLAY_WINDOW = 1024  # call numbers more than this far below the highest are refused
CACHED_SESSIONS = 256  # online sessions a daemon keeps (the oldest is forgotten)
SEALED_MAX_AGE_SECONDS = 31 * 24 * 3600  # longer than the relay's longest buffer TTL
CLOCK_SKEW_SECONDS = 300
UNKNOWN_SESSION = "end-to-end session unknown to the daemon"


class E2EError(Exception):
    """A call or message refused: does not decrypt, replayed, reordered, moved, malformed."""


class UnknownSession(E2EError):
    """An online session the daemon no longer has (it restarted, or forgot the oldest): the
    client makes a new one."""


def raw_public(key: X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key: bytes) -> str:
    """SHA-256 of the identity public key, as 16 groups of 4 hex digits."""
    digest = hashlib.sha256(public_key).hexdigest()
    return ":".join(digest[i : i + 4] for i in range(0, len(digest), 4))


def _public_key(raw: bytes, what: str) -> X25519PublicKey:
    if len(raw) != KEY_BYTES:
        raise E2EError(f"{what} is not a {KEY_BYTES}-byte X25519 key")
    return X25519PublicKey.from_public_bytes(raw)


@dataclass(frozen=True)
class Keys:
    to_daemon: ChaCha20Poly1305
    to_client: ChaCha20Poly1305


def _expand(secret: bytes, info: bytes) -> Keys:
    material = HKDF(algorithm=hashes.SHA256(), length=64, salt=HKDF_SALT, info=info).derive(secret)
    return Keys(ChaCha20Poly1305(material[:32]), ChaCha20Poly1305(material[32:]))


def online_keys(
    ephemeral_secret: bytes,
    identity_secret: bytes,
    client_ephemeral: bytes,
    daemon_ephemeral: bytes,
    daemon_identity: bytes,
) -> Keys:
    info = ONLINE_INFO + client_ephemeral + daemon_ephemeral + daemon_identity
    return _expand(ephemeral_secret + identity_secret, info)


def sealed_keys(
    identity_secret: bytes, client_ephemeral: bytes, daemon_identity: bytes, created: int
) -> Keys:
    info = SEALED_INFO + client_ephemeral + daemon_identity + created.to_bytes(8, "big")
    return _expand(identity_secret, info)


def associated_data(call: int, direction: bytes, counter: int, method: str) -> bytes:
    return (
        AAD_LABEL
        + call.to_bytes(8, "big")
        + direction
        + counter.to_bytes(8, "big")
        + method.encode()
    )


@dataclass(frozen=True)
class Header:
    """The ``x-betcode-e2e`` value: ``2;s=<daemon eph hex>;c=<call>`` (online) or
    ``2;o=<client eph hex>;t=<created, unix s>;c=<call>`` (sealed)."""

    call: int
    daemon_ephemeral: bytes = b""  # online
    client_ephemeral: bytes = b""  # sealed
    created: int = 0  # sealed

    def value(self) -> str:
        if self.daemon_ephemeral:
            return f"{VERSION};s={self.daemon_ephemeral.hex()};c={self.call}"
        return f"{VERSION};o={self.client_ephemeral.hex()};t={self.created};c={self.call}"

    @classmethod
    def parse(cls, value: str) -> Header:
        version, *fields = value.split(";")
        if version != VERSION:
            raise E2EError(
                f"end-to-end scheme {version!r} is not supported (this daemon speaks "
                f"{VERSION}): update the client"
            )
        try:
            parts = dict(field.split("=", 1) for field in fields)
            call = int(parts["c"])
            if "s" in parts:
                header = cls(call, daemon_ephemeral=bytes.fromhex(parts["s"]))
            else:
                header = cls(
                    call, client_ephemeral=bytes.fromhex(parts["o"]), created=int(parts["t"])
                )
        except (KeyError, ValueError):
            raise E2EError("malformed end-to-end header") from None
        if call < 1 or len(header.daemon_ephemeral or header.client_ephemeral) != KEY_BYTES:
            raise E2EError("malformed end-to-end header")
        return header


def _seal(cipher: ChaCha20Poly1305, aad: bytes, plaintext: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    payload = tunnel_pb2.EncryptedPayload(
        ciphertext=cipher.encrypt(nonce, plaintext, aad), nonce=nonce
    )
    return payload.SerializeToString()


def _open(cipher: ChaCha20Poly1305, aad: bytes, data: bytes) -> bytes:
    payload = tunnel_pb2.EncryptedPayload()
    try:
        payload.ParseFromString(data)
        return cipher.decrypt(payload.nonce, payload.ciphertext, aad)
    except (InvalidTag, ValueError, DecodeError) as error:
        raise E2EError(
            f"a message failed to decrypt ({type(error).__name__}): tampered, replayed, "
            "reordered or from another call"
        ) from None


class CallCipher:
    """One call's messages: sealed and opened in order, each under its own counter."""

    def __init__(
        self, keys: Keys, call: int, method: str, *, daemon_side: bool, sealed: str = ""
    ) -> None:
        self.call = call
        self.sealed = sealed  # the sealed session's name (daemon side), "" for an online one
        self._method = method.lstrip("/")
        if daemon_side:
            self._out, self._out_dir = keys.to_client, TO_CLIENT
            self._in, self._in_dir = keys.to_daemon, TO_DAEMON
        else:
            self._out, self._out_dir = keys.to_daemon, TO_DAEMON
            self._in, self._in_dir = keys.to_client, TO_CLIENT
        self._sent = 0
        self._received = 0

    def seal(self, plaintext: bytes) -> bytes:
        aad = associated_data(self.call, self._out_dir, self._sent, self._method)
        self._sent += 1
        return _seal(self._out, aad, plaintext)

    def open(self, data: bytes) -> bytes:
        aad = associated_data(self.call, self._in_dir, self._received, self._method)
        plaintext = _open(self._in, aad, data)
        self._received += 1  # only a message that opened moves the counter on
        return plaintext


@dataclass
class ReplayWindow:
    """Call numbers seen: each at most once, none far below the highest."""

    highest: int = 0
    seen: set[int] = field(default_factory=set)

    def accept(self, call: int) -> bool:
        if call <= self.highest - REPLAY_WINDOW or call in self.seen:
            return False
        self.seen.add(call)
        if call > self.highest:
            self.highest = call
            self.seen = {seen for seen in self.seen if seen > call - REPLAY_WINDOW}
        return True


class ClientSession:
    """The client's side of one session: numbers its calls, makes each one's cipher."""

    def __init__(self, keys: Keys, header: Header) -> None:
        self._keys = keys
        self._header = header
        self._calls = itertools.count(1)

    @property
    def forward_secret(self) -> bool:
        return bool(self._header.daemon_ephemeral)

    def next_call(self, method: str) -> tuple[str, CallCipher]:
        """The call's ``x-betcode-e2e`` value and its cipher."""
        call = next(self._calls)
        header = Header(
            call,
            self._header.daemon_ephemeral,
            self._header.client_ephemeral,
            self._header.created,
        )
        return header.value(), CallCipher(self._keys, call, method, daemon_side=False)

    @classmethod
    def sealed(cls, daemon_identity: bytes, *, now: float | None = None) -> ClientSession:
        """For a machine that cannot answer ExchangeKeys now (offline): sealed to its identity."""
        ephemeral = X25519PrivateKey.generate()
        public = raw_public(ephemeral.public_key())
        created = int(time.time() if now is None else now)
        shared = ephemeral.exchange(_public_key(daemon_identity, "the identity key"))
        keys = sealed_keys(shared, public, daemon_identity, created)
        return cls(keys, Header(0, client_ephemeral=public, created=created))


class ClientHandshake:
    """The client's ephemeral key, until the daemon's answer completes an online session."""

    def __init__(self) -> None:
        self._ephemeral = X25519PrivateKey.generate()
        self.public = raw_public(self._ephemeral.public_key())

    def request(self, machine_id: str) -> tunnel_pb2.KeyExchangeRequest:
        return tunnel_pb2.KeyExchangeRequest(machine_id=machine_id, ephemeral_pubkey=self.public)

    def complete(self, daemon_ephemeral: bytes, daemon_identity: bytes) -> ClientSession:
        """``daemon_identity`` must be the pinned (checked) key: an impostor without its
        private half derives other keys, and its first answer fails to decrypt."""
        eph_secret = self._ephemeral.exchange(
            _public_key(daemon_ephemeral, "the daemon's ephemeral key")
        )
        id_secret = self._ephemeral.exchange(_public_key(daemon_identity, "the identity key"))
        keys = online_keys(eph_secret, id_secret, self.public, daemon_ephemeral, daemon_identity)
        return ClientSession(keys, Header(0, daemon_ephemeral=daemon_ephemeral))


@dataclass
class _Online:
    keys: Keys
    window: ReplayWindow = field(default_factory=ReplayWindow)


@dataclass
class _Sealed:
    created: int
    window: ReplayWindow = field(default_factory=ReplayWindow)
    # Calls opened that the daemon never answered, with their method: each may be opened again.
    untaken: dict[int, str] = field(default_factory=dict)


class DaemonIdentity:
    """The daemon's identity key, its online sessions (memory only) and the calls of sealed
    sessions it has run (``replay_file``, so a buffered request delivered once is refused
    again even after a restart)."""

    def __init__(self, key: X25519PrivateKey, replay_file: Path | None = None) -> None:
        self._key = key
        self.public = raw_public(key.public_key())
        self.fingerprint = fingerprint(self.public)
        self._online: OrderedDict[bytes, _Online] = OrderedDict()
        # open_call may run in a worker thread (a sealed call writes its record) while the
        # event loop answers an ExchangeKeys: the sessions are changed under this lock.
        self._lock = threading.Lock()
        self._replay_file = replay_file
        self._sealed: dict[str, _Sealed] = self._load_sealed()
        self._running: set[tuple[str, int]] = set()  # sealed calls opened by this process
        # Sealed calls this process passed a request of to the daemon: never opened again here
        # (a relay cutting a call short after its request went in cannot make it run twice;
        # only a daemon that died meanwhile, which the relay cannot cause, opens it again).
        self._reached: set[tuple[str, int]] = set()

    @classmethod
    def load_or_create(cls, path: Path, replay_file: Path | None = None) -> DaemonIdentity:
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(key, X25519PrivateKey):
                raise E2EError(f"{path} is not an X25519 key")
            return cls(key, replay_file)
        key = X25519PrivateKey.generate()
        write_private(
            path,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        return cls(key, replay_file)

    def exchange(self, request: bytes) -> bytes:
        """Answers an ``ExchangeKeys`` request (serialized both ways): a fresh ephemeral key,
        and, for a request carrying the client's ephemeral key, a new online session."""
        parsed = tunnel_pb2.KeyExchangeRequest()
        try:
            parsed.ParseFromString(request)
        except DecodeError:
            raise E2EError("malformed KeyExchangeRequest") from None
        ephemeral = X25519PrivateKey.generate()
        daemon_ephemeral = raw_public(ephemeral.public_key())
        if parsed.ephemeral_pubkey:
            client = _public_key(bytes(parsed.ephemeral_pubkey), "the client's ephemeral key")
            keys = online_keys(
                ephemeral.exchange(client),
                self._key.exchange(client),
                bytes(parsed.ephemeral_pubkey),
                daemon_ephemeral,
                self.public,
            )
            with self._lock:
                self._online[daemon_ephemeral] = _Online(keys)
                while len(self._online) > CACHED_SESSIONS:
                    self._online.popitem(last=False)  # its keys go with it: no replay after
        response = tunnel_pb2.KeyExchangeResponse(
            daemon_identity_pubkey=self.public,
            daemon_fingerprint=self.fingerprint,
            daemon_ephemeral_pubkey=daemon_ephemeral,
        )
        return response.SerializeToString()

    def open_call(self, value: str, method: str, *, now: float | None = None) -> CallCipher:
        """The cipher of a relayed call whose ``x-betcode-e2e`` header is ``value``; refuses a
        call number this session has had (E2EError), an unknown session (UnknownSession)."""
        header = Header.parse(value)
        with self._lock:
            if not header.daemon_ephemeral:
                return self._open_sealed(header, method, time.time() if now is None else now)
            session = self._online.get(header.daemon_ephemeral)
            if session is None:
                raise UnknownSession(f"{UNKNOWN_SESSION} (restarted?): exchange keys again")
            if not session.window.accept(header.call):
                raise E2EError(f"call {header.call} of this session was already made (replay)")
            self._online.move_to_end(header.daemon_ephemeral)
            return CallCipher(session.keys, header.call, method, daemon_side=True)

    def _open_sealed(self, header: Header, method: str, now: float) -> CallCipher:
        age = now - header.created
        if age > SEALED_MAX_AGE_SECONDS or age < -CLOCK_SKEW_SECONDS:
            raise E2EError("a sealed call too old (or from the future) is refused")
        name = header.client_ephemeral.hex()
        record = self._sealed.get(name) or _Sealed(header.created)
        if record.created != header.created:
            raise E2EError("a sealed session's creation time changed")
        method = method.lstrip("/")
        call = (name, header.call)
        if record.window.accept(header.call):
            record.untaken[header.call] = method
        elif (
            record.untaken.get(header.call) != method
            or call in self._running
            or call in self._reached
        ):
            raise E2EError(f"call {header.call} of this sealed session already ran (replay)")
        self._running.add(call)
        self._sealed[name] = record
        self._save_sealed(now)
        client = _public_key(header.client_ephemeral, "the client's ephemeral key")
        keys = sealed_keys(
            self._key.exchange(client), header.client_ephemeral, self.public, header.created
        )
        return CallCipher(keys, header.call, method, daemon_side=True, sealed=name)

    def taken(self, cipher: CallCipher) -> None:
        """The daemon answered the sealed call (a message or its status): it never runs again.
        Written to disk before the answer leaves."""
        if not cipher.sealed:
            return
        with self._lock:
            record = self._sealed.get(cipher.sealed)
            if record is not None and record.untaken.pop(cipher.call, None) is not None:
                self._save_sealed(time.time())

    def reached(self, cipher: CallCipher) -> None:
        """A request of the sealed call is about to reach the daemon."""
        if cipher.sealed:
            with self._lock:
                self._reached.add((cipher.sealed, cipher.call))

    def ended(self, cipher: CallCipher) -> None:
        """The call's opening here is over, taken or not (an untaken one may come again)."""
        with self._lock:
            self._running.discard((cipher.sealed, cipher.call))

    def _load_sealed(self) -> dict[str, _Sealed]:
        if self._replay_file is None or not self._replay_file.exists():
            return {}
        try:
            data = json.loads(self._replay_file.read_text())
            return {
                name: _Sealed(
                    int(created),
                    ReplayWindow(int(highest), {int(c) for c in seen}),
                    {int(c): str(m) for c, m in (untaken[0] if untaken else {}).items()},
                )
                for name, (created, highest, seen, *untaken) in data.items()
            }
        except (OSError, ValueError, TypeError, AttributeError) as error:
            # Refusing every sealed call beats running one twice: the file is ours, 0600.
            raise E2EError(f"{self._replay_file} is unreadable: {error}") from None

    def _save_sealed(self, now: float) -> None:
        """Forgets sessions too old to be accepted anyway, then writes the rest (small: one
        entry per offline command in the last month)."""
        self._sealed = {
            name: record
            for name, record in self._sealed.items()
            if now - record.created <= SEALED_MAX_AGE_SECONDS
        }
        if self._replay_file is not None:
            data = {
                name: [
                    record.created,
                    record.window.highest,
                    sorted(record.window.seen),
                    record.untaken,
                ]
                for name, record in self._sealed.items()
            }
            write_private(self._replay_file, json.dumps(data).encode())
