"""A sample of the restart sweep (harness/restart_sweep.py): the daemon restarted at chosen
boundaries of one fake-claude turn, both ways, every client view equal to the turn without a
restart. The full sweep (every boundary) is benchmarks/restart_sweep.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.restart_sweep import KINDS, TURN_LINES, all_points, sweep

SAMPLE = {
    "before line 6: assistant",  # the answer streamed, its `assistant` line not yet printed
    "before line 13: tool_result Bash",  # the permission answered, its result not yet printed
    "permission_request pending",
    "user_question pending",
    f"before line {len(TURN_LINES)}: idle",
}


@pytest.mark.timeout(240)
async def test_a_restart_at_sampled_boundaries_of_a_turn_changes_no_client_view(
    tmp_path: Path,
) -> None:
    points = [point for point in all_points() if point.label in SAMPLE]
    assert len(points) == len(SAMPLE)
    assert await sweep(tmp_path, KINDS, points) == []
