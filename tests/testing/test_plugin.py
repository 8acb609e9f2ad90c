"""The pytest plugin: its fixtures here, and in a separate pytest run (a real subprocess) the
``--statecharts-coverage`` report."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from statecharts import SimulatedClock

from .example_machines import door_machine

SUITE = textwrap.dedent("""
    from statecharts import assign, create_machine

    DOOR = {
        "id": "door", "initial": "closed",
        "states": {
            "closed": {"on": {"OPEN": "opened", "LOCK": "locked"}},
            "opened": {"after": {"5000": "closed"}, "on": {"CLOSE": "closed"}},
            "locked": {"on": {"UNLOCK": "closed"}},
            "broken": {"on": {"REPAIR": "closed"}},
        },
    }

    def test_auto_close(start_actor, sim_clock):
        actor = start_actor(create_machine(DOOR))
        actor.send("OPEN")
        sim_clock.advance(5000)
        assert actor.get_snapshot().value == "closed"

    def test_pure_lock():
        machine = create_machine(DOOR)
        snapshot, _ = machine.initial_transition()
        snapshot, _ = machine.transition(snapshot, "LOCK")
        assert snapshot.value == "locked"

    def test_door_with_an_owner():
        # the same states and transitions, another initial context: another fingerprint
        machine = create_machine({**DOOR, "context": {"owner": "ann"}})
        snapshot, _ = machine.initial_transition()
        snapshot, _ = machine.transition(snapshot, "LOCK")
        snapshot, _ = machine.transition(snapshot, "UNLOCK")
        assert snapshot.value == "closed"

    GATE = {
        "id": "gate", "initial": "shut", "context": {"pushes": 0},
        "states": {
            "shut": {"on": {"PUSH": [{"guard": "pushedBefore", "target": "open"},
                                     {"actions": "countPush"}]}},
            "open": {},
        },
    }

    def test_pure_gate_opens_on_the_second_push():
        # the first PUSH compiles the route (through Machine.step); the second is taken by the
        # compiled route inside Machine.transition, and must be recorded too
        machine = create_machine(
            GATE, guards={"pushedBefore": lambda context, event: context["pushes"] > 0},
            actions={"countPush": assign({"pushes": lambda context, event: 1})})
        snapshot, _ = machine.initial_transition()
        snapshot, _ = machine.transition(snapshot, "PUSH")
        snapshot, _ = machine.transition(snapshot, "PUSH")
        assert snapshot.value == "open"
""")


def _run_pytest(
    tmp_path: Path, *args: str, register: bool = True
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_door.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    plugin = ["-p", "statecharts.testing.plugin"] if register else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *plugin,
            "-p",
            "no:cacheprovider",
            "-q",
            *args,
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_plugin_needs_no_registration_as_docs_testing_md_says(tmp_path: Path) -> None:
    """Issue 44 item 9: docs/testing.md asked users to register the plugin the wheel already
    registers (its pytest11 entry point). A project with no registration of its own gets the
    fixtures and the option; the page asks for none."""
    result = _run_pytest(tmp_path, "--statecharts-coverage", register=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "machine 'gate': states 2/2, transitions 2/2" in result.stdout
    page = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    plugin_section = page[page.index("## pytest plugin") :]
    plugin_section = plugin_section[: plugin_section.index("\n## ", 5)]
    assert "There is nothing to register" in plugin_section
    assert "[project.entry-points.pytest11]" not in plugin_section  # what it asked to add


def test_coverage_option_reports_what_the_suite_never_reached(tmp_path: Path) -> None:
    result = _run_pytest(tmp_path, "--statecharts-coverage")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "statecharts coverage" in out
    report = out[out.index("statecharts coverage") :].splitlines()
    # issue 44: one block for the door, though one test gave it another context (and so
    # another fingerprint); it was listed twice with different numbers
    assert [line for line in report if line.startswith("machine 'door'")] == [
        "machine 'door': states 3/4, transitions 4/6"
    ]
    assert "  never active: broken" in report
    assert "  never taken:  states.closed.on.LOCK[0]" not in report  # test_pure_lock took it
    assert "  never taken:  states.opened.on.CLOSE[0]" in report
    assert "  never taken:  states.locked.on.UNLOCK[0]" not in report  # the owner's door did
    assert "  never taken:  states.broken.on.REPAIR[0]" in report
    assert "machine 'gate': states 2/2, transitions 2/2" in report, report


def test_without_the_option_there_is_no_report(tmp_path: Path) -> None:
    result = _run_pytest(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "statecharts coverage" not in result.stdout


def test_fixtures_give_actors_on_a_simulated_clock(
    start_actor: Any, sim_clock: SimulatedClock
) -> None:
    actor = start_actor(door_machine())
    actor.send("OPEN")
    sim_clock.advance(4999)
    assert actor.get_snapshot().value == "opened"
    sim_clock.advance(1)
    assert actor.get_snapshot().value == "closed"
    assert sim_clock.pending() == 0
