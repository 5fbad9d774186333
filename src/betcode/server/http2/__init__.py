"""gRPC over HTTP/2 on the daemon's event loop: BetCode's own server transport.

wire.py (bytes of the gRPC mapping) → requests.py (a call's requests) → call.py (one RPC and its
handler) → connection.py (HTTP/2 with h2, coalesced writes) → server.py (listeners, lifecycle).
"""
