"""Web Push as a part of the web client (betcode.push): the VAPID key made or read, the
subscriptions on the core's store, every session watched for what needs a human, and the
notifier's loop among the daemon's background tasks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from betcode.composition.background import BackgroundTasks
from betcode.composition.core import Core
from betcode.config.settings import WebPushSettings
from betcode.push.notifications import PushNotifications
from betcode.push.sender import PushSender, RelayDelivery
from betcode.push.subscriptions import Subscriptions
from betcode.push.vapid import VapidKey
from betcode.web.push_api import PushEndpoints


def start_push(
    core: Core,
    config_dir: Path,
    settings: WebPushSettings,
    tasks: BackgroundTasks,
    signed_in: Callable[[str], bool],
    relay: RelayDelivery | None,
) -> PushEndpoints:
    """`signed_in(device_id)`: the web client's answer to whether a device is signed in;
    `relay`: how pushes for relayed devices reach the relay (None without one)."""
    key = VapidKey.load_or_create(config_dir)
    subscriptions = Subscriptions(core.writer, core.reader)
    sender = PushSender(key, subscriptions.delete, settings.contact, relay)
    notifications = PushNotifications(core.bridge, subscriptions, sender, signed_in=signed_in)
    for session in core.sessions.live:
        notifications.watch(session)
    core.sessions.on_register.append(notifications.watch)
    tasks.start(notifications.run(), name="push-notifications")
    return PushEndpoints(
        key.public_key_base64url(),
        subscriptions,
        settings.allow_loopback_endpoints,
        sender.close,
    )
