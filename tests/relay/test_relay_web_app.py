"""The full web client through a relay, in a real Chromium (Debian's, via `executable_path`) at
phone size: a real relay (its own nats-server) serving the app on its one address, a real daemon
on the tunnel running the pinned real CLI against the mock model. The phone logs in to the relay,
sees the machine online, opens it (its fingerprint shown and pinned; a changed key refused),
signs in to the machine with a pairing code, and uses the normal app: a new session in the
machine's repository, a real-CLI Bash call allowed from the action bar that runs exactly once,
Markdown rendered, a question answered, a daemon restart survived, the input lock. Every request
and the session stream went as WebGatewayService calls sealed in the page: no NATS message and
no relay file holds the conversation. Installable at the relay's address (Chromium's
installability check), its notifications offered once a machine is open, and its offline shell
says "machine offline" with the daemon gone and "relay unreachable" with the relay down."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness.browser import CHROMIUM, PHONE, chromium, phone_page, require_chromium, trusting
from harness.environment import Workspace
from harness.relay import MACHINE, Rig, rig_fixture, stored_text, until, waiting_permission
from harness.web import WebClient, new_pairing_code, sign_in

from betcode.config.settings import HttpSettings
from betcode.relay.buffer import BufferSettings
from betcode.remote import e2e
from betcode.tunnel.identity import MachineIdentity
from betcode.v1 import agent_pb2
from betcode.web.token import read_or_create_token

pytestmark = pytest.mark.real_cli
playwright_api = require_chromium("the web client through the relay")
expect = playwright_api.expect
expect.set_options(timeout=60_000)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
SECRET = "phone-secret-7311"
MARKDOWN_SECRET = "markdown-secret-4242"
ANSWER_SECRET = "answer-secret-9090"
RESTART_SECRET = "restart-secret-3131"

TOKENS = "JSON.parse(localStorage.getItem('betcode-relay-tokens'))"
# The copy kept in IndexedDB for the service worker.
IDB_TOKENS = """new Promise((resolve) => {
  const opening = indexedDB.open("betcode", 1);
  opening.onsuccess = () => {
    const read = opening.result.transaction("device").objectStore("device")
      .get("betcode-relay-tokens");
    read.onsuccess = () => { opening.result.close(); resolve(read.result); };
  };
})"""


def idb_put_tokens(tokens: dict[str, Any]) -> str:
    return f"""new Promise((resolve) => {{
  const opening = indexedDB.open("betcode", 1);
  opening.onsuccess = () => {{
    const tx = opening.result.transaction("device", "readwrite");
    tx.objectStore("device").put({json.dumps(tokens)}, "betcode-relay-tokens");
    tx.oncomplete = () => {{ opening.result.close(); resolve(true); }};
  }};
}})"""


rig = pytest.fixture(rig_fixture(BufferSettings()))


def web_url(rig: Rig) -> str:
    return f"https://127.0.0.1:{rig.relay.port}"


async def start_daemon(rig: Rig) -> None:
    """The daemon, with its LAN web listener on loopback too: `betcode web pair` makes its
    pairing codes there (the phone uses them through the relay)."""
    http = HttpSettings(listen="127.0.0.1:0")
    rig.config = replace(rig.config, settings=replace(rig.config.settings, http=http))
    await rig.start_daemon()


async def pairing_code(rig: Rig) -> str:
    """A pairing code, as `betcode web pair` shows it on the machine."""
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    assert rig.daemon.web.url
    return await new_pairing_code(rig.daemon.web.url, read_or_create_token(rig.config.config_dir))


def daemon_fingerprint(rig: Rig) -> str:
    key_file = MachineIdentity(rig.config.config_dir / "certs").e2e_key_file
    return e2e.fingerprint(e2e.DaemonIdentity.load_or_create(key_file).public)


async def logged_in(page: Any, rig: Rig) -> None:
    await page.goto(web_url(rig) + "/")
    await page.get_by_label("Username").fill("alice")
    await page.get_by_label("Password").fill("pw-123456")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Machines")).to_be_visible()


async def open_machine(page: Any, rig: Rig) -> None:
    """The machine listed online, opened: its key's fingerprint shown; then this browser signed
    in to it with a pairing code typed (the first time), and the app's sessions shown."""
    machine = page.locator("#machine-list li", has_text=MACHINE)
    await expect(machine).to_contain_text("online")
    await machine.get_by_role("button").click()
    await expect(page.locator("#fingerprint")).to_have_text(daemon_fingerprint(rig))
    if await page.locator("#sign-in").is_visible():
        await page.get_by_label("Pairing code").fill(await pairing_code(rig))
        await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Sessions")).to_be_visible()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with chromium(playwright_api) as launched:
        yield launched


