"""What one `result` line means for the turn: per-turn usage and cost, stop reason, error.

The CLI's `total_cost_usd` is cumulative for the process and restored by --resume (even rolled
back after a kill -9), while `usage` and `model_usage_since_last_result` cover the turn alone
(docs/PROTOCOL.md#costs-and-usage). So a turn's cost is the sum of the per-turn `costUSD`s when the
CLI gives them, else the growth of the cumulative total since the previous result of the SAME
process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from betcode.protocol.messages import PermissionDenial, Result


@dataclass(frozen=True, slots=True)
class TurnUsage:
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    model: str
    cost_usd: float
    duration_ms: int
    is_error: bool
    stop_reason: str  # "cancelled" | the API stop reason | the CLI's terminal reason | subtype
    # Set when the turn failed on its own (not cancelled or interrupted): what to tell the user.
    error_message: str | None = None
    error_details: dict[str, str] = field(default_factory=dict)
    # Every tool call refused in the turn, whoever refused it (a client, a rule, claude itself).
    permission_denials: tuple[PermissionDenial, ...] = ()


@dataclass(slots=True)
class CostBaseline:
    """The cumulative cost seen at the previous result of the current process; None while
    unknown (a resumed process starts from a restored total nobody told us)."""

    previous_total: float | None

    @classmethod
    def for_process(cls, *, resumed: bool) -> CostBaseline:
        return cls(previous_total=None if resumed else 0.0)

    def turn_cost(self, result: Result) -> float:
        per_turn = [
            cost
            for usage in result.model_usage_since_last_result.values()
            if isinstance(cost := usage.get("costUSD"), int | float) and not isinstance(cost, bool)
        ]
        total = result.total_cost_usd
        if per_turn:
            cost = float(sum(per_turn))
        elif total is not None and self.previous_total is not None:
            # A total below the baseline (a restored, older value) means no known spend.
            cost = max(total - self.previous_total, 0.0)
        else:
            cost = 0.0
        if total is not None:
            self.previous_total = total
        return cost


def turn_usage(result: Result, *, model: str, cost_usd: float, cancelled: bool) -> TurnUsage:
    """`model` is the turn's model from system/init ("" → the first model the result names);
    `cancelled` says an interrupt was requested for this turn."""
    aborted = (result.terminal_reason or "").startswith("aborted")
    # An interrupt that arrived after the turn had already succeeded cancelled nothing.
    was_cancelled = cancelled and (result.is_error or aborted)
    if was_cancelled:
        stop_reason = "cancelled"
    elif result.is_error:
        stop_reason = result.terminal_reason or result.subtype
    else:
        stop_reason = result.stop_reason or result.terminal_reason or result.subtype
    failed = result.is_error and not was_cancelled and not aborted
    usage = result.usage
    return TurnUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
        cache_creation_tokens=usage.cache_creation_input_tokens,
        model=model or next(iter(result.model_usage_since_last_result or result.model_usage), ""),
        cost_usd=cost_usd,
        duration_ms=result.duration_ms,
        is_error=result.is_error,
        stop_reason=stop_reason,
        error_message=_error_message(result) if failed else None,
        error_details=_error_details(result) if failed else {},
        permission_denials=tuple(result.permission_denials),
    )


def _error_message(result: Result) -> str:
    if result.result:
        return result.result
    if result.errors:
        return "; ".join(result.errors)
    return f"claude ended the turn with {result.subtype}"


def _error_details(result: Result) -> dict[str, str]:
    details = {"subtype": result.subtype}
    if result.terminal_reason:
        details["terminal_reason"] = result.terminal_reason
    if result.api_error_status is not None:
        details["api_error_status"] = str(result.api_error_status)
    return details
