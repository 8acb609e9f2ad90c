"""The XState-parity rules of issue 25 on the durable runtime, where workflows really run: an
invocation of a state left within the same macrostep is never started (no outbox record, no
call), and a finished call stays in the snapshot's children until its state is exited."""

from __future__ import annotations

from typing import Any

from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import SimulatedClock, create_machine, from_callable

CALLS: list[Any] = []


def _lookup(input: Any) -> str:
    CALLS.append(input)
    return "found"


PASS_THROUGH = create_machine(
    {
        "id": "pass_through",
        "initial": "deciding",
        "states": {
            "deciding": {"always": "asking"},
            "skipped": {},
            "asking": {
                "invoke": {"id": "never", "src": "lookup", "onDone": "skipped"},
                "always": "waiting",
            },
            "waiting": {
                "invoke": {"id": "lookup", "src": "lookup"},
                "on": {"xstate.done.actor.lookup": {"target": "holding"}},
            },
            "holding": {"invoke": {"id": "held", "src": "lookup"}, "on": {"LEAVE": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"lookup": from_callable(_lookup)},
)


def test_durable_runtime_never_starts_an_invocation_of_a_state_left_at_once(store: Store) -> None:
    CALLS.clear()
    clock = SimulatedClock(1_700_000_000_000)
    runtime = Runtime(store, [PASS_THROUGH], clock=clock)
    run_id = runtime.start("pass_through")
    worker = Worker(runtime, lease_ms=5000)
    for _ in range(5):
        worker.run_until_idle()
        clock.advance(50)
    assert runtime.get(run_id).state == "holding"
    started = [c.call_id for c in store.list_calls(run_id)]  # (calls run beside their run)
    assert started == ["lookup", "held"]  # never "never": its state was left at once
    assert not [e for e in store.list_effects(run_id) if e.kind == "start_child"]
    assert len(CALLS) == 2
    children = runtime.snapshot(run_id).children
    assert children["held"].status == "done"
    runtime.send(run_id, "LEAVE")
    worker.run_until_idle()
    assert runtime.get(run_id).status == "done"
