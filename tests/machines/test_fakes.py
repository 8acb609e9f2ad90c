"""The fake outside world: failures and holds on demand, shared across connections."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from machines.fakes import FOREVER, FakeWorld
from machines.followup.adapters import CrmUnavailable, FakeCrm, FakeTaskTool


def test_failures_count_down_and_forever_lasts_until_healed(tmp_path: Path) -> None:
    world = FakeWorld(str(tmp_path / "w.db"))
    crm = FakeCrm(world)
    crm.set_stages(["Lead"])
    world.fail("crm", times=2)
    for _ in range(2):
        with pytest.raises(CrmUnavailable):
            crm.stage_names()
    assert crm.stage_names() == ["Lead"]
    world.fail("crm", times=FOREVER)
    for _ in range(5):
        with pytest.raises(CrmUnavailable):
            crm.stage_names()
    world.heal("crm")
    assert crm.stage_names() == ["Lead"]
    assert world.calls("crm") == 9


def test_a_hold_blocks_the_writer_after_the_nth_write_until_released(tmp_path: Path) -> None:
    world = FakeWorld(str(tmp_path / "w.db"))
    other_process_view = FakeWorld(str(tmp_path / "w.db"))
    tool = FakeTaskTool(world)
    world.hold("tasks", after=2)
    made: list[str] = []
    writer = threading.Thread(
        target=lambda: made.extend(
            tool.create_task(f"k{n}", "t", "b", "2026-03-02") for n in range(3)
        ),
        daemon=True,
    )
    writer.start()
    try:
        for _ in range(500):
            if other_process_view.holding("tasks"):
                break
            threading.Event().wait(0.01)
        assert other_process_view.holding("tasks")
        assert [t["id"] for t in FakeTaskTool(other_process_view).tasks()] == ["T-1", "T-2"]
        assert made == ["T-1"], "the writer is blocked inside its second call"
    finally:
        other_process_view.release("tasks")
    writer.join(5)
    assert made == ["T-1", "T-2", "T-3"]
