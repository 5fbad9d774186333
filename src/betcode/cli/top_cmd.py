"""`betcode top [--json]`: every session of the daemon, live (or one snapshot as JSON)."""

from __future__ import annotations

import json

import click

from betcode.cli.connection import DaemonClient, DaemonError, resolve_daemon_address
from betcode.cli.daemon_call import call_daemon, socket_option
from betcode.v1 import monitor_pb2, monitor_pb2_grpc


async def sessions_overview(client: DaemonClient) -> monitor_pb2.SessionsOverview:
    """Every session with its live state, clients, approvals waiting and recent spend."""
    stub = client.service_stub(monitor_pb2_grpc.MonitorServiceStub)
    return await client.call(stub.GetSessionsOverview, monitor_pb2.SessionsOverviewRequest())


@click.command("top")
@socket_option
@click.option("--json", "as_json", is_flag=True, help="Print one snapshot as JSON and exit.")
@click.option(
    "--interval", default=2.0, show_default=True, type=click.FloatRange(0.2), help="Seconds "
    "between refreshes.",
)  # fmt: skip
def top(socket_path: str | None, as_json: bool, interval: float) -> None:
    """Live view of all sessions: state, model, where, clients, approvals waiting, tokens,
    cost so far and cost per hour over the last 10 minutes."""
    from betcode.cli.top.rows import session_rows, totals

    if as_json:
        overview = call_daemon(socket_path, sessions_overview)
        rows = session_rows(overview)
        click.echo(
            json.dumps(
                {"summary": totals(rows), "sessions": [row.as_json() for row in rows]}, indent=2
            )
        )
        return
    from betcode.cli.top.app import TopApp

    address = resolve_daemon_address(socket_path)
    client: DaemonClient | None = None

    async def fetch() -> monitor_pb2.SessionsOverview:
        nonlocal client
        if client is None:  # made on the app's own event loop
            client = await DaemonClient.connect(address)
        try:
            return await sessions_overview(client)
        except DaemonError:
            await client.close()
            client = None
            raise

    TopApp(fetch, interval).run()
