"""Keys as handles: find, send to and list runs by the key they were started with, and the
reuse policy of `start(key=...)`, on every store."""

from __future__ import annotations

import pytest

from persistence.runtime import RunActiveError, Runtime
from persistence.stores import RunFinishedError, RunNotFoundError, Store
from persistence.worker import Worker
from statecharts import SimulatedClock
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
