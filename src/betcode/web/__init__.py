"""The web client the daemon serves (issue 11): an aiohttp app in the daemon's own event loop.

It translates a transport, like `server/` does for gRPC, and calls the same domain objects:
`Session.attach` (replay then live) for the stream, `core.converse.ConverseRequests` for what
a client sends on it, the permission bridge for answers, the session's input lock. `access`
guards every request (token, Host, Origin); `static/` holds the page: index.html and the
bundle esbuild builds from the TypeScript app in web-client/ (scripts/setup).
"""
