"""`HOST:PORT` settings (the web client's and the metrics' addresses): parsed and checked
without DNS, so a setting says by itself where the daemon binds."""

from __future__ import annotations

import ipaddress


def split_host_port(address: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv6 host in brackets) → (host, port); ValueError saying what is wrong.
    HOST is an IP address or `localhost`: a name would need DNS to tell where it binds."""
    host, separator, port_text = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not separator or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:8484)")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"{address!r}: the host must be an IP address or localhost") from None
    return host, int(port_text)


def is_loopback_host(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback
