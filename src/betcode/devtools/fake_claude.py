"""A fake `claude` that speaks the CLI's stream-json NDJSON from a script, for the faults the real
CLI will not produce on demand (crashes at a chosen step, hangs, garbage, huge lines, floods).

Standard library only (plus its sibling fake_claude_messages), so it starts in ~40 ms: run it
as `python -m betcode.devtools.fake_claude ...`, or through the `claude` wrapper that
`write_fake_claude_wrapper` writes (`make_fake_claude` writes a script and its wrapper at once).

The script is a JSON file named by $BETCODE_FAKE_CLAUDE_SCRIPT:

    {"log": "/path/invocations.jsonl",   # optional: one {"argv","pid","run"} line per start
     "stdin_log": "/path/stdin.jsonl",   # optional: every line read on stdin, as read
     "runs": [RUN, RUN, ...]}            # start number i plays runs[i] (the last one repeats);
                                         # without "runs" the whole script is the single RUN
    RUN = {"version": "2.1.330 (Claude Code)",  # what --version prints
           "session_id": "...",                 # default: the --resume or --session-id id,
                                                #   else a new uuid4
           "ignore_sigterm": false,             # true: SIGTERM only prints a stderr line
           "startup": [STEP, ...],              # played before reading stdin
           "turns": [[STEP, ...], ...],         # turn n plays turns[n] (the last one repeats)
           "pause": {"before_line": k,          # optional: in the first turn, before its k-th
                     "paused_file": "/path",    #   stdout line (k = its line count: once it
                     "resume_file": "/path"}}   #   ended), create paused_file, then wait until
                                                #   resume_file exists

Each turn answers one batch of stdin user messages: system/init, its steps, then result.
STEP is an object with "do":
    text {text, deltas}         stream events + assistant text block
    permission {tool_name, input, request_id?, stream?}
                                assistant tool_use, control_request can_use_tool, wait for the
                                control_response, then the user tool_result echo; `stream`:
                                the tool_use block's stream events around the assistant line
    flood {lines, text, rate?, stamp?, until_file?}
                                `lines` text_delta stream events at full speed (or `rate`/s);
                                `stamp` adds "fake_ts_ns" (CLOCK_MONOTONIC) to each line;
                                `until_file`: go on (past `lines`) until that file exists
    big_line {bytes}            one assistant line with a text block of that many bytes
    raw {text | hex}            a verbatim stdout line (garbage, invalid UTF-8)
    stderr {text}               a line on stderr
    sleep {seconds}
    hang                        stop all output (control requests unanswered) forever
    deaf {until_file}           stop reading stdin (after at most one more read of up to 64 KiB:
                                what a pipe holds) until that file exists; the turn goes on
    exit {code}                 exit at once with that code
    kill                        SIGKILL itself
    grandchild {seconds, pid_file}
                                start `sleep` in this process group, write its pid to pid_file
    grow {mb}                   take `mb` MiB more memory and touch it (its RSS grows), kept
                                until the process ends

Control requests on stdin are answered at once (initialize, interrupt, end_session, set_model,
set_permission_mode; others get the CLI's "Unsupported control request subtype" error).
Fatal input (invalid JSON, null, a user message without role "user") exits 1 like the CLI.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from betcode.devtools import fake_claude_messages as lines
from betcode.devtools.fake_claude_messages import Json

SCRIPT_ENV = "BETCODE_FAKE_CLAUDE_SCRIPT"
DEFAULT_VERSION = "2.1.330 (Claude Code)"
DEFAULT_MODEL = "claude-opus-5-5"
DEFAULT_TURN: list[dict[str, Any]] = [{"do": "text", "text": "Hello from the fake claude."}]
_END_OF_INPUT = object()
STDIN_READ_BYTES = 64 * 1024


def write_fake_claude_wrapper(directory: Path, script: Path | None = None) -> Path:
    """Write an executable `claude` in `directory` that runs this fake with the venv's python.

    With `script`, its path is baked into the wrapper; otherwise $BETCODE_FAKE_CLAUDE_SCRIPT
    must reach the child through its environment.
    """
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / "claude"
    body = ["#!/bin/sh"]
    if script is not None:
        body.append(f"{SCRIPT_ENV}={shlex.quote(str(Path(script).absolute()))}")
        body.append(f"export {SCRIPT_ENV}")
    # -I: ignore PYTHON* variables and never import from the session's cwd (a project's own
    # json.py must not shadow the stdlib); the venv's site-packages still find betcode.
    body.append(f'exec {shlex.quote(sys.executable)} -I -m {__spec__.name} "$@"')
    wrapper.write_text("\n".join(body) + "\n")
    wrapper.chmod(0o755)
    return wrapper


def make_fake_claude(directory: Path, script: Json) -> Path:
    """Write `script` as directory/script.json and a wrapper for it; return the wrapper."""
    directory.mkdir(parents=True, exist_ok=True)
    script_path = directory / "script.json"
    script_path.write_text(json.dumps(script))
    return write_fake_claude_wrapper(directory, script_path)


def _refuse_sigterm(signum: int, frame: object) -> None:
    # Tests check SIGTERM really came before SIGKILL: say so on stderr (async-signal-safe).
    os.write(2, b"fake claude: ignoring SIGTERM\n")


def _option(argv: list[str], name: str) -> str | None:
    if name in argv:
        index = argv.index(name)
        if index + 1 < len(argv):
            return argv[index + 1]
    return None


def _record_start(log_path: str, argv: list[str]) -> int:
    """Append this start to the log; return how many starts came before it."""
    with open(log_path, "a+") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        log.seek(0)
        earlier = sum(1 for _ in log)
        log.write(json.dumps({"argv": argv, "pid": os.getpid(), "run": earlier}) + "\n")
    return earlier


def _select_run(script: Json, start_number: int) -> Json:
    runs: list[Json] = script.get("runs") or [script]
    return runs[min(start_number, len(runs) - 1)]


class Output:
    """stdout shared by the turn thread and the stdin thread; `muted` silences both;
    `before_turn_line` is called before each write of the turn (main) thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._out = sys.stdout.buffer
        self.muted = False
        self.before_turn_line: Callable[[], None] = lambda: None

    def raw(self, data: bytes) -> None:
        if threading.current_thread() is threading.main_thread():
            self.before_turn_line()
        with self._lock:
            if self.muted:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except BrokenPipeError:
                os._exit(141)

    def line(self, message: Json) -> None:
        self.raw(json.dumps(message, separators=(",", ":")).encode() + b"\n")


