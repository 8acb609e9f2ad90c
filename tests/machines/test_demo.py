"""The main job runs end to end and tells the truth about what happened."""

from __future__ import annotations

from pathlib import Path

import pytest

from machines import demo
from machines.fakes import FakeWorld


def test_the_demo_runs_and_creates_no_duplicates(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    world = FakeWorld(str(tmp_path / "world.db"))
    tasks = world.rows("select external_key from tasks")
    assert len(tasks) == len({t["external_key"] for t in tasks}) == 8
    assert "duplicates: 0" in out
    assert f"tasks created: {len(tasks)}" in out
    assert "reconciled: +2 watch (Globex, Umbrella)" in out, "lost webhooks repaired"
    assert "worker KILLED after creating task T-2" in out
    assert "5 task(s): T-1 Acme Corp #1, T-2 Initech #1, T-3 Hooli #1, T-4 Globex #1, " \
        "T-5 Umbrella #1" in out, "the resumed run found T-2 instead of making it again"
    assert "FAILED: StageFilterMatchesNothing" in out
    assert "same alert sent recently: suppressed" in out
    assert "skipped Acme Corp step 2 (TaskToolUnavailable)" in out
    assert "after 3 retries of the invoice API" in out
    evaluate_row = next(line for line in out.splitlines()
                        if line.strip().startswith("followup_evaluate"))
    assert evaluate_row.split()[1] == "135", "hourly 09:00-17:00 on 15 business days"
    invoices = world.rows("select order_id from invoices")
    assert sorted(i["order_id"] for i in invoices) == ["O-1", "O-2", "O-3"]
