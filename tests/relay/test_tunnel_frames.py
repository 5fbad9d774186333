"""TunnelFrame helpers both ends share."""

from __future__ import annotations

import grpc

from betcode.remote import frames


def test_method_names_in_both_spellings() -> None:
    full = "betcode.v1.AgentService/Converse"
    assert frames.full_method(full) == full
    assert frames.full_method("/" + full) == full
    assert frames.full_method("AgentService/Converse") == full  # the Rust relay's form


def test_status_and_binary_trailers_survive_an_error_frame() -> None:
    trailers = (("betcode-error-code", "NO_INPUT_LOCK"), ("betcode-error-details-bin", b"\x00{}"))
    frame = frames.error_frame("r1", grpc.StatusCode.FAILED_PRECONDITION, "locked", trailers)
    assert frames.error_status(frame.error) == grpc.StatusCode.FAILED_PRECONDITION
    assert sorted(frames.error_trailers(frame.error)) == sorted(trailers)  # a map: no order
    assert frames.relay_target("https://relay.example:8443/") == "relay.example:8443"
    assert frames.relay_target("relay.example") == "relay.example:443"