@pytest.fixture
async def phone(browser: Any) -> AsyncIterator[Any]:
    async with phone_page(browser, ignore_https_errors=True) as page:
        yield page


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


async def watch_nats(rig: Rig) -> tuple[list[bytes], Any]:
    """Every NATS message's data and headers from now on, and the subscription to end."""
    seen: list[bytes] = []

    async def spy(msg: Any) -> None:
        seen.append(msg.data)
        seen.extend(str(value).encode() for value in (msg.headers or {}).values())

    assert rig.relay.nc is not None
    return seen, await rig.relay.nc.subscribe(">", cb=spy)


async def test_a_phone_uses_the_full_app_through_the_relay_which_sees_no_plaintext(
    rig: Rig, phone: Any, workspace: Workspace
) -> None:
    await start_daemon(rig)
    seen, subscription = await watch_nats(rig)
    marker = workspace.repo / "ran.txt"
    command = json.dumps({"command": f"echo {SECRET} >> {marker.name}"})

    await logged_in(phone, rig)
    await open_machine(phone, rig)
    device = await phone.evaluate(f"JSON.parse(localStorage.getItem('betcode-device:{MACHINE}'))")
    assert device["device_id"].startswith("dev-")
    # A new session in the machine's repository, its first prompt a real-CLI Bash call.
    await phone.get_by_label("Directory").fill(str(workspace.repo))
    await phone.get_by_label("First prompt").fill(f"SCN:tool_bash {command} run it")
    await phone.get_by_role("button", name="Start session").click()
    await expect(phone.locator("#session-view")).to_be_visible()
    session_id = str(phone.url.split("#/s/", 1)[1])
    bar = phone.locator("#action-bar")
    await expect(bar).to_contain_text(SECRET)  # opened in the page, from ciphertext
    await expect(phone.locator("#connection")).to_contain_text("live")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await phone.screenshot(path=str(ARTIFACTS / "relay-app-approval.png"))
    await bar.get_by_role("button", name="Allow once").click()
    await expect(phone.locator(".tool.done")).to_have_count(1)
    await expect(phone.locator(".note", has_text="turn complete")).to_have_count(1)
    await expect(bar).to_be_hidden()
    # Markdown, streamed through the relay and rendered.
    text = f"# Through the relay\n\nIt is **{MARKDOWN_SECRET}**."
    prompt = f"SCN:plain {json.dumps({'text': text})} go"
    await phone.get_by_label("Message", exact=True).fill(prompt)
    await phone.get_by_role("button", name="Send").click()
    answer = phone.locator(".assistant").last
    await expect(answer.locator("h1")).to_have_text("Through the relay")
    await expect(answer.locator("strong")).to_have_text(MARKDOWN_SECRET)
    await expect(phone.locator(".note", has_text="turn complete")).to_have_count(2)
    # A question from claude, answered in the action bar (a typed answer, sealed both ways).
    await phone.get_by_label("Message", exact=True).fill('SCN:ask {"questions": 1} ask me')
    await phone.get_by_role("button", name="Send").click()
    question = bar.locator("fieldset")
    await expect(question).to_have_count(1)
    await question.get_by_role("radio", name="Other").check()
    await question.get_by_role("textbox").fill(ANSWER_SECRET)
    await bar.get_by_role("button", name="Submit answers").click()
    await expect(phone.locator(".outcome").last).to_contain_text("Answered by this page")
    await expect(phone.locator(".note", has_text="turn complete")).to_have_count(3)
    await expect(phone.locator(".assistant").last).to_contain_text(ANSWER_SECRET)
    await phone.screenshot(path=str(ARTIFACTS / "relay-app-session.png"))

    # The daemon restarts: it no longer has the page's session with it. The page makes a new
    # one (a key exchange, the same key) and goes on, its stream back live.
    await rig.stop_daemon()
    await start_daemon(rig)
    await expect(phone.locator("#connection")).to_contain_text("live")
    prompt = f"SCN:plain {json.dumps({'text': RESTART_SECRET})} again"
    await phone.get_by_label("Message", exact=True).fill(prompt)
    await phone.get_by_role("button", name="Send").click()
    await expect(phone.locator(".assistant").last).to_contain_text(RESTART_SECRET)
    await expect(phone.locator(".note", has_text="turn complete")).to_have_count(4)
    assert marker.read_text().splitlines() == [SECRET]  # the tool ran exactly once

    # A reload comes back to the same machine and session, signed in; an access token about
    # to expire is renewed first (the relay rotates the refresh token with it).
    tokens = await phone.evaluate(TOKENS)
    assert await phone.evaluate(IDB_TOKENS) == tokens
    await phone.evaluate(
        "localStorage.setItem('betcode-relay-tokens', JSON.stringify("
        f"{{...{json.dumps(tokens)}, expires_at: Date.now() + 5000}}))"
    )
    await phone.evaluate(idb_put_tokens({**tokens, "expires_at": 0}))
    await phone.reload()
    await expect(phone.locator(".note", has_text="turn complete")).to_have_count(4)
    await expect(phone.locator("#fingerprint")).to_have_text(daemon_fingerprint(rig))
    renewed = await phone.evaluate(TOKENS)
    assert renewed["refresh_token"] not in ("", tokens["refresh_token"])
    assert renewed["expires_at"] > tokens["expires_at"] - 60_000
    # The relay's login refused mid-use (here a token the relay never made): the page goes
    # back to the relay's login, saying why; logged in again, the machines.
    await phone.evaluate(
        "localStorage.setItem('betcode-relay-tokens', JSON.stringify("
        f"{{...{json.dumps(renewed)}, access_token: 'not-a-token'}}))"
    )
    await expect(phone.locator("#relay-login-error")).to_contain_text(
        "The relay refused this login", timeout=30_000
    )
    await logged_in(phone, rig)
    await phone.locator("#machine-list li", has_text=MACHINE).get_by_role("button").click()
    await expect(phone.get_by_role("heading", name="Sessions")).to_be_visible()
    # Back to the machines; another key pinned for the machine (as if its key had changed):
    # refused, the app not opened.
    await phone.get_by_role("button", name="← Machines").click()
    await expect(phone.get_by_role("heading", name="Machines")).to_be_visible()
    await phone.evaluate(f"localStorage.setItem('betcode-pin:{MACHINE}', '{'07' * 32}')")
    await phone.locator("#machine-list li", has_text=MACHINE).get_by_role("button").click()
    await expect(phone.locator("#machines-error")).to_contain_text("Refused")
    await expect(phone.locator("#machines-error")).to_contain_text("another identity key")
    await expect(phone.locator("#sessions-view")).to_be_hidden()

    await subscription.unsubscribe()
    assert seen
    carried = b"".join(seen)
    secrets = (SECRET, MARKDOWN_SECRET, ANSWER_SECRET, RESTART_SECRET, device["credential"])
    for plain in (*secrets, session_id, str(workspace.repo)):
        assert plain.encode() not in carried, plain
    for path in files_under(rig.relay.options.files.root):
        content = path.read_bytes()
        for plain in secrets:
            assert plain.encode() not in content, (path, plain)