class FakeClaude:
    def __init__(self, run: Json, argv: list[str], stdin_log: str | None = None) -> None:
        self.run = run
        self.stdin_log = None if stdin_log is None else open(stdin_log, "ab")  # noqa: SIM115
        self.deaf_until: Path | None = None  # stdin is not read until this file exists
        self.out = Output()
        self.version = str(run.get("version", DEFAULT_VERSION))
        self.session_id = str(
            run.get("session_id")
            or _option(argv, "--resume")
            or _option(argv, "--session-id")
            or uuid.uuid4()
        )
        self.model = _option(argv, "--model") or DEFAULT_MODEL
        self.permission_mode = _option(argv, "--permission-mode") or "default"
        self.partial = "--include-partial-messages" in argv
        self.inbox: queue.Queue[object] = queue.Queue()
        self.answers: dict[str, queue.Queue[Json]] = {}
        self.interrupted = threading.Event()
        self.last_result_error = False
        self._counter = 0
        self.pause: Json | None = run.get("pause")
        self.turn_lines = 0  # lines the first turn wrote so far
        self.out.before_turn_line = self.count_turn_line
        self.ballast: list[bytearray] = []  # what `grow` steps took

    def count_turn_line(self) -> None:
        self.wait_if_paused_here()
        self.turn_lines += 1

    def wait_if_paused_here(self) -> None:
        """The scripted pause: a test acts (restarts the daemon) at a chosen line boundary."""
        pause = self.pause
        if pause is None or int(pause["before_line"]) != self.turn_lines:
            return
        self.pause = None
        Path(pause["paused_file"]).touch()
        resume = Path(pause["resume_file"])
        while not resume.exists():
            time.sleep(0.01)

    def emit(self, message: Json) -> None:
        """A session-scoped line: adds session_id and a uuid, like every CLI message."""
        self._counter += 1
        uid = f"00000000-0000-4000-8000-{self._counter:012d}"
        self.out.line({**message, "session_id": self.session_id, "uuid": uid})

    def stream(self, *events: Json) -> None:
        if self.partial:
            for event in events:
                self.emit(lines.stream_event(event))

    # -- stdin (its own thread) -----------------------------------------------------------
    def fatal(self, text: str) -> NoReturn:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        os._exit(1)

    def read_stdin(self) -> None:
        # os.read, not sys.stdin's buffered lines: a deaf step must stop the reading itself,
        # so that the pipe fills as it does behind a claude that stopped reading.
        pending = bytearray()
        while chunk := os.read(0, STDIN_READ_BYTES):
            pending += chunk
            *lines, rest = pending.split(b"\n")
            pending = bytearray(rest)
            for raw in lines:
                self.take_input(bytes(raw))
            self.wait_while_deaf()
        if pending:
            self.take_input(bytes(pending))
        self.inbox.put(_END_OF_INPUT)

    def wait_while_deaf(self) -> None:
        deaf = self.deaf_until
        if deaf is not None:
            while not deaf.exists():
                time.sleep(0.02)
            self.deaf_until = None

    def take_input(self, raw: bytes) -> None:
        if self.stdin_log is not None:
            self.stdin_log.write(raw + b"\n")
            self.stdin_log.flush()
        text = raw.strip()
        if text:
            try:
                message = json.loads(text)
            except ValueError:
                self.fatal(
                    f"Error parsing streaming input line (type=unknown, {len(text)} chars): "
                    "SyntaxError"
                )
            if message is None:
                self.fatal("Error parsing streaming input line (type=unknown, 4 chars): TypeError")
            if isinstance(message, dict):
                self.dispatch_input(message)

    def dispatch_input(self, message: Json) -> None:
        kind = message.get("type")
        if kind == "user":
            body = message.get("message")
            role = body.get("role") if isinstance(body, dict) else None
            if role != "user":
                self.fatal(f"Error: Expected message role 'user', got '{role or 'undefined'}'")
            self.inbox.put(message)
        elif kind == "control_request":
            self.answer_control(message.get("request_id"), message.get("request") or {})
        elif kind == "control_response":
            response = message.get("response") or {}
            # Taken once: a second answer to the same request is dropped, as the CLI does.
            waiter = self.answers.pop(str(response.get("request_id")), None)
            if waiter is not None:
                waiter.put(response)

    def answer_control(self, request_id: Any, request: Json) -> None:
        subtype = request.get("subtype")
        response: Json | None = None
        if subtype == "initialize":
            response = {"commands": [], "agents": [], "models": [], "pid": os.getpid()}
            response.update(claude_code_version=self.version.split()[0], session_state="idle")
            response["current_permission_mode"] = self.permission_mode
        elif subtype == "interrupt":
            response = {"still_queued": []}
            self.interrupted.set()
        elif subtype == "set_model":
            self.model = str(request.get("model") or DEFAULT_MODEL)
            response = {"model": self.model}
        elif subtype == "set_permission_mode":
            self.permission_mode = str(request.get("mode"))
            response = {"mode": self.permission_mode}
        elif subtype != "end_session":
            error = f"Unsupported control request subtype: {subtype}"
            self.out.line(lines.control_error(request_id, error, "unsupported_request"))
            return
        self.out.line(lines.control_success(request_id, response))
        if subtype == "end_session":
            os._exit(0)

    # -- steps ----------------------------------------------------------------------------
    def step_text(self, step: Json, message_id: str) -> str:
        text = str(step.get("text", ""))
        before, stop = lines.text_block_events(text, int(step.get("deltas", 3)))
        self.stream(*before)
        self.emit(lines.assistant(message_id, self.model, {"type": "text", "text": text}))
        self.stream(stop)
        return text

    def step_permission(self, step: Json, message_id: str) -> bool:
        """True when the turn goes on; False when an interrupt ended it."""
        tool_use_id = f"toolu_{uuid.uuid4().hex[:12]}"
        tool_name, tool_input = str(step.get("tool_name", "Bash")), step.get("input", {})
        block = {"type": "tool_use", "id": tool_use_id, "name": tool_name, "input": tool_input}
        before, stop = lines.tool_block_events(block)
        if step.get("stream"):
            self.stream(*before)
        self.emit(lines.assistant(message_id, self.model, block))
        if step.get("stream"):
            self.stream(stop)
        request_id = str(step.get("request_id") or uuid.uuid4())
        waiter: queue.Queue[Json] = queue.Queue(maxsize=1)
        self.answers[request_id] = waiter
        self.out.line(lines.can_use_tool(request_id, tool_name, tool_input, tool_use_id))
        while True:
            try:
                answer = waiter.get(timeout=0.02)
                break
            except queue.Empty:
                if self.interrupted.is_set():
                    self.out.line({"type": "control_cancel_request", "request_id": request_id})
                    return False
        decision = answer.get("response") or {}
        if answer.get("subtype") == "success" and decision.get("behavior") == "allow":
            self.emit(lines.tool_result(tool_use_id, f"{tool_name} ran", False))
        else:
            reason = decision.get("message") or answer.get("error") or "denied"
            self.emit(lines.tool_result(tool_use_id, str(reason), True))
        return True

    def step_flood(self, step: Json) -> None:
        count, rate = int(step.get("lines", 1000)), float(step.get("rate", 0))
        stamp = bool(step.get("stamp", False))
        until_file = Path(step["until_file"]) if "until_file" in step else None
        head = lines.flood_line_head(str(step.get("text", "x")), self.session_id)
        started = time.monotonic()
        batch: list[str] = []
        number = -1
        while (number := number + 1) < count or (until_file and not until_file.exists()):
            stamp_field = f'"fake_ts_ns":{time.monotonic_ns()},' if stamp else ""
            batch.append(f'{head}{stamp_field}"uuid":"00000000-0000-4000-9000-{number:012d}"}}\n')
            if rate > 0 or len(batch) >= 512:
                self.out.raw("".join(batch).encode())
                batch.clear()
            if rate > 0:
                ahead = started + (number + 1) / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        if batch:
            self.out.raw("".join(batch).encode())

    def step_output(self, action: str, step: Json, message_id: str) -> None:
        """Steps that only write: big_line, raw, stderr."""
        if action == "big_line":
            text = "y" * int(step.get("bytes", 11 * 1024 * 1024))
            self.emit(lines.assistant(message_id, self.model, {"type": "text", "text": text}))
        elif action == "raw":
            data = bytes.fromhex(step["hex"]) if "hex" in step else str(step["text"]).encode()
            self.out.raw(data + b"\n")
        else:
            sys.stderr.write(str(step.get("text", "")) + "\n")
            sys.stderr.flush()

    def step_fault(self, action: str, step: Json) -> None:
        """Steps that end or freeze the process: hang, exit, kill."""
        if action == "hang":
            self.out.muted = True
            while True:
                time.sleep(3600)
        elif action == "exit":
            os._exit(int(step.get("code", 1)))
        else:
            os.kill(os.getpid(), signal.SIGKILL)

    def play(self, step: Json, message_id: str, texts: list[str]) -> bool:
        """Play one step; False ends the turn early (interrupted)."""
        action = str(step.get("do"))
        if action == "text":
            texts.append(self.step_text(step, message_id))
        elif action == "permission":
            return self.step_permission(step, message_id)
        elif action == "flood":
            self.step_flood(step)
        elif action in ("big_line", "raw", "stderr"):
            self.step_output(action, step, message_id)
        elif action in ("hang", "exit", "kill"):
            self.step_fault(action, step)
        elif action == "sleep":
            time.sleep(float(step.get("seconds", 0)))
        elif action == "grow":
            self.ballast.append(_touched(int(float(step.get("mb", 1)) * 1024 * 1024)))
        elif action == "deaf":
            self.deaf_until = Path(step["until_file"])
        elif action == "grandchild":
            child = subprocess.Popen(["sleep", str(step.get("seconds", 300))])
            Path(step["pid_file"]).write_text(str(child.pid))
        else:
            self.fatal(f"fake claude: unknown step {step!r}")
        return not self.interrupted.is_set()

    # -- turns ----------------------------------------------------------------------------
    def play_turn(self, steps: list[Json]) -> None:
        started = time.monotonic()
        self.interrupted.clear()
        self.emit(lines.system_init(self.model, self.permission_mode, self.version.split()[0]))
        message_id = f"msg_fake_{uuid.uuid4().hex[:12]}"
        self.stream(lines.message_start(message_id, self.model))
        texts: list[str] = []
        completed = all(self.play(step, message_id, texts) for step in steps)
        duration_ms = int((time.monotonic() - started) * 1000)
        if completed:
            self.stream(*lines.message_end(len(texts)))
            self.emit(lines.result("".join(texts), len(texts), duration_ms))
        else:
            marker = {"type": "text", "text": "[Request interrupted by user]"}
            self.emit(lines.user_content([marker]))
            self.emit(lines.result(None, len(texts), duration_ms))
        self.last_result_error = not completed
        self.wait_if_paused_here()  # a pause after the turn's last line
        self.pause = None  # only the first turn pauses

    def serve(self) -> int:
        if self.run.get("ignore_sigterm"):
            signal.signal(signal.SIGTERM, _refuse_sigterm)
        threading.Thread(target=self.read_stdin, daemon=True).start()
        for step in self.run.get("startup", []):
            self.play(step, "msg_fake_startup", [])
        turns: list[list[Json]] = self.run.get("turns") or [DEFAULT_TURN]
        for turn_number in range(sys.maxsize):
            if self.inbox.get() is _END_OF_INPUT:
                break
            end_of_input = False
            while not self.inbox.empty():  # messages queued meanwhile merge into this turn
                end_of_input = self.inbox.get() is _END_OF_INPUT or end_of_input
            self.play_turn(turns[min(turn_number, len(turns) - 1)])
            if end_of_input:
                break
        # Like the CLI: exit 1 at EOF when the last result was an error.
        return 1 if self.last_result_error else 0


