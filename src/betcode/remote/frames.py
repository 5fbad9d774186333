"""TunnelFrames as both ends use them. One relayed gRPC call is one ``request_id``:

    relay → daemon   REQUEST (method, caller metadata; opens the call)
                     STREAM_DATA per request message, STREAM_END when the caller is done
                     ERROR (the caller went away: cancel)
    daemon → relay   STREAM_DATA per response message
                     STREAM_END (call OK; trailing metadata in ``stream_data.metadata``)
                     ERROR (gRPC status in ``details["grpc-status"]``, trailers too)

Message bytes travel in ``stream_data.encrypted.ciphertext``; the relay never parses them.
Binary metadata values (keys ending in ``-bin``) are carried base64-encoded."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from betcode.v1 import tunnel_pb2

REQUEST = tunnel_pb2.FRAME_TYPE_REQUEST
STREAM_DATA = tunnel_pb2.FRAME_TYPE_STREAM_DATA
STREAM_END = tunnel_pb2.FRAME_TYPE_STREAM_END
ERROR = tunnel_pb2.FRAME_TYPE_ERROR
CONTROL = tunnel_pb2.FRAME_TYPE_CONTROL

GRPC_STATUS_KEY = "grpc-status"
# Set by the daemon's tunnel on every call it makes for the relay (whatever the caller sent), so
# that a service kept for the machine's own user can refuse calls from afar.
RELAYED_METADATA = "x-betcode-relayed"
# Set by the relay on a paired device login's calls (whatever the caller sent): that login's
# device id, which the daemon records with the device credential it pairs (docs/RELAY.md).
RELAY_DEVICE_METADATA = "x-relay-device-id"
TRAILER_PREFIX = "trailer:"
STATUS_OF_VALUE = {status.value[0]: status for status in grpc.StatusCode}
TUNNEL_CODE_OF_STATUS = {
    grpc.StatusCode.NOT_FOUND: tunnel_pb2.TUNNEL_ERROR_CODE_NOT_FOUND,
    grpc.StatusCode.UNAUTHENTICATED: tunnel_pb2.TUNNEL_ERROR_CODE_UNAUTHORIZED,
    grpc.StatusCode.PERMISSION_DENIED: tunnel_pb2.TUNNEL_ERROR_CODE_UNAUTHORIZED,
    grpc.StatusCode.UNAVAILABLE: tunnel_pb2.TUNNEL_ERROR_CODE_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: tunnel_pb2.TUNNEL_ERROR_CODE_TIMEOUT,
    grpc.StatusCode.INVALID_ARGUMENT: tunnel_pb2.TUNNEL_ERROR_CODE_INVALID_ARGUMENT,
}
Metadata = Iterable[tuple[str, str | bytes]]
# The largest message one relayed call carries, either way (the gRPC limit of the relay's ports,
# the daemon's tunnel and the web gateway), and the largest frame carrying one: the message and
# room for its envelope (request id, sequence, nonce, timestamp).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_FRAME_BYTES = MAX_MESSAGE_BYTES + 64 * 1024


def relay_target(url: str) -> str:
    """``https://host:port`` or ``host:port`` → the gRPC target ``host:port``."""
    target = url.split("://", 1)[-1].rstrip("/")
    if ":" not in target.rsplit("]", 1)[-1]:
        target += ":443"
    return target


def _now() -> Timestamp:
    stamp = Timestamp()
    stamp.GetCurrentTime()
    return stamp


def encode_metadata(metadata: Metadata) -> dict[str, str]:
    encoded: dict[str, str] = {}
    for key, value in metadata:
        if isinstance(value, bytes):
            encoded[key] = base64.b64encode(value).decode()
        else:
            encoded[key] = value
    return encoded


def relayed_metadata(encoded: Mapping[str, str]) -> tuple[tuple[str, str | bytes], ...]:
    """A relayed call's metadata as the daemon's tunnel makes the call: marked relayed."""
    kept = {key: value for key, value in encoded.items() if key != RELAYED_METADATA}
    return (*decode_metadata(kept), (RELAYED_METADATA, "1"))


def decode_metadata(encoded: Mapping[str, str]) -> tuple[tuple[str, str | bytes], ...]:
    return tuple(
        (key, base64.b64decode(value) if key.endswith("-bin") else value)
        for key, value in encoded.items()
    )


def full_method(method: str) -> str:
    """``betcode.v1.AgentService/Converse``, also from the short ``AgentService/Converse``
    that the upstream Rust relay writes in ``StreamPayload.method``
    (docs/GRPC.md#upstream-compatibility)."""
    method = method.lstrip("/")
    service = method.split("/", 1)[0]
    return method if "." in service else f"betcode.v1.{method}"


