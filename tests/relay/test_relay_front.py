"""The relay's one client address (relay/front.py) with a real relay (its own nats-server):
gRPC clients and browsers on the same TLS port at once, the ClientHello read without being
consumed (whole, in pieces, across records), what is not a hello closed without disturbing the
others, login attempts counted per real client address through the splice, the static files
and the browsers' token refresh."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from harness.forwarding import carry
from harness.relay import (
    Account,
    RelayProcess,
    bearer,
    betcode_argv,
    client_channel,
    register,
    relay_in_process,
)

from betcode.cli.exit_codes import ExitCode
from betcode.cli.relay_login import RelayChoice, relay_channel
from betcode.relay.front import (
    MAX_HELLO_BYTES,
    MAX_WAITING_PER_ADDRESS,
    NotClientHello,
    offered_protocols,
)
from betcode.relay.server import Relay
from betcode.v1 import auth_pb2, auth_pb2_grpc, machine_pb2, machine_pb2_grpc

HELLO_TIMEOUT = 1.0
# An HTTP/2 client's first bytes (RFC 9113 section 3.4) and an empty SETTINGS frame.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS_FRAME = 4


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[Relay]:
    async with relay_in_process(tmp_path / "relay", hello_timeout=HELLO_TIMEOUT) as relay:
        async with client_channel(relay) as channel:
            await register(channel, "alice")
        yield relay


def cli_channel(relay: Relay) -> grpc.aio.Channel:
    """The CLI's own relay channel (`betcode --relay URL --relay-custom-ca-cert CA`)."""
    choice = RelayChoice(f"https://127.0.0.1:{relay.port}", relay.options.files.ca_cert, "")
    return relay_channel(choice)


def tls_context(relay: Relay, *protocols: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(relay.options.files.ca_cert))
    if protocols:
        context.set_alpn_protocols(list(protocols))
    return context


@pytest.fixture
async def http(relay: Relay) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=tls_context(relay))
    async with aiohttp.ClientSession(f"https://127.0.0.1:{relay.port}", connector=connector) as s:
        yield s


async def browser_login(http: aiohttp.ClientSession, password: str = "pw-123456") -> Any:
    body = {"username": "alice", "password": password}
    async with http.post("/relay/api/login", json=body) as response:
        return response.status, await response.json()


async def grpc_login(channel: grpc.aio.Channel, password: str = "pw-123456") -> Account:
    stub = auth_pb2_grpc.AuthServiceStub(channel)
    reply = await stub.Login(auth_pb2.LoginRequest(username="alice", password=password))
    return Account(reply.user_id, reply.access_token, reply.refresh_token)


async def test_grpc_clients_and_browsers_are_served_on_the_same_port_at_once(
    relay: Relay, http: aiohttp.ClientSession
) -> None:
    async def grpc_client() -> list[str]:
        async with cli_channel(relay) as channel:
            account = await grpc_login(channel)
            stub = machine_pb2_grpc.MachineServiceStub(channel)
            names = []
            for _ in range(5):
                listed = await stub.ListMachines(
                    machine_pb2.ListMachinesRequest(), metadata=bearer(account.access)
                )
                names.append(f"machines:{len(listed.machines)}")
            return names

    async def browser() -> list[str]:
        status, logged_in = await browser_login(http)
        assert status == 200, logged_in
        headers = {"Authorization": f"Bearer {logged_in['access_token']}"}
        seen = []
        for _ in range(5):
            async with http.get("/relay/api/machines", headers=headers) as listed:
                seen.append(f"machines:{len((await listed.json())['machines'])}")
        return seen

    grpc_seen, browser_seen = await asyncio.gather(grpc_client(), browser())
    assert grpc_seen == browser_seen == ["machines:0"] * 5


async def test_the_page_and_its_files_with_their_types_and_no_listing(
    relay: Relay, http: aiohttp.ClientSession
) -> None:
    expected = {
        "/": "text/html",
        "/static/relay.html": "text/html",
        "/static/app.css": "text/css",
        "/static/app.js": "text/javascript",
        "/sw.js": "text/javascript",
        "/install.js": "text/javascript",
        "/manifest.webmanifest": "application/manifest+json",
        "/icons/icon-192.png": "image/png",
        "/icons/icon-512.png": "image/png",
    }
    for path, content_type in expected.items():
        async with http.get(path) as response:
            assert response.status == 200, path
            assert response.content_type == content_type, path
            assert await response.read(), path
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    async with http.get("/") as page, http.get("/static/relay.html") as same:
        assert await page.read() == await same.read()
    for path in (
        "/static/",
        "/static",
        "/icons/app.css",
        "/static/nothing.js",
        "/static/..%2F__init__.py",
    ):
        async with http.get(path) as response:
            assert response.status == 404, path


