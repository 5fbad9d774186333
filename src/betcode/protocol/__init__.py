"""Layer 1: Claude Code's stream-json NDJSON protocol (claude stdout → messages, stdin lines).

* framing     bytes → bounded `Line`s (payload limit enforced while reading; truncation.py keeps
              cut lines valid JSON)
* reader      `Line` → canonical message (messages.py), tolerant, never raises; builders.py,
              fields.py and dialects.py do the reading
* writer      the lines the daemon writes to claude's stdin, in the dialect of the request
* version     `claude --version`, the compatibility matrix, exit codes 72 / 78
* kinds       a short name per message (`betcode ndjson inspect`, logs)
"""