@pytest.fixture
async def installable(tmp_path: Path, rig: Rig) -> AsyncIterator[Any]:
    """A browser profile on disk (Chromium installs nothing from an incognito context) that
    takes the relay's certificate as valid, as a phone trusting the relay's CA would."""
    async with playwright_api.async_playwright() as driver:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        context = await driver.chromium.launch_persistent_context(
            tmp_path / "profile",
            executable_path=CHROMIUM,
            args=[*args, *trusting(rig.relay.options.files.server_cert)],
            viewport=PHONE,
            is_mobile=True,
            has_touch=True,
        )
        yield context
        await context.close()


async def test_installable_at_the_relay_and_offline_it_says_what_is_unreachable(
    rig: Rig, installable: Any
) -> None:
    await start_daemon(rig)
    page = await installable.new_page()
    await logged_in(page, rig)
    await page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    await page.reload()  # the next load is the worker's
    assert await page.evaluate("navigator.serviceWorker.controller !== null")
    manifest = await page.evaluate("fetch('/manifest.webmanifest').then(r => r.json())")
    assert (manifest["start_url"], manifest["scope"]) == ("/", "/")
    cdp = await installable.new_cdp_session(page)
    assert (await cdp.send("Page.getAppManifest"))["errors"] == []
    installability = await cdp.send("Page.getInstallabilityErrors")
    assert installability["installabilityErrors"] == [], installability
    assert (await page.evaluate("navigator.serviceWorker.controller.scriptURL")).endswith(
        "/sw.js?origin=relay"
    )
    notify = page.locator("#enable-notifications")
    await expect(notify).to_be_hidden()  # nothing to subscribe to before a machine is open
    await open_machine(page, rig)

    # Notifications from the opened machine: its VAPID key fetched through the gateway, then
    # Chromium's pushManager, which needs its vendor's push service (unreachable here: the
    # button says so). A notification that names no machine (an older daemon's) has no answer
    # buttons at the relay's address: tapping it opens the app.
    await installable.grant_permissions(["notifications"], origin=web_url(rig))
    await notify.click()
    await expect(notify).to_have_text("Notify me (failed)", timeout=60_000)
    assert "push service did not answer" in (await notify.get_attribute("title") or "")
    [worker] = installable.service_workers
    message = {"kind": "permission", "request_id": "r-1", "title": "Bash waits", "body": "x"}
    shown = await worker.evaluate(
        f"showMessage({json.dumps(message)})"
        ".then(() => self.registration.getNotifications())"
        ".then(ns => ns.map(n => ({title: n.title, actions: n.actions.length})))"
    )
    assert shown == [{"title": "Bash waits", "actions": 0}]

    # The machine's daemon gone: the relay answers, the machine does not.
    await rig.stop_daemon()
    await page.reload()
    await expect(page.locator("#connection")).to_contain_text("machine offline")
    machine = page.locator("#machine-list li", has_text=MACHINE)
    await expect(machine).to_contain_text("offline")
    await start_daemon(rig)  # back: the list says so without a reload
    await expect(machine).to_contain_text("online")

    # The relay down: the shell still loads (the worker's), and says the relay is unreachable.
    await rig.relay.stop()
    await page.reload()
    await expect(page.get_by_role("heading", name="Machines")).to_be_visible()
    await expect(page.locator("#connection")).to_contain_text("relay unreachable")
    await page.screenshot(path=str(ARTIFACTS / "relay-app-offline.png"))


