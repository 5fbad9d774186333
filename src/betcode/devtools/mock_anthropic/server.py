"""The mock Anthropic Messages API server (stdlib HTTP, loopback, one thread per connection).

Every request is recorded. POST /v1/messages is answered by the Director's reply (SSE for
`stream: true`, a JSON message otherwise, or an API error); count_tokens and any other path
get a harmless answer, so the CLI never stalls on an unexpected call.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from betcode.devtools.mock_anthropic import sse
from betcode.devtools.mock_anthropic.director import Director
from betcode.devtools.mock_anthropic.replies import Reply
from betcode.devtools.mock_anthropic.scenarios import Scenario


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]
    body: Any  # the decoded JSON body; None when empty or not JSON
    received_at: float  # time.monotonic()

    @property
    def is_message(self) -> bool:
        return self.method == "POST" and self.path.split("?")[0] == "/v1/messages"


class ClientGone(Exception):
    """The client closed the connection while the mock was still answering."""


class MockAnthropic:
    """A scriptable stand-in for api.anthropic.com.

    Use `with MockAnthropic() as mock:` or `start()` / `stop()`; point a client at `base_url`.
    `delta_delay_s` pauses after every content delta of every stream (scenarios may override).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        delta_delay_s: float = 0.0,
        default_scenario: str = "plain",
    ) -> None:
        self.director = Director(default_scenario)
        self.delta_delay_s = delta_delay_s
        self._address = (host, port)
        self._requests: list[RecordedRequest] = []
        self._recorded = threading.Condition()
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> MockAnthropic:
        server = ThreadingHTTPServer(self._address, _Handler)
        server.daemon_threads = True
        server.mock = self  # type: ignore[attr-defined]
        self._server = server
        self._release.clear()
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; stalled answers end at once and open streams are abandoned."""
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None

    def __enter__(self) -> MockAnthropic:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the mock is not started; call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    # -- scripting ---------------------------------------------------------------------------

    def enqueue(self, *replies: Reply) -> None:
        self.director.enqueue(*replies)

    def register(self, name: str, scenario: Scenario) -> None:
        self.director.register(name, scenario)

    def release_stalls(self) -> None:
        """End every current and future stall at once (until the next start())."""
        self._release.set()

    # -- recording ---------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._recorded:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """The POST /v1/messages requests, in arrival order."""
        return [r for r in self.requests if r.is_message]

    def wait_for_message_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until at least `count` /v1/messages requests arrived; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._recorded:
            while sum(r.is_message for r in self._requests) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"the mock got fewer than {count} /v1/messages requests")
                self._recorded.wait(remaining)
            return [r for r in self._requests if r.is_message]

    def _record(self, request: RecordedRequest) -> None:
        with self._recorded:
            self._requests.append(request)
            self._recorded.notify_all()

    def _pause(self, seconds: float, connection: socket.socket) -> None:
        """Sleep up to `seconds`; end early on release/stop, ClientGone when the client hangs up."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if self._release.wait(min(remaining, 0.05)):
                return
            readable, _, _ = select.select([connection], [], [], 0)
            if readable and not connection.recv(1, socket.MSG_PEEK):
                raise ClientGone


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mock-anthropic"

    @property
    def mock(self) -> MockAnthropic:
        mock: MockAnthropic = self.server.mock  # type: ignore[attr-defined]
        return mock

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the recorded requests are the log."""

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None

    def _handle(self) -> None:
        body = self._read_body()
        request = RecordedRequest(
            self.command, self.path, dict(self.headers.items()), body, time.monotonic()
        )
        self.mock._record(request)
        path = self.path.split("?")[0]
        try:
            if request.is_message and isinstance(body, dict):
                self._answer_message(body)
            elif path == "/v1/messages/count_tokens":
                self._send_json(200, {"input_tokens": _input_tokens(body)})
            else:
                self._send_json(200, {})
        except (ClientGone, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _answer_message(self, body: dict[str, Any]) -> None:
        reply = self.mock.director.choose(body)
        request_id = self.mock.director.next_id("req")
        if reply.stall_before_s:
            self.mock._pause(reply.stall_before_s, self.connection)
        if reply.http_status is not None:
            error = sse.error_body(reply.http_status, reply.error_message, request_id)
            self._send_json(reply.http_status, error, {"request-id": request_id})
            return
        message_id = self.mock.director.next_id("msg")
        model = str(body.get("model", "claude-mock"))
        if not body.get("stream"):
            message = sse.message(reply, message_id, model, _input_tokens(body))
            self._send_json(200, message, {"request-id": request_id})
            return
        events = sse.stream_events(reply, message_id, model, _input_tokens(body))
        self._stream(reply, events, request_id)

    def _stream(self, reply: Reply, events: list[dict[str, Any]], request_id: str) -> None:
        # The stream ends when the connection closes, so no Content-Length and no keep-alive.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("request-id", request_id)
        self.end_headers()
        self.close_connection = True
        delay = self.mock.delta_delay_s if reply.delta_delay_s is None else reply.delta_delay_s
        deltas = 0
        for event in events:
            if event["type"] == "content_block_delta" and deltas == reply.stall_after_deltas:
                self.mock._pause(reply.stall_s, self.connection)
            self.wfile.write(sse.encode_event(event))
            if event["type"] == "content_block_delta":
                deltas += 1
                if delay:
                    self.mock._pause(delay, self.connection)


def _input_tokens(body: Any) -> int:
    """A deterministic stand-in for the prompt's token count."""
    messages = body.get("messages") if isinstance(body, dict) else None
    return 10 * max(1, len(messages) if isinstance(messages, list) else 1)
