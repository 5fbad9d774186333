"""Web Push to the web client's browsers: RFC 8030 delivery, payloads encrypted to each
subscription's keys (RFC 8291, aes128gcm), the daemon identified by VAPID (RFC 8292).

`vapid` keeps the daemon's key pair, `subscriptions` checks what a page registers, `sender`
encrypts, signs and delivers one message, `notifications` decides what is pushed and when
(the same events and limits as the relay's attention notifications). Imported only when the
web client is on (composition.web); pywebpush only once a message is sent.
"""