async def test_read_only_under_a_laptops_lock_until_the_phone_asks_for_it(
    rig: Rig, phone: Any, workspace: Workspace
) -> None:
    await start_daemon(rig)
    assert rig.daemon is not None
    assert rig.daemon.web is not None
    lan_url = rig.daemon.web.url or ""
    device = await sign_in(lan_url, read_or_create_token(rig.config.config_dir), "laptop")
    laptop = WebClient(lan_url, device["credential"], "web-laptop")
    try:
        session_id = await laptop.create_session(str(workspace.repo))
        stream = await laptop.stream(session_id)
        await stream.say('SCN:plain {"text": "from the laptop"} hi')  # its input takes the lock
        await stream.wait_for("turn_complete")

        await logged_in(phone, rig)
        await open_machine(phone, rig)
        await phone.evaluate(f"location.hash = '#/s/{session_id}'")
        await expect(phone.locator(".assistant")).to_contain_text("from the laptop")
        await expect(phone.locator("#lock-holder")).to_contain_text("holds the input lock")
        await expect(phone.locator("#send")).to_be_disabled()
        # Asked for through the relay (the request waits for the laptop's answer, which does
        # not come): the lock moves to the phone, whose message then runs.
        await phone.get_by_role("button", name="Request input lock").click()
        await expect(phone.locator("#lock-banner")).to_be_hidden()
        await phone.get_by_label("Message", exact=True).fill(
            'SCN:plain {"text": "from the phone"} hi'
        )
        await phone.get_by_role("button", name="Send").click()
        await expect(phone.locator(".assistant").last).to_contain_text("from the phone")
        holders = [e["holder_client_id"] for e in stream.of_kind("input_lock")]
        assert holders[-1] == await phone.evaluate("window.betcode.clientId")
        await stream.close()
    finally:
        await laptop.close()


ACTION_SECRET = "action-secret-5757"
AWAY_SECRET = "away-secret-6868"
AWAY_ANSWER = "away-answer-4646"
QUEUED = "queued: will be delivered when the machine is back"


async def installed_on_machine(installable: Any, rig: Rig) -> Any:
    """A page of the installed app, its service worker in control, the machine opened and
    signed in to: its key pinned and its device credential kept, for the worker too."""
    page = await installable.new_page()
    await logged_in(page, rig)
    await page.evaluate("navigator.serviceWorker.ready.then(() => true)")
    await page.reload()
    await open_machine(page, rig)
    return page


