"""`statecharts diff --store`: what deploying a new definition does to the runs in flight, on
real SQLite files and a real PostgreSQL. Runs are started and stepped by the durable runtime
and a worker, then the new definition is tried on each of them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest

from persistence.impact import impact_text, store_impact
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import SimulatedClock, create_machine
from statecharts.cli import main
from statecharts.diff import diff_machines
from tests.persistence.conftest import StoreFactory

V1: dict[str, Any] = {
    "id": "approval_flow",
    "version": "1",
    "context": {"note": None},
    "initial": "drafting",
    "states": {
        "drafting": {"on": {"SUBMIT": "reviewing"}},
        "reviewing": {"on": {"APPROVE": "approved", "REJECT": "drafting"}},
        "approved": {"type": "final"},
    },
}


def v2_config() -> dict[str, Any]:
    """Reviewing is dropped: a submitted draft is approved at once."""
    config = copy.deepcopy(V1)
    config["version"] = "2"
    del config["states"]["reviewing"]
    config["states"]["drafting"]["on"]["SUBMIT"] = "approved"
    return config


def from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """The migration that moves runs out of the removed state, back to drafting."""
    return {**data, "value": "drafting" if data["value"] == "reviewing" else data["value"]}


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(1_700_000_000_000)


def start_runs(store: Store, clock: SimulatedClock) -> list[str]:
    """Five runs of version 1: three submitted (in reviewing), two still drafting, and one
    finished (not active: never counted)."""
    runtime = Runtime(store, [create_machine(V1)], clock=clock)
    ids = [runtime.start("approval_flow") for _ in range(6)]
    for run_id in ids[:4]:
        runtime.send(run_id, "SUBMIT")
    Worker(runtime).run_until_idle()
    runtime.send(ids[3], "APPROVE")
    Worker(runtime).run_until_idle()
    assert sorted(runtime.get(i).state for i in ids) == [
        "approved",
        "drafting",
        "drafting",
        "reviewing",
        "reviewing",
        "reviewing",
    ]
    return ids


def test_runs_in_a_removed_state_without_a_migration_are_stranded(
    store: Store, clock: SimulatedClock
) -> None:
    ids = start_runs(store, clock)
    v2 = create_machine(v2_config())
    Runtime(store, [v2], clock=clock).start("approval_flow")  # already on the new definition
    impact = store_impact(store, diff_machines(create_machine(V1), v2))
    assert (impact.active, impact.on_new, impact.stranded, impact.pinned) == (6, 1, 3, 2)
    [reviewing, drafting] = impact.states
    assert (reviewing.state, reviewing.change, reviewing.runs) == ("reviewing", "removed", 3)
    assert reviewing.outcomes == {"stranded": 3}
    assert set(reviewing.examples) <= set(ids[:3]) and len(reviewing.examples) == 3
    assert (drafting.state, drafting.change, drafting.outcomes) == (
        "drafting",
        "changed",
        {"pinned": 2},
    )
    text = impact_text(impact)
    assert "reviewing (removed): 3 run(s): 3 stranded" in text
    assert "has no migration from it" in text  # the engine's own reason, per group
    assert "STRANDED: 3 run(s)" in text


def test_a_migration_that_moves_them_covers_every_run(store: Store, clock: SimulatedClock) -> None:
    start_runs(store, clock)
    v2 = create_machine(v2_config(), migrations={"1": from_v1})
    impact = store_impact(store, diff_machines(create_machine(V1), v2))
    assert impact.stranded == 0 and impact.pinned == 0
    [reviewing, drafting] = impact.states
    assert reviewing.outcomes == {"migrated": 3} and reviewing.landed == {"drafting": 3}
    assert drafting.outcomes == {"migrated": 2}
    assert impact_text(impact).rstrip().endswith("No run is stranded.")


def test_a_migration_that_leaves_them_in_the_removed_state_strands_them(
    store: Store, clock: SimulatedClock
) -> None:
    start_runs(store, clock)
    v2 = create_machine(v2_config(), migrations={"1": lambda data: data})
    impact = store_impact(store, diff_machines(create_machine(V1), v2))
    [reviewing, drafting] = impact.states
    assert reviewing.outcomes == {"stranded": 3}
    assert drafting.outcomes == {"migrated": 2}
    [reason] = reviewing.reasons
    assert "reviewing" in reason  # the restore error names the state it cannot find


def test_a_long_migration_error_is_cut_between_words_in_the_report(
    store: Store, clock: SimulatedClock
) -> None:
    """Issue 44: the live-runs report cut a long reason mid-word at 200 characters."""
    words = " ".join(f"word{i}" for i in range(80))  # ~550 characters

    def refuse(data: dict[str, Any]) -> dict[str, Any]:
        raise ValueError(f"cannot migrate: {words}")

    start_runs(store, clock)
    v2 = create_machine(v2_config(), migrations={"1": refuse})
    [reviewing, _] = store_impact(store, diff_machines(create_machine(V1), v2)).states
    [reason] = reviewing.reasons
    assert len(reason) <= 200 and reason.endswith(" …")
    assert reason[:-2].split(" ")[2:] == words.split(" ")[: len(reason[:-2].split(" ")) - 2]
    assert f"not migrated (3): {reason}" in impact_text(
        store_impact(store, diff_machines(create_machine(V1), v2))
    )


def _url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store_kind == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    dsn = request.getfixturevalue("pg_dsn")
    schema = request.getfixturevalue("pg_schema")
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


def test_the_command_exits_1_when_a_deployment_would_strand_runs(
    store_factory: StoreFactory,
    store_kind: str,
    tmp_path: Path,
    clock: SimulatedClock,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    start_runs(store_factory(), clock)
    old, new = tmp_path / "v1.json", tmp_path / "v2.json"
    old.write_bytes(orjson.dumps(V1))
    new.write_bytes(orjson.dumps(v2_config()))
    url = _url(store_kind, tmp_path, request)
    assert main(["diff", str(old), str(new), "--store", url]) == 1
    out = capsys.readouterr().out
    assert "  - reviewing: state “Reviewing” removed" in out
    assert "reviewing (removed): 3 run(s): 3 stranded" in out
    assert main(["diff", str(old), str(old), "--store", url]) == 0  # no change: pinned, not
    out = capsys.readouterr().out  # stranded
    assert "approval_flow: no changes" in out and "No run is stranded" in out
    assert main(["diff", str(old), str(new), "--store", url, "--format", "markdown"]) == 1
    assert "| `reviewing` | removed | 3 | 0 | 3 | 0 |" in capsys.readouterr().out
