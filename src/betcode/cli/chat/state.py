"""What the chat shows, as plain data: transcript blocks, prompts waiting for an answer, the
status line's facts, and which of them one update changed."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from betcode.v1 import common_pb2

LOCK_REQUEST_KEY = "ctrl+l"


class Activity(enum.StrEnum):
    STARTING = "connecting"
    IDLE = "ready"
    THINKING = "thinking"
    RUNNING_TOOL = "running a tool"
    WAITING_FOR_YOU = "waiting for you"
    COMPACTING = "compacting"
    RESTARTING = "claude is restarting"
    CRASHED = "claude crashed; send a message to restart it"
    QUEUED = "queued for a turn slot"
    ERROR = "error"


ACTIVITY_OF_STATUS = {
    common_pb2.AGENT_STATUS_THINKING: Activity.THINKING,
    common_pb2.AGENT_STATUS_EXECUTING_TOOL: Activity.RUNNING_TOOL,
    common_pb2.AGENT_STATUS_WAITING_FOR_USER: Activity.WAITING_FOR_YOU,
    common_pb2.AGENT_STATUS_IDLE: Activity.IDLE,
    common_pb2.AGENT_STATUS_COMPACTING: Activity.COMPACTING,
    common_pb2.AGENT_STATUS_ERROR: Activity.ERROR,
    common_pb2.AGENT_STATUS_RESTARTING: Activity.RESTARTING,
    common_pb2.AGENT_STATUS_CRASHED: Activity.CRASHED,
    common_pb2.AGENT_STATUS_QUEUED: Activity.QUEUED,
}
TURN_RUNNING = {Activity.THINKING, Activity.RUNNING_TOOL, Activity.WAITING_FOR_YOU}


@dataclass
class UserBlock:
    key: int
    text: str


@dataclass
class TextBlock:
    """Assistant text, streamed: ``text`` grows until the block is closed."""

    key: int
    text: str
    parent_tool_use_id: str
    closed: bool = False


@dataclass
class ToolBlock:
    key: int
    tool_id: str
    name: str
    input: dict[str, Any]
    description: str
    parent_tool_use_id: str
    output: str | None = None
    is_error: bool = False
    duration_ms: int = 0
    # A Task call's subagent activity (blocks whose parent_tool_use_id is this call), drawn
    # inside this call's view, collapsed, instead of in the transcript.
    nested: list[Block] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.output is not None


@dataclass
class NoticeBlock:
    key: int
    text: str
    is_error: bool = False


Block = UserBlock | TextBlock | ToolBlock | NoticeBlock


@dataclass
class PermissionPrompt:
    request_id: str
    tool_name: str
    description: str
    input: dict[str, Any]
    tool_use_id: str = ""
    decision_reason: str = ""
    blocked_path: str = ""
    expires_at: datetime | None = None
    waiting_seconds: int = 0


@dataclass(frozen=True)
class Choice:
    value: str
    label: str
    description: str

    @property
    def answer(self) -> str:
        """What is sent back: the label claude showed, or the value when there is no label."""
        return self.label or self.value


@dataclass(frozen=True)
class Question:
    text: str
    header: str
    choices: tuple[Choice, ...]
    multi_select: bool


@dataclass
class QuestionPrompt:
    question_id: str
    questions: tuple[Question, ...]

    @property
    def request_id(self) -> str:
        """The daemon's id of the pending request this question belongs to."""
        return self.question_id


Prompt = PermissionPrompt | QuestionPrompt


@dataclass(frozen=True)
class LockRequest:
    """A RequestInputLock waiting for the holder's answer (InputLockRequested PENDING)."""

    requester_id: str
    holder_id: str
    deadline: datetime  # aware, UTC
    seconds: int  # how long the holder was given to answer


@dataclass
class Status:
    session_id: str = ""
    model: str = ""
    working_directory: str = ""
    branch: str = ""  # the git branch of the session's worktree, when it runs in one
    activity: Activity = Activity.STARTING
    current_tool: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    lock_holder: str = ""
    you_hold_lock: bool | None = None  # None: the daemon has not said
    connection: str = ""  # empty while connected, else why not and when the next try is
    lock_notice: str = ""  # a RequestInputLock waiting for the holder, as this client sees it
    asked_for_lock: bool = False  # the notice asks this client (the holder) to act

    @property
    def read_only(self) -> bool:
        return self.you_hold_lock is False and bool(self.lock_holder)


@dataclass
class Changes:
    """What one update touched: block keys (in first-touch order), prompts, status."""

    blocks: dict[int, None] = field(default_factory=dict)  # an ordered set
    prompts: bool = False
    status: bool = False

    def touch(self, key: int) -> None:
        self.blocks.setdefault(key)

    def merge(self, other: Changes) -> None:
        self.blocks.update(other.blocks)
        self.prompts |= other.prompts
        self.status |= other.status