async def test_a_notification_action_at_the_relay_answers_through_it_first_answer_wins(
    rig: Rig, installable: Any, workspace: Workspace
) -> None:
    await start_daemon(rig)
    seen, watching = await watch_nats(rig)
    page = await installed_on_machine(installable, rig)
    await installable.grant_permissions(["notifications"], origin=web_url(rig))
    [worker] = installable.service_workers
    marker = workspace.repo / "action.txt"
    command = json.dumps({"command": f"echo {ACTION_SECRET} >> {marker.name}"})
    start = agent_pb2.StartConversation(working_directory=str(workspace.repo))
    session_id, request_id = await waiting_permission(rig, start, f"SCN:tool_bash {command} go")
    # The page shows it waiting; the answer comes from the worker alone.
    await expect(page.locator("#action-bar")).to_contain_text(ACTION_SECRET)
    message = {
        "kind": "permission",
        "notification_id": request_id,
        "request_id": request_id,
        "session_id": session_id,
        "machine_id": MACHINE,
        "tool": "Bash",
        "title": "Bash waits for your approval",
        "body": "repo: echo ...",
    }
    shown = await worker.evaluate(
        f"showMessage({json.dumps(message)})"
        ".then(() => self.registration.getNotifications())"
        ".then(ns => ns.map(n => ({title: n.title, actions: n.actions.map(a => a.action)})))"
    )
    assert shown == [{"title": "Bash waits for your approval", "actions": ["allow_once", "deny"]}]
    # Allow once: the worker's own key exchange (the pinned key checked), then the page's
    # answer request as a sealed gateway call with the device's credential.
    allowed = await worker.evaluate(f"answerFromNotification({json.dumps(message)}, 'allow_once')")
    assert allowed == {
        "status": 200,
        "reply": {"accepted": True, "duplicate": False, "outcome": "allowed"},
    }

    async def turn_ended() -> bool:
        return "turn_complete" in await stored_text(rig, session_id)

    await until(turn_ended, 90)
    assert marker.read_text().splitlines() == [ACTION_SECRET]  # the tool ran, exactly once
    assert "web-notification" in await stored_text(rig, session_id)
    await expect(page.locator("#action-bar")).to_be_hidden()  # the page sees it answered
    # Deny from the notification later, its access token about to expire: the worker renews
    # the relay login first (kept for the page), and the first answer stands. This time as a
    # worker without WebSocket: its calls go as the relay front's one-POST unary calls.
    assert await worker.evaluate("delete self.WebSocket && typeof WebSocket === 'undefined'")
    tokens = await page.evaluate(IDB_TOKENS)
    assert tokens == await page.evaluate(TOKENS)
    await page.evaluate(idb_put_tokens({**tokens, "expires_at": 0}))
    denied = await worker.evaluate(f"answerFromNotification({json.dumps(message)}, 'deny')")
    assert denied["reply"]["duplicate"] is True
    assert denied["reply"]["outcome"] == "allowed"
    titles = await worker.evaluate(
        "self.registration.getNotifications().then(ns => ns.map(n => n.title))"
    )
    assert titles == ["Bash: already answered: allowed"]
    renewed = await page.evaluate(IDB_TOKENS)
    assert renewed["refresh_token"] not in ("", tokens["refresh_token"])
    assert renewed["expires_at"] > 0
    # The page takes the worker's renewed login when it next renews (the old refresh token is
    # spent): a reload is still signed in to the relay and the machine.
    await page.evaluate(
        "localStorage.setItem('betcode-relay-tokens', JSON.stringify("
        f"{{...{json.dumps(tokens)}, expires_at: Date.now() + 5000}}))"
    )
    await page.reload()
    await expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    assert (await page.evaluate(TOKENS))["refresh_token"] != tokens["refresh_token"]

    # Tapping the notification opens that machine's session (the push names both): the address
    # the worker opens, in a new tab (focusing or opening a window needs the real tap, which
    # headless Chromium has no notification to make).
    target = await worker.evaluate(f"sessionTarget({json.dumps(message)})")
    assert target == f"/?machine={MACHINE}#/s/{session_id}"
    await page.close()
    page = await installable.new_page()
    await page.goto(web_url(rig) + target)
    await expect(page.locator("#session-view")).to_be_visible()
    await expect(page.locator("#fingerprint")).to_have_text(daemon_fingerprint(rig))
    assert page.url == f"{web_url(rig)}/#/s/{session_id}"
    await expect(page.locator(".tool.done")).to_have_count(1)

    await watching.unsubscribe()
    carried = b"".join(seen)
    credential = await page.evaluate(f"localStorage.getItem('betcode-device:{MACHINE}')")
    assert credential
    for plain in (ACTION_SECRET, session_id, json.loads(credential)["credential"]):
        assert plain.encode() not in carried, plain
    for path in files_under(rig.relay.options.files.root):
        assert ACTION_SECRET.encode() not in path.read_bytes(), path


