"""gRPC's HTTP/2 mapping as bytes: message framing, timeouts, metadata and status encoding."""

from __future__ import annotations

import gzip
import zlib

import grpc
import pytest

from betcode.server.http2.wire import (
    DECOMPRESSORS,
    MessageDeframer,
    MessageTooLarge,
    encode_status_message,
    metadata_headers,
    metadata_of,
    parse_timeout,
    status_headers,
)


def framed(payload: bytes, compressed: bool = False) -> bytes:
    return bytes([int(compressed)]) + len(payload).to_bytes(4, "big") + payload


def test_messages_split_across_data_frames_are_joined() -> None:
    deframer = MessageDeframer(max_message_bytes=1024)
    wire = framed(b"first") + framed(b"") + framed(b"third", compressed=True)
    received = [message for byte in wire for message in deframer.feed(bytes([byte]))]
    assert received == [(False, b"first"), (False, b""), (True, b"third")]
    assert not deframer.partial


def test_several_messages_in_one_data_frame_come_out_in_order() -> None:
    deframer = MessageDeframer(max_message_bytes=1024)
    assert deframer.feed(framed(b"a") + framed(b"bb") + framed(b"ccc")[:4]) == [
        (False, b"a"),
        (False, b"bb"),
    ]
    assert deframer.partial
    assert deframer.feed(framed(b"ccc")[4:]) == [(False, b"ccc")]


def test_an_oversized_message_is_refused_from_its_prefix_alone() -> None:
    deframer = MessageDeframer(max_message_bytes=10)
    with pytest.raises(MessageTooLarge, match=r"larger than max \(11 vs. 10\)"):
        deframer.feed(framed(b"x" * 11)[:5])


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"1H", 3600.0),
        (b"2M", 120.0),
        (b"3S", 3.0),
        (b"250m", 0.25),
        (b"500u", 0.0005),
        (b"99999999n", 0.099999999),
        (b"", None),
        (b"S", None),
        (b"123456789S", None),  # more than 8 digits
        (b"10x", None),
        (b"-1S", None),
    ],
)
def test_grpc_timeout_values(value: bytes, seconds: float | None) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


def test_request_metadata_hides_protocol_headers_and_decodes_binary_values() -> None:
    headers = [
        (b":path", b"/s/m"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        (b"grpc-timeout", b"1S"),
        (b"x-client-id", b"cli-1"),
        (b"trace-bin", b"AAEC"),  # unpadded base64 of 00 01 02
        (b"user-agent", b"grpc-python"),
    ]
    assert metadata_of(headers) == (
        ("x-client-id", "cli-1"),
        ("trace-bin", b"\x00\x01\x02"),
        ("user-agent", "grpc-python"),
    )


def test_binary_metadata_is_sent_as_unpadded_base64() -> None:
    assert metadata_headers([("details-bin", b"\xff"), ("Code", "X")]) == [
        (b"details-bin", b"/w"),
        (b"code", b"X"),
    ]


def test_metadata_only_http2_may_send_is_left_out() -> None:
    sent = [("connection", "close"), ("TE", "trailers"), (":status", "500"), ("x-kept", "1")]
    assert metadata_headers(sent) == [(b"x-kept", b"1")]


def test_status_message_percent_encodes_what_is_not_printable_ascii() -> None:
    assert encode_status_message("no session 'x': 100% ✓\n") == (
        b"no session 'x': 100%25 %E2%9C%93%0A"
    )


def test_status_headers_carry_the_numeric_code_details_and_metadata() -> None:
    assert status_headers(grpc.StatusCode.NOT_FOUND, "gone", [("k", "v")]) == [
        (b"grpc-status", b"5"),
        (b"grpc-message", b"gone"),
        (b"k", b"v"),
    ]
    assert status_headers(grpc.StatusCode.OK, "", None) == [(b"grpc-status", b"0")]


def test_compressed_requests_inflate_within_the_size_limit() -> None:
    gzip_inflate, deflate_inflate = DECOMPRESSORS[b"gzip"], DECOMPRESSORS[b"deflate"]
    assert gzip_inflate is not None
    assert deflate_inflate is not None
    assert gzip_inflate(gzip.compress(b"hello"), 100) == b"hello"
    assert deflate_inflate(zlib.compress(b"hello"), 100) == b"hello"
    bomb = gzip.compress(b"\0" * 1_000_000)  # about 1 KB that inflates to 1 MB
    with pytest.raises(MessageTooLarge):
        gzip_inflate(bomb, 1000)