def _touched(size: int) -> bytearray:
    """`size` bytes whose every page was written: resident, not just reserved."""
    memory = bytearray(size)
    memory[::4096] = b"\x01" * len(range(0, size, 4096))
    return memory


def _check_flags(argv: list[str]) -> str | None:
    if "--cwd" in argv:
        return "error: unknown option '--cwd'"
    if _option(argv, "--output-format") == "stream-json" and "--verbose" not in argv:
        return "Error: When using --print, --output-format=stream-json requires --verbose"
    return None


def main(argv: list[str]) -> int:
    script_path = os.environ.get(SCRIPT_ENV)
    script: Json = json.loads(Path(script_path).read_text()) if script_path else {}
    if "--version" in argv:
        print(_select_run(script, 0).get("version", DEFAULT_VERSION))
        return 0
    flag_error = _check_flags(argv)
    if flag_error:
        print(flag_error, file=sys.stderr)
        return 1
    start_number = _record_start(script["log"], argv) if script.get("log") else 0
    run = _select_run(script, start_number)
    return FakeClaude(run, argv, stdin_log=script.get("stdin_log")).serve()


if __name__ == "__main__":
    exit_code = main(sys.argv[1:])
    sys.stdout.flush()
    # os._exit: the stdin thread may still be blocked in a read.
    os._exit(exit_code)