async def test_an_answer_given_while_the_machine_is_offline_is_queued_and_runs_once(
    rig: Rig, installable: Any, workspace: Workspace
) -> None:
    await start_daemon(rig)
    page = await installed_on_machine(installable, rig)
    await installable.grant_permissions(["notifications"], origin=web_url(rig))
    marker = workspace.repo / "away.txt"
    command = json.dumps({"command": f"echo {AWAY_SECRET} >> {marker.name}"})
    start = agent_pb2.StartConversation(working_directory=str(workspace.repo))
    session_id, request_id = await waiting_permission(rig, start, f"SCN:tool_bash {command} go")
    bar = page.locator("#action-bar")
    await expect(bar).to_contain_text(AWAY_SECRET)

    # As `daemon restart` does: the asking claude waits on under its holder for the answer.
    await rig.stop_daemon(keep_sessions=True)
    await bar.get_by_role("button", name="Allow once").click()
    await expect(bar).to_contain_text(QUEUED)
    # The notification's action, given while away too (from a worker without WebSocket: the
    # unary POST): kept as well; the first one wins.
    [worker] = installable.service_workers
    assert await worker.evaluate("delete self.WebSocket && typeof WebSocket === 'undefined'")
    message = {"kind": "permission", "request_id": request_id, "machine_id": MACHINE}
    queued = await worker.evaluate(f"answerFromNotification({json.dumps(message)}, 'deny')")
    assert queued["queued"] == QUEUED
    assert not marker.exists()
    # Both kept sealed: the relay's files (its NATS store among them) hold neither the request
    # nor the command.
    kept = b"".join(path.read_bytes() for path in files_under(rig.relay.options.files.root))
    assert b"AgentService/AnswerPermission" in kept  # the buffered calls are on disk
    assert request_id.encode() not in kept
    assert AWAY_SECRET.encode() not in kept

    await start_daemon(rig)

    async def turn_ended() -> bool:
        return "turn_complete" in await stored_text(rig, session_id)

    await until(turn_ended, 90)
    assert marker.read_text().splitlines() == [AWAY_SECRET]  # allowed (first), ran once
    assert rig.relay.buffer is not None

    async def delivered() -> bool:
        return not await rig.relay.buffer.pending(MACHINE)  # type: ignore[union-attr]

    await until(delivered, 30)
    await expect(bar).to_be_hidden()


async def test_a_question_answered_while_the_machine_is_offline_gets_there_once_it_is_back(
    rig: Rig, installable: Any, workspace: Workspace
) -> None:
    await start_daemon(rig)
    page = await installed_on_machine(installable, rig)
    await page.get_by_label("Directory").fill(str(workspace.repo))
    await page.get_by_label("First prompt").fill('SCN:ask {"questions": 1} ask me')
    await page.get_by_role("button", name="Start session").click()
    await expect(page.locator("#session-view")).to_be_visible()
    session_id = str(page.url.split("#/s/", 1)[1])
    bar = page.locator("#action-bar")
    question = bar.locator("fieldset")
    await expect(question).to_have_count(1)

    await rig.stop_daemon(keep_sessions=True)
    await question.get_by_role("radio", name="Other").check()
    await question.get_by_role("textbox").fill(AWAY_ANSWER)
    await bar.get_by_role("button", name="Submit answers").click()
    await expect(bar).to_contain_text(QUEUED)
    await start_daemon(rig)

    async def turn_ended() -> bool:
        return "turn_complete" in await stored_text(rig, session_id)

    await until(turn_ended, 90)
    stored = await stored_text(rig, session_id)
    assert AWAY_ANSWER in stored  # claude was given the answer, and went on with it
    await expect(bar).to_be_hidden()