def request_frame(request_id: str, method: str, metadata: Mapping[str, str]) -> bytes:
    payload = tunnel_pb2.StreamPayload(method=method, metadata=metadata)
    frame = tunnel_pb2.TunnelFrame(
        request_id=request_id, frame_type=REQUEST, timestamp=_now(), stream_data=payload
    )
    return frame.SerializeToString()


def data_frame(
    request_id: str, message: bytes, sequence: int, *, nonce: bytes = b"", ephemeral: bytes = b""
) -> tunnel_pb2.TunnelFrame:
    encrypted = tunnel_pb2.EncryptedPayload(
        ciphertext=message, nonce=nonce, ephemeral_pubkey=ephemeral
    )
    return tunnel_pb2.TunnelFrame(
        request_id=request_id,
        frame_type=STREAM_DATA,
        timestamp=_now(),
        stream_data=tunnel_pb2.StreamPayload(encrypted=encrypted, sequence=sequence),
    )


def end_frame(request_id: str, trailers: Metadata = ()) -> tunnel_pb2.TunnelFrame:
    return tunnel_pb2.TunnelFrame(
        request_id=request_id,
        frame_type=STREAM_END,
        timestamp=_now(),
        stream_data=tunnel_pb2.StreamPayload(metadata=encode_metadata(trailers)),
    )


def error_frame(
    request_id: str, status: grpc.StatusCode, message: str, trailers: Metadata = ()
) -> tunnel_pb2.TunnelFrame:
    details = {TRAILER_PREFIX + k: v for k, v in encode_metadata(trailers).items()}
    details[GRPC_STATUS_KEY] = str(status.value[0])
    return tunnel_pb2.TunnelFrame(
        request_id=request_id,
        frame_type=ERROR,
        timestamp=_now(),
        error=tunnel_pb2.TunnelError(
            code=TUNNEL_CODE_OF_STATUS.get(status, tunnel_pb2.TUNNEL_ERROR_CODE_INTERNAL),
            message=message,
            details=details,
        ),
    )


def error_status(error: tunnel_pb2.TunnelError) -> grpc.StatusCode:
    try:
        return STATUS_OF_VALUE[int(error.details.get(GRPC_STATUS_KEY, "13"))]
    except (KeyError, ValueError):
        return grpc.StatusCode.INTERNAL


def error_trailers(error: tunnel_pb2.TunnelError) -> tuple[tuple[str, str | bytes], ...]:
    return decode_metadata(
        {
            key.removeprefix(TRAILER_PREFIX): value
            for key, value in error.details.items()
            if key.startswith(TRAILER_PREFIX)
        }
    )


# Per-call flow control between our relay and our daemon (not in the upstream protocol, so
# only used when the REQUEST frame's metadata offers it): the daemon sends at most WINDOW
# messages ahead; the relay grants more, CREDIT_BATCH at a time, as its caller reads them.
# The trailer of a call the relay keeps for an offline machine (relay/buffer.py): its place.
BUFFERED_TRAILER = "x-betcode-buffered"
# A Converse opened with this metadata (`ACK_RECORDED`) is answered by its end: the daemon ends
# it, OK, once the caller half-closed and each of its requests is recorded (or refused), so a
# buffered message into an existing session is deleted from the buffer only then.
ACK_METADATA = "x-betcode-ack"
ACK_RECORDED = "recorded"
FLOW_METADATA_KEY = "x-betcode-flow-window"
CREDIT_PARAM = "credit"
WINDOW = 256
CREDIT_BATCH = 64


# Certificate renewal over the tunnel (SEC-03): the daemon sends a CSR for a new key, the
# relay answers the certificate it issued (and from then on accepts only that one).
RENEW_CSR_PARAM = "renew_csr"
CERTIFICATE_PARAM = "certificate_pem"
# relay → daemon: a device login paired with this machine was revoked at the relay (its id).
REVOKED_DEVICE_PARAM = "revoked_device"


def credit_frame(request_id: str, count: int) -> tunnel_pb2.TunnelFrame:
    frame = control_frame(tunnel_pb2.TUNNEL_CONTROL_TYPE_UNSPECIFIED, {CREDIT_PARAM: str(count)})
    frame.request_id = request_id
    return frame


def control_frame(
    kind: tunnel_pb2.TunnelControlType.ValueType, params: Mapping[str, str] | None = None
) -> tunnel_pb2.TunnelFrame:
    return tunnel_pb2.TunnelFrame(
        frame_type=CONTROL,
        timestamp=_now(),
        control=tunnel_pb2.TunnelControl(control_type=kind, params=params or {}),
    )