async def tls_connect(
    relay: Relay, *protocols: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(
        "127.0.0.1", relay.port, ssl=tls_context(relay, *protocols), server_hostname="127.0.0.1"
    )


async def test_a_client_offering_only_h2_reaches_grpc_and_http_1_1_reaches_the_web_front(
    relay: Relay,
) -> None:
    reader, writer = await tls_connect(relay, "h2")
    assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
    writer.write(H2_PREFACE)
    header = await reader.readexactly(9)
    assert header[3] == SETTINGS_FRAME  # grpcio's HTTP/2 server answered
    writer.close()

    for offered in (("http/1.1",), ("h2", "http/1.1"), ()):
        reader, writer = await tls_connect(relay, *offered)
        chosen = writer.get_extra_info("ssl_object").selected_alpn_protocol()
        assert chosen == ("http/1.1" if offered else None), offered
        writer.write(b"GET / HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
        answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 200"), offered
        assert b"<!doctype html>" in answer.lower()
        writer.close()


def client_hello(relay: Relay, *protocols: str) -> bytes:
    """A real TLS client's ClientHello, made in memory."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = tls_context(relay, *protocols).wrap_bio(
        incoming, outgoing, server_hostname="127.0.0.1"
    )
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


async def test_a_hello_in_pieces_or_across_records_is_read_whole(relay: Relay) -> None:
    hello = client_hello(relay, "h2")
    assert offered_protocols(hello) == [b"h2"]
    body = hello[5:]
    assert hello[:1] == b"\x16"
    # The same handshake message in two records, as TLS allows.
    split = len(body) // 2
    two_records = b"".join(
        hello[:3] + len(part).to_bytes(2, "big") + part for part in (body[:split], body[split:])
    )
    assert offered_protocols(two_records) == [b"h2"]
    for cut in range(len(two_records)):
        assert offered_protocols(two_records[:cut]) is None

    for wire in (hello, two_records):
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        for at in range(0, len(wire), 50):  # in pieces, a little apart
            writer.write(wire[at : at + 50])
            await writer.drain()
            await asyncio.sleep(0.02)
        # The server's answer to the hello: a TLS handshake record from grpcio.
        answer = await asyncio.wait_for(reader.read(5), 5)
        assert answer[:1] == b"\x16", answer
        writer.close()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "not a TLS handshake record"),
        (b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00", "not a ClientHello"),
        (b"\x16\x03\x01\x00\x06\x01\x00\x00\x02\x03\x03", "ends inside a field"),
    ],
)
def test_what_is_not_a_client_hello_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(NotClientHello, match=reason):
        offered_protocols(data)


def hello_of(size: int) -> bytes:
    """A ClientHello message of exactly `size` bytes (padded with a padding extension, no ALPN),
    in records of at most 16 KiB."""
    fixed = b"\x03\x03" + b"\0" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    padding = size - len(fixed) - 2 - 4
    body = fixed + (padding + 4).to_bytes(2, "big") + b"\x00\x15" + padding.to_bytes(2, "big")
    message = b"\x01" + size.to_bytes(3, "big") + body + b"\0" * padding
    return b"".join(
        b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part
        for part in (message[at : at + (1 << 14)] for at in range(0, len(message), 1 << 14))
    )


def test_a_hello_as_large_as_allowed_is_read_within_one_peek() -> None:
    largest = hello_of(MAX_HELLO_BYTES)
    assert offered_protocols(largest) == []
    assert len(largest) < MAX_HELLO_BYTES + 64  # what peek_protocols reads at once
    with pytest.raises(NotClientHello, match="at most"):
        offered_protocols(hello_of(MAX_HELLO_BYTES + 1))


def oversized_hello() -> bytes:
    """A hello announcing more than the cap, sent in full records."""
    size = MAX_HELLO_BYTES * 2
    message = b"\x01" + size.to_bytes(3, "big") + b"\0" * size
    return b"".join(
        b"\x16\x03\x01" + (1 << 14).to_bytes(2, "big") + message[at : at + (1 << 14)]
        for at in range(0, 3 << 14, 1 << 14)
    )


async def test_garbage_slow_and_oversized_hellos_are_closed_without_disturbing_others(
    relay: Relay, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="betcode.relay.front")
    hello = client_hello(relay, "h2")
    bad: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
    for name in ("garbage", "slow", "oversized"):
        bad[name] = await asyncio.open_connection("127.0.0.1", relay.port)
    bad["garbage"][1].write(b"\x00\xff" * 4096)
    bad["oversized"][1].write(oversized_hello())

    async def slowly() -> None:
        for byte in hello:  # a byte at a time, never done within the time limit
            bad["slow"][1].write(bytes([byte]))
            await asyncio.sleep(0.1)

    dripping = asyncio.create_task(slowly())
    # Meanwhile, the others are served.
    async with cli_channel(relay) as channel:
        assert (await grpc_login(channel)).access
    status, _ = await browser_login(http)
    assert status == 200

    for name, (reader, writer) in bad.items():
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.wait_for(reader.read(), HELLO_TIMEOUT * 10) == b"", name
        writer.close()
    dripping.cancel()
    reasons = "\n".join(caplog.messages)
    assert "not a TLS handshake record" in reasons
    assert f"a ClientHello of {MAX_HELLO_BYTES * 2} bytes" in reasons
    assert "no ClientHello in time" in reasons
    # And after them too.
    async with cli_channel(relay) as channel:
        assert (await grpc_login(channel)).access


async def test_one_address_holds_only_so_many_connections_before_their_hello(
    relay: Relay, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="betcode.relay.front")
    idle = [
        await asyncio.open_connection("127.0.0.1", relay.port)
        for _ in range(MAX_WAITING_PER_ADDRESS)
    ]
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    with contextlib.suppress(ConnectionResetError):
        assert await asyncio.wait_for(reader.read(), HELLO_TIMEOUT / 2) == b""
    writer.close()
    assert "still in their handshake" in "\n".join(caplog.messages)
    # Another address is not held up by them.
    reader, writer = await asyncio.open_connection(
        "127.0.0.1",
        relay.port,
        ssl=tls_context(relay, "h2"),
        server_hostname="127.0.0.1",
        local_addr=("127.0.0.2", 0),
    )
    assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
    writer.close()
    for _, idle_writer in idle:
        idle_writer.close()
    # Once they are gone, this address is served again.
    async with asyncio.timeout(HELLO_TIMEOUT * 5):
        while True:
            try:
                async with cli_channel(relay) as channel:
                    assert (await grpc_login(channel)).access
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def forwarder(to_port: int, source: str) -> AsyncIterator[int]:
    """A loopback TCP forwarder whose connections to `to_port` come from `source` (another
    loopback address): what a client at that address looks like to the relay."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(
            "127.0.0.1", to_port, local_addr=(source, 0)
        )
        await asyncio.gather(carry(reader, up_writer), carry(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_login_attempts_are_counted_per_real_address_through_the_splice(
    relay: Relay,
) -> None:
    async def attempts(channel: grpc.aio.Channel, count: int) -> list[grpc.StatusCode]:
        codes = []
        for _ in range(count):
            try:
                await grpc_login(channel, "wrong-password")
            except grpc.aio.AioRpcError as error:
                codes.append(error.code())
        return codes

    root = relay.options.files.ca_cert.read_bytes()
    async with (
        forwarder(relay.port, "127.0.0.2") as port,
        grpc.aio.secure_channel(
            f"127.0.0.1:{port}", grpc.ssl_channel_credentials(root_certificates=root)
        ) as other,
    ):
        codes = await attempts(other, 11)
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * 10 + [grpc.StatusCode.RESOURCE_EXHAUSTED]
    # 127.0.0.1 is another client: its attempts are its own.
    async with cli_channel(relay) as channel:
        assert (await grpc_login(channel)).access
        assert await attempts(channel, 3) == [grpc.StatusCode.UNAUTHENTICATED] * 3


async def test_a_browser_refreshes_its_tokens_and_a_used_refresh_token_is_refused(
    relay: Relay, http: aiohttp.ClientSession
) -> None:
    status, logged_in = await browser_login(http)
    assert status == 200
    assert logged_in["refresh_token"]
    async with http.post("/relay/api/refresh", json=logged_in) as response:
        assert response.status == 200
        fresh = await response.json()
    assert set(fresh) == {"access_token", "refresh_token", "expires_in_secs"}
    assert fresh["refresh_token"] != logged_in["refresh_token"]
    headers = {"Authorization": f"Bearer {fresh['access_token']}"}
    async with http.get("/relay/api/machines", headers=headers) as listed:
        assert listed.status == 200

    body = {"refresh_token": logged_in["refresh_token"]}
    async with http.post("/relay/api/refresh", json=body) as response:
        assert response.status == 401
        assert "already used" in (await response.json())["error"]["message"]
    refusals: list[tuple[object, int]] = [
        ({"refresh_token": "not-a-token"}, 401),
        ({"refresh": "x"}, 400),
        ({"refresh_token": 7}, 400),
        ("not an object", 400),
    ]
    for refused, expected_status in refusals:
        async with http.post("/relay/api/refresh", json=refused) as response:
            assert response.status == expected_status, refused


async def test_the_unary_call_endpoint_checks_its_call_as_the_call_websocket_does(
    relay: Relay, http: aiohttp.ClientSession
) -> None:
    """A service worker without WebSocket calls the machine with one POST: the same head and
    checks (the browser test, tests/relay/test_relay_web_app.py, answers through it)."""
    _, logged_in = await browser_login(http)
    head = {
        "method": "betcode.v1.AgentService/ExchangeKeys",
        "token": logged_in["access_token"],
        "client_id": "web-notification",
        "messages": [base64.b64encode(b"\x0a\x03box").decode()],
    }
    refusals: list[tuple[object, str]] = [
        ({**head, "method": "grpc.health.v1.Health/Check"}, "not a BetCode method"),
        ({**head, "token": "bad\ntoken"}, "printable ASCII"),
        ({**head, "messages": ["not base64!"]}, "messages"),
        ({k: v for k, v in head.items() if k != "method"}, '{"method"'),
        ("not an object", '{"method"'),
    ]
    for refused, said in refusals:
        async with http.post("/relay/api/machines/box/unary", json=refused) as response:
            assert response.status == 400, refused
            error = (await response.json())["error"]
            assert error["code"] == "INVALID_ARGUMENT"
            assert said in error["message"], refused
    # Carried: the relay's own checks answer, as the call's status (a machine not the
    # account's; a token the relay never made).
    async with http.post("/relay/api/machines/box/unary", json=head) as response:
        assert response.status == 200
        reply = await response.json()
    assert reply["code"] in ("NOT_FOUND", "PERMISSION_DENIED"), reply
    assert reply["messages"] == []
    async with http.post(
        "/relay/api/machines/box/unary", json={**head, "token": "not-a-token"}
    ) as response:
        assert (await response.json())["code"] == "UNAUTHENTICATED"


async def test_relay_start_serves_both_on_the_one_address_it_prints(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path / "relay")
    await asyncio.to_thread(relay.start)
    try:
        async with relay_channel(RelayChoice(relay.url, relay.ca, "")) as channel:
            stub = auth_pb2_grpc.AuthServiceStub(channel)
            await stub.Register(auth_pb2.RegisterRequest(username="alice", password="pw-123456"))
        context = ssl.create_default_context(cafile=str(relay.ca))
        connector = aiohttp.TCPConnector(ssl=context)
        async with aiohttp.ClientSession(relay.url, connector=connector) as http:
            async with http.get("/") as page:
                assert page.status == 200
                assert page.content_type == "text/html"
            status, _ = await browser_login(http)
            assert status == 200
    finally:
        relay.stop()
    gone = await asyncio.create_subprocess_exec(
        *betcode_argv("relay", "start", "--dir", str(relay.root), "--web-listen", "127.0.0.1:0"),
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await gone.communicate()
    assert gone.returncode == ExitCode.INVALID_ARGUMENTS
    assert b"No such option '--web-listen'" in err


async def test_relay_start_says_which_address_it_cannot_listen_on(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path / "relay")
    await asyncio.to_thread(relay.init)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        for option, other in (("--listen", "--tunnel-listen"), ("--tunnel-listen", "--listen")):
            start = await asyncio.create_subprocess_exec(
                *betcode_argv("relay", "start", "--dir", str(relay.root)),
                *(option, f"127.0.0.1:{port}", other, "127.0.0.1:0"),
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await start.communicate()
            assert start.returncode == 1, err
            assert f"Error: cannot listen on 127.0.0.1:{port}".encode() in err, err
            assert b"Traceback" not in err
