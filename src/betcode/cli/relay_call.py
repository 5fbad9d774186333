"""One call to the relay itself (AuthService, MachineService) for `auth` and `machine`: a
failure prints one line and exits with its code."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
import grpc
import grpc.aio

from betcode.cli.connection import EXIT_CODE_OF_STATUS
from betcode.cli.relay_login import RelayChoice, relay_channel, relay_choice, relay_unreachable

T = TypeVar("T")


def required_relay(*, need_machine: bool = False) -> RelayChoice:
    choice = relay_choice(need_machine=need_machine)
    if choice is None:
        raise click.UsageError("give the relay first: betcode --relay URL ...")
    return choice


def call_relay(choice: RelayChoice, action: Callable[[grpc.aio.Channel], Awaitable[T]]) -> T:
    async def run() -> T:
        async with relay_channel(choice) as channel:
            return await action(channel)

    try:
        return asyncio.run(run())
    except grpc.aio.AioRpcError as error:
        details = error.details() or error.code().name
        if error.code() == grpc.StatusCode.UNAVAILABLE and "failed to connect" in details:
            details = relay_unreachable(choice, details)
        click.echo(f"error: {details}", err=True)
        code = 2 if error.code() == grpc.StatusCode.UNAVAILABLE else 7
        sys.exit(EXIT_CODE_OF_STATUS.get(error.code(), code))
