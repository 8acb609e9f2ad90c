"""An imported n8n workflow on the durable runtime (SQLite file, worker): the same node calls,
in n8n's order, with the same items, as the n8n execution model; the snapshot with n8n's
stack in its context survives a restart of the runtime between steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from persistence.runtime import Runtime
from persistence.stores.sqlite import SQLiteStore
from persistence.worker import Worker
from statecharts import SimulatedClock
from statecharts.io.n8n import from_n8n
from tests.io.n8n_corpus import corpus_data
from tests.io.n8n_oracle import Stubs, n8n_run, stub_machine, widths_of

WORKFLOWS = [
    ("zie619__Code_0182", "Schedule Trigger", "SCHEDULE_TRIGGER"),
    ("zie619__Form_0633", "Waitlist Form", "WAITLIST_FORM"),
    ("enescingoz__Other_Integrations", "Run Demo", "RUN_DEMO"),
]


@pytest.mark.parametrize("name, trigger, event", WORKFLOWS, ids=[w[0] for w in WORKFLOWS])
@pytest.mark.parametrize("seed", [0, 3])
def test_durable_run_calls_the_nodes_n8n_calls(
    tmp_path: Path, name: str, trigger: str, event: str, seed: int
) -> None:
    data = corpus_data(name)
    result = from_n8n(data, "w")
    expected = n8n_run(data, trigger, Stubs(seed))
    stubs = Stubs(seed)
    clock = SimulatedClock(1_700_000_000_000)
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    store.migrate()
    machine = stub_machine(result, stubs, widths_of(data))
    runtime = Runtime(store, [machine], clock=clock)
    run_id = runtime.start("w")
    runtime.send(run_id, event)
    for _ in range(200):
        Worker(runtime, lease_ms=5000).run_until_idle()
        record = runtime.get(run_id)
        if record.status != "active":
            break
        snapshot = runtime.snapshot(run_id)
        waiting = _event_of(result.config, snapshot.value)
        if waiting is not None:
            runtime.send(run_id, waiting)
        else:
            clock.advance(3_600_000)
        store.close()  # a restart between steps: a new store and runtime on the same file
        store = SQLiteStore(path)
        runtime = Runtime(store, [machine], clock=clock)
    assert stubs.calls == expected.calls
    assert runtime.get(run_id).status == expected.status
    store.close()


def _event_of(config: dict[str, Any], value: Any) -> str | None:
    state = config["states"].get(value, {}) if isinstance(value, str) else {}
    events = list((state.get("on") or {}).keys())
    return events[0] if events and not state.get("after") else None


def _endless(name: str) -> Any:
    import tests.io.test_n8n_oracle as oracle_tests

    if name == "disabled":
        return oracle_tests._self_fed_loop(disabled=True)
    return getattr(oracle_tests, f"_{name}")()


@pytest.mark.parametrize(
    "name, nodes",
    [
        # a disabled Loop Over Items wired to itself passes the same items round for ever in n8n
        # (before: the engine's InfiniteLoopError failed the run, its snapshot left in 'set')
        ("disabled", "'Loop'"),
        # the loop leaves a Merge one more round waiting per visit (n8n: for ever, its memory
        # growing; before: each route slower than the last, for more than 25 minutes)
        ("merge_fed_loop", "'Loop'"),
        # Wait (1 s) -> No Operation -> Wait (before: one timer after another, for ever)
        ("waiting_loop", "'Wait', 'Pass'"),
    ],
)
def test_a_loop_n8n_would_run_for_ever_fails_the_durable_run_and_nothing_stalls(
    tmp_path: Path, name: str, nodes: str
) -> None:
    # on the runtime the run fails in 'loops_forever', saying why, within a few timers; Set
    # is called once, and the worker is left with nothing (no run, no timer)
    data = _endless(name)
    result = from_n8n(data, "w")
    stubs = Stubs(0, fail_rate=0, empty_rate=0)
    clock = SimulatedClock(1_700_000_000_000)
    store = SQLiteStore(tmp_path / "runs.db")
    store.migrate()
    runtime = Runtime(store, [stub_machine(result, stubs, widths_of(data))], clock=clock)
    run_id = runtime.start("w")
    runtime.send(run_id, "GO")
    for _ in range(5):
        Worker(runtime, lease_ms=5000).run_until_idle()
        clock.advance(1000)
    assert runtime.get(run_id).status == "error"
    snapshot = runtime.snapshot(run_id)
    assert snapshot.value == "loops_forever"
    assert f"items go round {nodes}," in str(snapshot.error)
    assert all(len(rounds) < 10 for _, rounds, *_ in snapshot.context["n8n"]["waiting"])
    assert [name for name, _ in stubs.calls] == ["Set"]
    clock.advance(60_000)
    assert Worker(runtime, lease_ms=5000).run_until_idle() == 0
    store.close()
