"""A browser-protocol client of the daemon's web client (no browser): the JSON endpoints and the
per-session WebSocket, with a credential (the owner's access token, or a device's from
`sign_in`) as `Authorization: Bearer`, recording every event it gets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol, TypeVar

import aiohttp

T = TypeVar("T")


class ApiClient:
    """What a page does with the JSON endpoints, on whatever carries its `call`s."""

    async def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        raise NotImplementedError

    async def stream(self, session_id: str, after: int = 0) -> WebStream:
        raise NotImplementedError

    async def create_session(self, directory: str) -> str:
        status, body = await self.call("POST", "/api/sessions", {"working_directory": directory})
        assert status == 201, body
        return str(body["session_id"])

    async def answer(self, request_id: str, **body: object) -> dict[str, Any]:
        status, reply = await self.call("POST", f"/api/permissions/{request_id}", body)
        assert status == 200, reply
        return dict(reply)


class WebClient(ApiClient):
    def __init__(self, base_url: str, credential: str, client_id: str = "web-test") -> None:
        self.base_url = base_url
        self.client_id = client_id
        self.http = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {credential}", "X-BetCode-Client": client_id}
        )

    async def call(self, method: str, path: str, body: object = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        async with self.http.request(method, self.base_url + path, data=data) as response:
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, text

    async def stream(self, session_id: str, after: int = 0) -> WebStream:
        url = (
            f"{self.base_url}/api/sessions/{session_id}/stream?from={after}&client={self.client_id}"
        )
        socket = await self.http.ws_connect(url)
        return WebStream(socket)

    async def close(self) -> None:
        await self.http.close()


async def new_link(base_url: str, owner_token: str) -> str:
    """A one-time sign-in link, as `betcode web` prints it: `BASE/#link=SECRET`."""
    owner = WebClient(base_url, owner_token)
    try:
        status, made = await owner.call("POST", "/api/links")
        assert status == 201, made
        return f"{base_url}/#link={made['link']}"
    finally:
        await owner.close()


async def new_pairing_code(base_url: str, owner_token: str) -> str:
    """A pairing code, as `betcode web pair` shows it (`ABCD-EFGH`)."""
    owner = WebClient(base_url, owner_token)
    try:
        status, made = await owner.call("POST", "/api/pairing-codes")
        assert status == 201, made
        return str(made["code"])
    finally:
        await owner.close()


async def sign_in(base_url: str, owner_token: str, name: str = "test browser") -> dict[str, Any]:
    """A new device, as a page gets it: a one-time link made by the owner, exchanged once;
    `{"device_id", "name", "credential"}`."""
    link = (await new_link(base_url, owner_token)).rsplit("#link=", 1)[1]
    stranger = WebClient(base_url, "")
    try:
        status, device = await stranger.call(
            "POST", "/api/devices/pair", {"link": link, "name": name}
        )
        assert status == 201, device
        return dict(device)
    finally:
        await stranger.close()


class StreamSocket(Protocol):
    """What WebStream needs of a WebSocket: aiohttp's, or one carried by the web gateway."""

    @property
    def close_code(self) -> int | None: ...

    def __aiter__(self) -> AsyncIterator[aiohttp.WSMessage]: ...

    async def send_str(self, data: str) -> None: ...

    async def close(self) -> object: ...


class WebStream:
    """One session's WebSocket: every event received (JSON objects), in order; `caught_up`
    once the empty batch marking the live edge arrived."""

    def __init__(self, socket: StreamSocket) -> None:
        self.socket = socket
        self.events: list[dict[str, Any]] = []
        self.caught_up = asyncio.Event()
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.socket:
                if message.type is not aiohttp.WSMsgType.TEXT:
                    break
                batch = json.loads(message.data)
                if not batch:
                    self.caught_up.set()
                self.events.extend(batch)
                self._changed.set()
        finally:
            self._changed.set()

    async def send(self, request: dict[str, Any]) -> None:
        await self.socket.send_str(json.dumps(request))

    async def say(self, text: str) -> None:
        await self.send({"message": {"content": text}})

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [event[kind] for event in self.events if kind in event]

    def events_of_sequences(self, wanted: Iterable[int]) -> list[dict[str, Any]]:
        """The stored events received with these sequences, in order (reminders left out)."""
        by_sequence = {
            int(event["sequence"]): event
            for event in self.events
            if event.get("sequence") and not _reminder(event)
        }
        return [by_sequence[sequence] for sequence in wanted]

    @property
    def sequences(self) -> list[int]:
        """The sequence of every stored event received, in order; a still-pending request
        re-sent at the live edge (is_replay, reusing the last sequence) is a reminder, left out."""
        return [
            int(event["sequence"])
            for event in self.events
            if event.get("sequence") and not _reminder(event)
        ]

    async def until(self, reached: Callable[[], T | None], within_s: float = 60.0) -> T:
        async def wait() -> T:
            while True:
                found = reached()
                if found is not None:
                    return found
                if self._reader.done():
                    raise AssertionError(f"the stream ended; events: {self.events[-5:]}")
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(wait(), within_s)

    async def wait_for(self, kind: str, count: int = 1, within_s: float = 60.0) -> dict[str, Any]:
        def nth() -> dict[str, Any] | None:
            found = self.of_kind(kind)
            return found[count - 1] if len(found) >= count else None

        return await self.until(nth, within_s)

    async def closed(self) -> None:
        """Until the server has closed the stream."""
        await asyncio.gather(self._reader, return_exceptions=True)

    async def close(self) -> None:
        await self.socket.close()
        await self.closed()


def _reminder(event: dict[str, Any]) -> bool:
    asked = event.get("permission_request") or event.get("user_question") or {}
    return bool(asked.get("is_replay"))
