"""Local OTLP receivers for tests, built from the OTLP protobuf definitions (opentelemetry-proto):
a grpc TraceService and an HTTP handler of POST /v1/traces. No external collector."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2


class Received:
    """Every span the receiver got, by name."""

    def __init__(self) -> None:
        self.spans: list[trace_pb2.Span] = []
        self.changed = threading.Event()

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.spans.extend(scope.spans)
        self.changed.set()

    def named(self, name: str) -> list[trace_pb2.Span]:
        return [span for span in self.spans if span.name == name]

    async def until(self, names: set[str], within_s: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + within_s
        while not names <= {span.name for span in self.spans}:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"spans {names} not all received: {self.names()}")
            await asyncio.sleep(0.1)

    def names(self) -> list[str]:
        return sorted(span.name for span in self.spans)


class TraceReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, received: Received) -> None:
        self.received = received

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.received.add(request)
        return trace_service_pb2.ExportTraceServiceResponse()


@asynccontextmanager
async def grpc_receiver() -> AsyncIterator[tuple[str, Received]]:
    """(endpoint URL, what it received) of a grpc OTLP receiver on a free loopback port."""
    received = Received()
    server = grpc.aio.server()
    # opentelemetry-proto's generated *_pb2_grpc modules are unannotated and have no stubs.
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceReceiver(received), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"http://127.0.0.1:{port}", received
    await server.stop(0)


@contextmanager
def http_receiver() -> Iterator[tuple[str, Received]]:
    """(endpoint URL, what it received) of an OTLP/HTTP receiver on a free loopback port."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            assert self.path == "/v1/traces"
            received.add(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()
    server.server_close()
