"""Dry-run: external effects are not executed but recorded as skipped with the result
'dry-run'; every store write happens exactly as in a real run."""

from __future__ import annotations

from typing import Any

from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import SimulatedClock, assign, create_machine, external
from tests.persistence.conftest import StoreFactory

calls: list[str] = []


@external
def send_email(context: Any, event: Any) -> None:
    calls.append("email")


def create_task(input: Any) -> str:
    calls.append("task")
    return "TASK-1"


def load_deal(input: Any) -> dict[str, Any]:
    calls.append("db")
    return {"deal": input}


followup = create_machine(
    {
        "id": "followup",
        "initial": "loading",
        "context": {},
        "states": {
            "loading": {"invoke": {"src": "load_deal", "input": 7, "onDone": "creating"}},
            "creating": {
                "invoke": {
                    "src": "create_task",
                    "external": True,
                    "onDone": {
                        "target": "mailing",
                        "actions": assign({"task_id": lambda c, e: e["output"]}),
                    },
                }
            },
            "mailing": {"entry": "send_email", "always": "done"},
            "done": {"type": "final"},
        },
    },
    actors={"load_deal": load_deal, "create_task": create_task},
    actions={"send_email": send_email},
)


def _run(store: Store, dry_run: bool) -> tuple[Any, list[tuple[Any, ...]], list[str]]:
    calls.clear()
    runtime = Runtime(store, [followup], clock=SimulatedClock(1_000), dry_run=dry_run)
    # one database for both runs: a key names one run for ever, so each run has its own
    run_id = runtime.start("followup", key=f"deal-7{'-dry' if dry_run else ''}")
    Worker(runtime).run_until_idle()
    run = store.get_run(run_id)
    # the outbox holds the action; the invoked functions are calls beside the run, each shown
    # by its status and its attempt's outcome and message
    effects: list[tuple[Any, ...]] = [
        (e.kind, e.status, e.result) for e in store.list_effects(run_id)
    ]
    attempts = {a.idempotency_key: a for a in store.call_attempts(run_id)}
    effects += [
        ("call", c.status, attempts[c.idempotency_key].outcome, attempts[c.idempotency_key].message)
        for c in store.list_calls(run_id)
    ]
    return run, effects, list(calls)


def test_dry_run_skips_only_external_effects_and_writes_the_same_rows(
    store_factory: StoreFactory,
) -> None:
    real_run, real_effects, real_calls = _run(store_factory(), dry_run=False)
    dry_run, dry_effects, dry_calls = _run(store_factory(), dry_run=True)

    assert real_calls == ["db", "task", "email"]
    assert dry_calls == ["db"], "database work proceeds; task creation and email are blocked"
    assert dry_run.status == real_run.status == "done"
    assert dry_run.snapshot["context"] == {"task_id": "dry-run"}
    assert real_run.snapshot["context"] == {"task_id": "TASK-1"}
    # the same rows, in the same order; only the external ones differ, as skipped 'dry-run'
    assert [e[0] for e in dry_effects] == [e[0] for e in real_effects]
    assert real_effects == [
        ("action", "done", None),
        ("call", "done", "done", None),
        ("call", "done", "done", None),
    ]
    assert dry_effects == [
        ("action", "skipped", "dry-run"),
        ("call", "done", "done", None),
        ("call", "done", "skipped", "dry-run"),
    ]
