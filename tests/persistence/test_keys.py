"""Keys as handles: find, send to and list runs by the key they were started with, and the
reuse policy of `start(key=...)`, on every store."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from persistence.runtime import RunActiveError, Runtime
from persistence.stores import RunFinishedError, RunNotFoundError, RunRecord, Store
from persistence.worker import Worker
from statecharts import SimulatedClock, create_machine
from tests.persistence.workflows import approval


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(1_700_000_000_000)


def _ended(runtime: Runtime, key: str) -> str:
    """Start a run with `key` and drive it to its end; its id."""
    run_id = runtime.start("approval", key=key)
    runtime.send({"type": "APPROVE", "by": "ann"}, workflow="approval", key=key)
    Worker(runtime).run_until_idle()
    assert runtime.get(run_id).status == "done"
    return run_id


def test_a_key_addresses_its_run_for_sending_and_reading(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [approval], clock=clock)
    run_id = runtime.start("approval", key="charge-1")
    other = runtime.start("approval", key="charge-2")
    assert runtime.get_by_key("approval", "charge-1").id == run_id
    runtime.send({"type": "APPROVE", "by": "bob"}, workflow="approval", key="charge-1")
    Worker(runtime).run_until_idle()
    assert runtime.snapshot(run_id).context["approved_by"] == "bob"
    assert runtime.get(other).status == "active"
    assert [r.id for r in runtime.list(key="charge-1")] == [run_id]
    assert [r.id for r in runtime.list(key="charge-2", status="active")] == [other]
    assert runtime.list(key="charge-2", status="done") == []
    with pytest.raises(RunNotFoundError, match="no run of 'approval' with key 'charge-9'"):
        runtime.get_by_key("approval", "charge-9")
    with pytest.raises(RunNotFoundError):
        runtime.send("APPROVE", workflow="approval", key="charge-9")
    with pytest.raises(RunFinishedError):
        runtime.send("APPROVE", workflow="approval", key="charge-1")
    with pytest.raises(TypeError, match="both workflow= and key="):
        runtime.send("APPROVE", workflow="approval")


def test_start_by_default_returns_the_keyed_run_even_after_it_ended(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [approval], clock=clock)
    done = _ended(runtime, "invoice-7")
    assert runtime.start("approval", key="invoice-7") == done
    record, created = runtime.start_run("approval", key="invoice-7")
    assert (record.id, record.status, created) == (done, "done", False)
    assert len(runtime.list(key="invoice-7")) == 1


def test_allow_duplicate_starts_again_only_once_the_previous_run_ended(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [approval], clock=clock)
    active = runtime.start("approval", key="k", reuse="allow_duplicate")
    assert runtime.start("approval", key="k", reuse="allow_duplicate") == active
    runtime.send("APPROVE", workflow="approval", key="k")
    Worker(runtime).run_until_idle()
    clock.advance(1)
    again = runtime.start("approval", key="k", reuse="allow_duplicate")
    assert again != active
    assert runtime.get_by_key("approval", "k").id == again  # the newest run is the handle
    assert [r.id for r in runtime.list(key="k")] == [again, active]


def test_reject_active_refuses_while_a_run_is_active(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [approval], clock=clock)
    first = runtime.start("approval", key="k", reuse="reject_active")
    with pytest.raises(RunActiveError, match="is active") as refused:
        runtime.start("approval", key="k", reuse="reject_active")
    assert refused.value.run.id == first
    runtime.send("REJECT", workflow="approval", key="k")
    Worker(runtime).run_until_idle()
    clock.advance(1)
    assert runtime.start("approval", key="k", reuse="reject_active") != first
    with pytest.raises(ValueError, match="reuse: 'sometimes' is not one of"):
        runtime.start("approval", key="k", reuse="sometimes")  # type: ignore[arg-type]


# -- a retried start racing the key's first run (issue 47 R4) -----------------------------

SLOW_CONTEXT_S = 0.5


def _slow_context(input: Any) -> dict[str, Any]:
    """The initial context, computed slowly when the input asks (a start that is still
    between its key lookup and its insert while another start's run ends)."""
    time.sleep((input or {}).get("slow", 0))
    return {"approved_by": None}


slow_approval = create_machine(
    {
        "id": "slow_approval",
        "initial": "waiting",
        "context": _slow_context,
        "states": {"waiting": {"on": {"APPROVE": "approved"}}, "approved": {"type": "final"}},
    }
)
instant = create_machine(
    {"id": "instant", "initial": "done", "states": {"done": {"type": "final"}}}
)


def test_a_start_retried_while_the_keys_first_run_ends_returns_that_run(store: Store) -> None:
    runtime = Runtime(store, [slow_approval])
    for n in range(5):
        key = f"webhook-{n}"
        retried: list[tuple[RunRecord, bool]] = []

        def retry(k: str = key, into: list[tuple[RunRecord, bool]] = retried) -> None:
            into.append(runtime.start_run("slow_approval", {"slow": SLOW_CONTEXT_S}, k))

        late = threading.Thread(target=retry)
        late.start()  # looks the key up (nothing yet), then computes its first step slowly
        time.sleep(SLOW_CONTEXT_S / 5)
        first = runtime.start("slow_approval", key=key)  # meanwhile: started and ended
        runtime.send("APPROVE", workflow="slow_approval", key=key)
        Worker(runtime).run_until_idle()
        assert runtime.get(first).status == "done"
        late.join(timeout=30)
        assert [(record.id, created) for record, created in retried] == [(first, False)], n
        assert [r.id for r in runtime.list(key=key)] == [first], n


def test_simultaneous_starts_of_a_machine_final_at_once_start_one_run(store: Store) -> None:
    runtime = Runtime(store, [instant])
    for n in range(10):
        key, barrier = f"once-{n}", threading.Barrier(6)
        ids: list[str] = []

        def start(k: str = key, b: threading.Barrier = barrier, into: list[str] = ids) -> None:
            b.wait()
            into.append(runtime.start("instant", key=k))

        threads = [threading.Thread(target=start) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert len(set(ids)) == 1 and len(ids) == 6, n
        assert len(runtime.list(key=key)) == 1, n


def test_allow_duplicate_still_starts_again_after_the_run_ended_under_the_key_lock(
    store: Store,
) -> None:
    runtime = Runtime(store, [instant])
    first = runtime.start("instant", key="k", reuse="allow_duplicate")
    again = runtime.start("instant", key="k", reuse="allow_duplicate")
    assert again != first and runtime.start("instant", key="k") == again
