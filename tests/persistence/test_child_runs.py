"""Durable child runs (issue 18): invoked and spawned child machines run as child runs, on every
store (SQLite file, PostgreSQL, memory), stepped by real workers.

The three-level example (`machines.orders`: order -> payment -> fraud_check) is exercised end
to end: the whole tree completes, a grandchild's failure reaches the order as an error and
takes its `onError`, cancelling the order cancels both descendants.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from machines.orders import MACHINES, order
from persistence import Runtime, Worker
from persistence.cli import main as cli_main
from persistence.runtime import NotResumableError
from persistence.stores import Store, open_store
from persistence.stores.rules import call_key
from persistence.telemetry import Telemetry
from persistence.telemetry.metrics import PrometheusMetrics
from persistence.ui.app import create_app
from statecharts import (
    SimulatedClock,
    assign,
    create_actor,
    create_machine,
    from_callable,
    send_parent,
    send_to,
    spawn_child,
    stop_child,
)


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(start=1_700_000_000_000)


def _tree(runtime: Runtime, run_id: str) -> dict[str, Any]:
    """The run and its descendants as {invoke path: row}."""
    found: dict[str, Any] = {"": runtime.get(run_id)}
    todo = [("", run_id)]
    while todo:
        path, current = todo.pop()
        for child in runtime.children(current):
            child_path = f"{path}/{child.parent_invoke_id or child.workflow_name}"
            found[child_path] = child
            todo.append((child_path, child.id))
    return found


def _journal_types(store: Store, run_id: str) -> list[str]:
    return [str(e.event.get("type")) for e in store.list_events(run_id)]


def test_the_whole_order_tree_completes(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [order], clock=clock)  # payment and fraud_check found inside it
    run_id = runtime.start("order", {"order_id": 7, "card": "ok", "amount": 30}, key="order-7")
    tree = _tree(runtime, run_id)
    # the whole first step of the tree is one transaction: children exist before any worker
    assert sorted(tree) == ["", "/payment", "/payment/fraud_check"]
    payment, fraud = tree["/payment"], tree["/payment/fraud_check"]
    assert (payment.key, payment.parent_run_id, payment.parent_invoke_id) == (
        "order-7/payment",
        run_id,
        "payment",
    )
    assert (fraud.key, fraud.parent_run_id) == ("order-7/payment/fraud_check", payment.id)
    assert runtime.get_by_key("fraud_check", "order-7/payment/fraud_check").id == fraud.id
    Worker(runtime).run_until_idle()
    tree = _tree(runtime, run_id)
    assert {path: row.status for path, row in tree.items()} == {
        "": "done",
        "/payment": "done",
        "/payment/fraud_check": "done",
    }
    assert tree[""].snapshot["output"]["receipt"] is not None
    assert tree["/payment"].snapshot["context"]["cleared_score"] == 10  # send_parent arrived
    assert tree["/payment"].snapshot["context"]["risk"] == 10  # the grandchild's output
    # each completion was applied once by its parent, never dead-lettered
    assert _journal_types(store, run_id).count("xstate.done.actor.payment") == 1
    assert _journal_types(store, payment.id).count("xstate.done.actor.fraud_check") == 1
    assert all(store.dead_letters(row.id) == [] for row in tree.values())


def test_a_grandchild_failure_reaches_the_order_as_an_error(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, list(MACHINES.values()), clock=clock)
    run_id = runtime.start("order", {"order_id": 8, "card": "stolen", "amount": 30})
    Worker(runtime).run_until_idle()
    tree = _tree(runtime, run_id)
    assert tree["/payment/fraud_check"].status == "error"
    assert tree["/payment"].status == "error"
    assert tree["/payment"].last_error == "payment refused"
    top = tree[""]
    assert (top.status, top.state) == ("done", "payment_failed")  # its onError took it
    assert top.snapshot["output"]["problem"] == "payment refused"
    assert tree["/payment"].key == f"{run_id}/payment"  # no key: the parent's id names it


def test_cancelling_the_order_cancels_both_descendants(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [order], clock=clock)
    run_id = runtime.start("order", {"order_id": 9, "card": "review", "amount": 30}, key="o-9")
    worker = Worker(runtime)
    worker.run_until_idle()
    tree = _tree(runtime, run_id)
    assert tree["/payment/fraud_check"].state == "awaiting_review"
    assert runtime.cancel(run_id, reason="customer gave up") == "cancelled"
    tree = _tree(runtime, run_id)
    assert {path: row.status for path, row in tree.items()} == {
        "": "cancelled",
        "/payment": "cancelled",
        "/payment/fraud_check": "cancelled",
    }
    for row in tree.values():  # journaled on each run
        assert _journal_types(store, row.id)[-1] == "statecharts.cancel"
    worker.run_until_idle()
    assert runtime.get(run_id).status == "cancelled"
    assert store.dead_letters(run_id) == []  # a stopped child reports to no one


def test_a_review_approved_by_key_completes_the_tree(store: Store, clock: SimulatedClock) -> None:
    runtime = Runtime(store, [order], clock=clock)
    run_id = runtime.start("order", {"order_id": 10, "card": "review", "amount": 5}, key="o-10")
    worker = Worker(runtime)
    worker.run_until_idle()
    runtime.send("APPROVE", workflow="fraud_check", key="o-10/payment/fraud_check")
    worker.run_until_idle()
    assert runtime.get(run_id).status == "done"
    assert runtime.get(run_id).snapshot["output"]["receipt"]


def test_cancelling_a_leased_parent_cancels_its_children_through_the_holder(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [order], clock=clock)
    run_id = runtime.start("order", {"order_id": 11, "card": "review", "amount": 5})
    worker = Worker(runtime)
    worker.run_until_idle()
    payment = runtime.children(run_id)[0]
    claimed = store.claim_runs("holder", clock.now(), 60_000, 10)
    assert claimed == [] or all(r.id != run_id for r in claimed)
    # lease the order by hand: the store can only ask its holder
    store.send_event(run_id, {"type": "NOTHING"}, clock.now())
    (held,) = [r for r in store.claim_runs("holder", clock.now(), 60_000, 10) if r.id == run_id]
    assert runtime.cancel(run_id) == "requested"
    store.release(held.id, "holder", clock.now())
    worker.run_until_idle()
    assert runtime.get(run_id).status == "cancelled"
    assert runtime.get(payment.id).status == "cancelled"
    assert runtime.children(payment.id)[0].status == "cancelled"


def test_an_operator_cancelling_a_child_is_an_error_for_its_parent(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [order], clock=clock)
    run_id = runtime.start("order", {"order_id": 12, "card": "review", "amount": 5})
    Worker(runtime).run_until_idle()
    payment = runtime.children(run_id)[0]
    fraud = runtime.children(payment.id)[0]
    assert runtime.cancel(fraud.id, reason="operator") == "cancelled"
    Worker(runtime).run_until_idle()
    assert runtime.get(payment.id).status == "error"  # onError: refused (failure final)
    top = runtime.get(run_id)
    assert (top.status, top.state) == ("done", "payment_failed")


# -- send_to, send_parent, spawn_child, stop_child, retries --------------------------------

echo_child = create_machine(
    {
        "id": "echo_child",
        "initial": "listening",
        "context": {"heard": []},
        "states": {
            "listening": {"on": {"PING": {"actions": ["hear", "answer"]}, "QUIT": "quit"}},
            "quit": {"type": "final"},
        },
        "output": lambda ctx, ev: {"heard": ctx["heard"]},
    },
    actions={
        "hear": assign({"heard": lambda ctx, ev: [*ctx["heard"], ev["n"]]}),
        "answer": send_parent(lambda ctx, ev: {"type": "PONG", "n": ev["n"]}),
    },
)

talker = create_machine(
    {
        "id": "talker",
        "initial": "talking",
        "context": {"pongs": [], "done": None},
        "states": {
            "talking": {
                "invoke": {
                    "id": "echo",
                    "src": "echo_child",
                    "onDone": {"target": "finished", "actions": "keep_output"},
                },
                "entry": send_to("echo", {"type": "PING", "n": 1}),
                "on": {
                    "PONG": {"actions": "keep_pong"},
                    "MORE": {
                        "actions": send_to("echo", lambda ctx, ev: {"type": "PING", "n": ev["n"]})
                    },
                    "STRAY": {"actions": send_to("nobody", {"type": "PING", "n": 0})},
                    "BYE": {"actions": send_to("echo", {"type": "QUIT"})},
                    "LEAVE": "left",
                },
            },
            "left": {"on": {"BACK": "talking"}},
            "finished": {"type": "final"},
        },
    },
    actors={"echo_child": echo_child},
    actions={
        "keep_pong": assign({"pongs": lambda ctx, ev: [*ctx["pongs"], ev["n"]]}),
        "keep_output": assign({"done": lambda ctx, ev: ev["output"]}),
    },
)


def test_send_to_a_child_run_and_send_parent_go_through_the_inboxes(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [talker], clock=clock)
    run_id = runtime.start("talker")
    worker = Worker(runtime)
    worker.run_until_idle()  # the entry's PING reached the child started in the same step
    runtime.send(run_id, {"type": "MORE", "n": 2})
    worker.run_until_idle()
    assert runtime.get(run_id).snapshot["context"]["pongs"] == [1, 2]
    runtime.send(run_id, "STRAY")
    worker.run_until_idle()
    (letter,) = runtime.dead_letters(run_id)  # unknown child: dead-lettered with the sender
    assert letter.event["type"] == "PING" and "no active child run 'nobody'" in letter.reason
    runtime.send(run_id, "BYE")
    worker.run_until_idle()
    run = runtime.get(run_id)
    assert run.status == "done" and run.snapshot["context"]["done"] == {"heard": [1, 2]}
    # the parent ended: a late event for it is a dead letter of the parent
    (child,) = runtime.children(run_id)
    assert child.status == "done"


def test_leaving_the_invoking_state_cancels_the_child_and_reentry_starts_a_new_one(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [talker], clock=clock)
    run_id = runtime.start("talker", key="t")
    worker = Worker(runtime)
    worker.run_until_idle()
    runtime.send(run_id, "LEAVE")
    worker.run_until_idle()
    (first,) = runtime.children(run_id)
    assert first.status == "cancelled" and first.parent_invoke_id is None  # detached
    runtime.send(run_id, "BACK")
    worker.run_until_idle()
    children = sorted(runtime.children(run_id), key=lambda c: c.status)
    assert [c.status for c in children] == ["active", "cancelled"]
    assert children[0].key == children[1].key == "t/echo"
    assert children[0].snapshot["context"]["heard"] == [1]
    assert runtime.get(run_id).snapshot["context"]["pongs"] == [1, 1]


spawner = create_machine(
    {
        "id": "spawner",
        "initial": "running",
        "context": {},
        "states": {
            "running": {
                "on": {
                    "SPAWN": {"actions": spawn_child("echo_child", id="helper")},
                    "TELL": {"actions": send_to("helper", {"type": "PING", "n": 5})},
                    "DROP": {"actions": stop_child("helper")},
                    "END": "ended",
                }
            },
            "ended": {"type": "final"},
        },
    },
    actors={"echo_child": echo_child},
)


def test_spawn_child_lives_until_stopped_or_the_parent_ends(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [spawner], clock=clock)
    worker = Worker(runtime)
    first = runtime.start("spawner")
    for event in ("SPAWN", "TELL"):
        runtime.send(first, event)
        worker.run_until_idle()
    (helper,) = runtime.children(first)
    assert (helper.status, helper.snapshot["context"]["heard"]) == ("active", [5])
    runtime.send(first, "DROP")
    worker.run_until_idle()
    assert runtime.get(helper.id).status == "cancelled"
    second = runtime.start("spawner")
    for event in ("SPAWN", "END"):
        runtime.send(second, event)
        worker.run_until_idle()
    assert runtime.get(second).status == "done"
    assert [c.status for c in runtime.children(second)] == ["cancelled"]


def _always_fails(input: Any) -> Any:
    raise TimeoutError("the bank did not answer")


flaky_child = create_machine(
    {
        "id": "flaky_child",
        "initial": "working",
        "states": {
            "working": {"invoke": {"src": "call_bank", "onDone": "ok"}},  # error: unhandled
            "ok": {"type": "final"},
        },
    },
    actors={"call_bank": from_callable(_always_fails)},
)


def test_a_retried_invoke_of_a_child_machine_starts_one_child_run_per_attempt(
    store: Store, clock: SimulatedClock
) -> None:
    retrying = create_machine(
        {
            "id": "retrying",
            "initial": "calling",
            "states": {
                "calling": {
                    "invoke": {
                        "id": "sub",
                        "src": "flaky_child",
                        "retry": {"max_attempts": 3, "initial_interval": 1000, "backoff": "fixed"},
                        "onDone": "ok",
                        "onError": "gave_up",
                    }
                },
                "ok": {"type": "final"},
                "gave_up": {"type": "final"},
            },
        },
        actors={"flaky_child": flaky_child},
    )
    runtime = Runtime(store, [retrying], clock=clock)
    run_id = runtime.start("retrying", key="r")
    worker = Worker(runtime)
    for _ in range(10):
        worker.run_until_idle()
        clock.advance(1000)
    assert runtime.get(run_id).state == "gave_up"
    keys = sorted(c.key or "" for c in runtime.children(run_id))
    assert keys == ["r/sub", "r/sub#2", "r/sub#3"]
    assert all(c.status == "error" for c in runtime.children(run_id))


# -- upgrading to schema 4 --------------------------------------------------------------------


def _upgrade_keeps_runs_and_keys(store: Store, old_id: str, clock: SimulatedClock) -> None:
    """After the upgrade: the old run reads with no parent, its key still starts it once, and
    its tree of child runs starts and completes."""
    from persistence import schema

    assert store.schema_version() == schema.latest_version(store.dialect)  # type: ignore[attr-defined]
    old = store.get_run(old_id)
    assert (old.parent_run_id, old.parent_invoke_id, old.key) == (None, None, "order-1")
    runtime = Runtime(store, [order], clock=clock)
    run, effects, _ = runtime.prepare_run("order", {"card": "ok"}, "order-1", clock.now())
    again, created = store.create_run(run, effects, clock.now())  # the unique index decides
    assert (again.id, created) == (old_id, False)  # the active key still names one run
    new = runtime.start("order", {"order_id": 2, "card": "ok", "amount": 1}, key="order-2")
    Worker(runtime).run_until_idle()
    assert runtime.get(new).status == "done" and len(runtime.children(new)) == 1


def test_upgrading_sqlite_to_schema_4_adds_the_parent_columns(
    tmp_path: Any, clock: SimulatedClock
) -> None:
    import sqlite3

    from persistence import schema
    from persistence.stores import open_store
    from persistence.stores.sqlite import _statements

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute(
            f"CREATE TABLE {schema.VERSION_TABLE} (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at text)"
        )
        for migration in schema.migrations("sqlite")[:3]:
            for statement in _statements(migration.sql):
                db.execute(statement)
            db.execute(
                f"INSERT INTO {schema.VERSION_TABLE} VALUES (?, ?, '')",
                (migration.version, migration.name),
            )
        db.execute(
            "INSERT INTO workflow_runs (id, workflow_name, workflow_version, key, state, "
            "snapshot, status, created_at, updated_at) VALUES ('old', 'order', 'x', "
            "'order-1', 'paying', '{}', 'active', 1, 1)"
        )
    store = open_store(f"sqlite:///{path}", migrate=True)
    try:
        _upgrade_keeps_runs_and_keys(store, "old", clock)
    finally:
        store.close()


def test_upgrading_postgres_to_schema_4_adds_the_parent_columns(
    pg_dsn: str, pg_schema: str, clock: SimulatedClock
) -> None:
    import psycopg

    from persistence import schema
    from persistence.stores import open_store

    old_id = "00000000-0000-4000-8000-000000000018"
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        db.execute(f'CREATE SCHEMA "{pg_schema}"')
        db.execute(f'SET search_path = "{pg_schema}"')
        db.execute(
            f"CREATE TABLE {schema.VERSION_TABLE} (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at timestamptz)"
        )
        for migration in schema.migrations("postgres")[:3]:
            db.execute(migration.sql.encode())
            db.execute(
                f"INSERT INTO {schema.VERSION_TABLE} VALUES (%s, %s, now())",
                (migration.version, migration.name),
            )
        db.execute(
            "INSERT INTO workflow_runs (id, workflow_name, workflow_version, key, state, "
            "snapshot, status, created_at, updated_at) VALUES (%s, 'order', 'x', "
            "'order-1', 'paying', '{}', 'active', now(), now())",
            (old_id,),
        )
    sep = "&" if "?" in pg_dsn else "?"
    store = open_store(f"{pg_dsn}{sep}schema={pg_schema}", migrate=True)
    try:
        _upgrade_keeps_runs_and_keys(store, old_id, clock)
    finally:
        store.close()


def test_a_detached_start_runs_once_per_action_and_belongs_to_no_one(
    store: Store, clock: SimulatedClock
) -> None:
    from persistence.children import detached_start

    report = create_machine(
        {
            "id": "report",
            "initial": "waiting",
            "states": {"waiting": {"on": {"GO": "sent"}}, "sent": {"type": "final"}},
        }
    )
    runtime = Runtime(store, [report], clock=clock)  # (the starter is added below)
    start = detached_start(runtime, "report", lambda ctx, ev: {"for": ctx["who"]})
    starter = create_machine(
        {
            "id": "starter",
            "initial": "go",
            "context": {"who": "ann"},
            "states": {
                "go": {"entry": "start_report", "always": "done"},
                "done": {"type": "final"},
            },
        },
        actions={"start_report": start},
    )
    runtime = Runtime(store, [starter, report], clock=clock)
    run_id = runtime.start("starter")
    Worker(runtime).run_until_idle()
    assert runtime.get(run_id).status == "done"
    (effect,) = store.list_effects(run_id)
    (detached,) = runtime.list(name="report")
    key = call_key(effect.idempotency_key)  # what the action was given
    assert detached.key == f"detached:{key}" and detached.status == "active"
    assert detached.parent_run_id is None and runtime.children(run_id) == []
    # the action running again (a crash after it ran) starts nothing new
    assert start({"who": "ann"}, {}, idempotency_key=key) == detached.id
    assert len(runtime.list(name="report")) == 1


# -- the n8n importer's Execute Workflow ------------------------------------------------------


def _n8n_node(name: str, kind: str, x: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "id": name,
        "name": name,
        "type": f"n8n-nodes-base.{kind}",
        "typeVersion": 1,
        "position": [x, 0],
        "parameters": params or {},
    }


def _n8n_chain(name: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    links = {
        a["name"]: {"main": [[{"node": b["name"], "type": "main", "index": 0}]]}
        for a, b in itertools.pairwise(nodes)
    }
    return {
        "name": name,
        "nodes": list(nodes),
        "connections": links,
        "settings": {"executionOrder": "v1"},
    }


def _imported(data: dict[str, Any], name: str, **actors: Any) -> Any:
    from statecharts.io.n8n import from_n8n
    from statecharts.io.n8n.runtime import machine_config
    from statecharts.io.n8n.validation import placeholder_implementations

    result = from_n8n(data, name)
    impls = placeholder_implementations(result)
    impls["actors"].update(actors)
    return create_machine(
        machine_config(result.config),
        guards=impls["guards"],
        actions=impls["actions"],
        actors=impls["actors"],
        delays=impls["delays"],
    )


def test_an_imported_execute_workflow_that_waits_runs_the_sub_workflow_as_a_child_run(
    store: Store, clock: SimulatedClock
) -> None:
    sub = _imported(
        _n8n_chain(
            "Sub",
            _n8n_node("When called", "executeWorkflowTrigger", 0),
            _n8n_node("Work", "noOp", 200),
        ),
        "sub",
    )
    parent = _imported(
        _n8n_chain(
            "Parent",
            _n8n_node("Start", "manualTrigger", 0),
            _n8n_node("Run Sub", "executeWorkflow", 200, {"workflowId": "sub", "options": {}}),
            _n8n_node("After", "noOp", 400),
        ),
        "parent",
        run_sub=sub,
    )
    runtime = Runtime(store, [parent], clock=clock)
    run_id = runtime.start("parent", key="n8n-1")
    runtime.send(run_id, "START")
    Worker(runtime).run_until_idle()
    assert runtime.get(run_id).status == "done"
    (child,) = runtime.children(run_id)
    assert (child.workflow_name, child.parent_invoke_id, child.key, child.status) == (
        "sub",
        "run_sub",
        "n8n-1/run_sub",
        "done",
    )
    applied = [e.event["type"] for e in store.list_events(run_id)]
    assert applied.count("xstate.done.actor.run_sub") == 1


def test_an_error_workflow_and_a_scheduled_start_start_their_first_states_children(
    store: Store, clock: SimulatedClock
) -> None:
    from persistence.scheduling import ScheduledStart

    pager = create_machine(
        {
            "id": "pager",
            "initial": "ringing",
            "states": {"ringing": {"on": {"ACK": "acked"}}, "acked": {"type": "final"}},
        }
    )
    alert = create_machine(
        {
            "id": "alert",
            "initial": "paging",
            "states": {
                "paging": {"invoke": {"id": "pager", "src": "pager", "onDone": "done"}},
                "done": {"type": "final"},
            },
        },
        actors={"pager": pager},
    )
    failing = create_machine(
        {
            "id": "failing",
            "initial": "calling",
            "meta": {"error_workflow": "alert"},
            "states": {"calling": {"invoke": {"src": "call_bank"}}},
        },
        actors={"call_bank": from_callable(_always_fails)},
    )
    runtime = Runtime(store, [failing, alert], clock=clock)
    run_id = runtime.start("failing")
    worker = Worker(runtime)
    worker.run_until_idle()
    assert runtime.get(run_id).status == "error"
    alert_run = runtime.get_by_key("alert", f"error-of:{run_id}")
    (paged,) = runtime.children(alert_run.id)
    assert (paged.workflow_name, paged.key, paged.status) == (
        "pager",
        f"error-of:{run_id}/pager",
        "active",
    )
    schedule = ScheduledStart(runtime, "nightly", "alert", "* * * * *")
    started = schedule.tick()
    assert started is not None
    (scheduled_pager,) = runtime.children(started)
    runtime.send(scheduled_pager.id, "ACK")
    worker.run_until_idle()
    assert runtime.get(started).status == "done"


# -- resuming a failed child, send_to by systemId, onSnapshot, the cancel metric --------------

_bank = {"up": False}


def _bank_call(input: Any) -> Any:
    if not _bank["up"]:
        raise TimeoutError("the bank did not answer")
    return "paid"


bank_child = create_machine(
    {
        "id": "bank_child",
        "initial": "working",
        "states": {
            "working": {"invoke": {"src": "call_bank", "onDone": "ok"}},  # error: unhandled
            "ok": {"type": "final"},
        },
    },
    actors={"call_bank": from_callable(_bank_call)},
)

bank_parent = create_machine(
    {
        "id": "bank_parent",
        "initial": "paying",
        "states": {
            "paying": {
                "invoke": {"id": "bank", "src": "bank_child", "onDone": "paid", "onError": "unpaid"}
            },
            "paid": {"type": "final"},
            "unpaid": {"on": {"GIVE_UP": "gave_up"}},  # active: it took the error
            "gave_up": {"type": "final"},
        },
    },
    actors={"bank_child": bank_child},
)


def test_resuming_a_child_whose_parent_took_its_error_is_refused_naming_the_parent(
    store: Store, clock: SimulatedClock
) -> None:
    _bank["up"] = False
    runtime = Runtime(store, [bank_parent], clock=clock)
    run_id = runtime.start("bank_parent")
    Worker(runtime).run_until_idle()
    (child,) = runtime.children(run_id)
    assert (child.status, runtime.get(run_id).state) == ("error", "unpaid")
    _bank["up"] = True
    with pytest.raises(NotResumableError, match=f"child run of {run_id}.*second one"):
        runtime.resume(child.id)
    # the operator view's button refuses it with the same words; nothing changed
    client = TestClient(create_app(store, [bank_parent]))
    page = client.get(f"/runs/{child.id}").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token is not None
    answer = client.post(
        f"/runs/{child.id}/resume", data={"csrf_token": token.group(1)}, follow_redirects=False
    )
    assert answer.status_code == 409 and f"child run of {run_id}" in answer.text
    Worker(runtime).run_until_idle()
    assert runtime.get(child.id).status == "error"
    types = _journal_types(store, run_id)
    assert (types.count("xstate.error.actor.bank"), types.count("xstate.done.actor.bank")) == (1, 0)


def _child_failed_before_its_parent_stepped(
    store: Store, clock: SimulatedClock
) -> tuple[Runtime, str, Any]:
    """A bank_parent run whose child failed (its error queued, not yet applied): the runtime,
    the parent's id and the child's row."""
    _bank["up"] = False
    runtime = Runtime(store, [bank_parent], clock=clock)
    run_id = runtime.start("bank_parent")
    children_only = Runtime(store, [bank_child], clock=clock)  # its workers step the child only
    Worker(children_only).run_until_idle()
    (child,) = runtime.children(run_id)
    return runtime, run_id, child


def test_a_child_resumed_while_its_parent_waits_reports_one_result(
    store: Store, clock: SimulatedClock
) -> None:
    runtime, run_id, child = _child_failed_before_its_parent_stepped(store, clock)
    assert child.status == "error" and runtime.get(run_id).state == "paying"  # error queued
    _bank["up"] = True
    assert runtime.resume(child.id).status == "active"  # takes the queued error back
    Worker(runtime).run_until_idle()
    assert (runtime.get(child.id).status, runtime.get(run_id).state) == ("done", "paid")
    types = _journal_types(store, run_id)
    assert (types.count("xstate.error.actor.bank"), types.count("xstate.done.actor.bank")) == (0, 1)
    assert store.dead_letters(run_id) == []


def test_a_child_is_not_resumed_while_a_worker_holds_its_waiting_parent(
    store: Store, clock: SimulatedClock
) -> None:
    runtime, run_id, child = _child_failed_before_its_parent_stepped(store, clock)
    (held,) = store.claim_runs("holder", clock.now(), 30_000, 10)  # it may be applying the error
    assert held.id == run_id
    with pytest.raises(
        NotResumableError, match=f"parent run {run_id} is being stepped by holder; try again"
    ):
        runtime.resume(child.id)
    assert runtime.get(child.id).status == "error"
    assert [e.event["type"] for e in store.pending_events(run_id)] == ["xstate.error.actor.bank"]


def test_resuming_a_child_of_an_ended_parent_is_refused(
    store: Store, clock: SimulatedClock
) -> None:
    runtime, run_id, child = _child_failed_before_its_parent_stepped(store, clock)
    assert runtime.cancel(run_id) == "cancelled"
    with pytest.raises(NotResumableError, match=f"{run_id}, which has ended \\(cancelled\\)"):
        runtime.resume(child.id)
    assert runtime.get(child.id).status == "error"


system_talker = create_machine(
    {
        "id": "system_talker",
        "initial": "talking",
        "context": {"pongs": [], "done": None},
        "states": {
            "talking": {
                "invoke": {
                    "id": "echo",
                    "src": "echo_child",
                    "systemId": "echo-service",
                    "onDone": "finished",
                },
                "entry": send_to("echo-service", {"type": "PING", "n": 1}),
                "on": {
                    "PONG": {"actions": "keep_pong"},
                    "MORE": {"actions": send_to("echo-service", {"type": "PING", "n": 2})},
                    "BYE": {"actions": send_to("echo-service", {"type": "QUIT"})},
                },
            },
            "finished": {"type": "final"},
        },
    },
    actors={"echo_child": echo_child},
    actions={"keep_pong": assign({"pongs": lambda ctx, ev: [*ctx["pongs"], ev["n"]]})},
)


def test_send_to_a_child_runs_system_id_reaches_it_as_in_memory(
    store: Store, clock: SimulatedClock
) -> None:
    memory = create_actor(system_talker, clock=clock).start()
    memory.send({"type": "MORE"})
    memory.send({"type": "BYE"})
    runtime = Runtime(store, [system_talker], clock=clock)
    run_id = runtime.start("system_talker")
    worker = Worker(runtime)
    worker.run_until_idle()
    runtime.send(run_id, "MORE")
    worker.run_until_idle()
    runtime.send(run_id, "BYE")
    worker.run_until_idle()
    run = runtime.get(run_id)
    assert run.status == "done" and run.snapshot["context"]["pongs"] == [1, 2]
    assert memory.get_snapshot().context["pongs"] == [1, 2]
    assert runtime.children(run_id)[0].key == "echo-service"
    assert store.dead_letters(run_id) == []


def test_on_snapshot_of_a_child_machine_is_refused_when_the_runtime_is_built(
    store: Store,
) -> None:
    watcher = create_machine(
        {
            "id": "watcher",
            "initial": "watching",
            "states": {
                "watching": {
                    "invoke": {"id": "echo", "src": "echo_child", "onSnapshot": {"actions": []}}
                }
            },
        },
        actors={"echo_child": echo_child},
    )
    with pytest.raises(
        ValueError,
        match=r"watcher: states.watching.invoke.onSnapshot: .*not "
        "supported in durable",
    ):
        Runtime(store, [watcher])


def _finished(prometheus: PrometheusMetrics) -> dict[tuple[str, str], float]:
    """`statecharts_runs_finished_total` as scraped: {(workflow, outcome): count}."""
    found = {}
    for line in generate_latest(prometheus.registry).decode().splitlines():
        hit = re.fullmatch(
            r'statecharts_runs_finished_total\{outcome="(\w+)",workflow="(\w+)"\}'
            r" (\S+)",
            line,
        )
        if hit is not None:
            found[(hit.group(2), hit.group(1))] = float(hit.group(3))
    return found


def _metered(
    store: Store, clock: SimulatedClock, *machines: Any
) -> tuple[Runtime, PrometheusMetrics]:
    prometheus = PrometheusMetrics()
    runtime = Runtime(store, list(machines), clock=clock, telemetry=Telemetry(metrics=[prometheus]))
    return runtime, prometheus


def test_cancelling_a_run_no_worker_holds_counts_it_as_finished(
    store: Store, clock: SimulatedClock
) -> None:
    runtime, prometheus = _metered(store, clock, talker)
    run_id = runtime.start("talker")
    assert runtime.cancel(run_id) == "cancelled"
    assert runtime.cancel(run_id) == "finished"  # counted once
    # its child run was cancelled with it: counted with the same labels as a direct cancel
    assert _finished(prometheus) == {("talker", "cancelled"): 1, ("echo_child", "cancelled"): 1}


def test_cancelling_the_order_counts_each_cancelled_descendant_once(
    store: Store, clock: SimulatedClock
) -> None:
    runtime, prometheus = _metered(store, clock, order)
    run_id = runtime.start("order", {"order_id": 13, "card": "review", "amount": 5})
    worker = Worker(runtime)
    worker.run_until_idle()
    assert _finished(prometheus) == {}
    assert runtime.cancel(run_id, reason="customer gave up") == "cancelled"
    worker.run_until_idle()
    assert runtime.cancel(run_id) == "finished"
    expected = {
        ("order", "cancelled"): 1,
        ("payment", "cancelled"): 1,
        ("fraud_check", "cancelled"): 1,
    }
    assert _finished(prometheus) == expected
    assert {row.status for row in _tree(runtime, run_id).values()} == {"cancelled"}


def test_a_leased_parent_cancelled_by_its_holder_counts_its_descendants_once(
    store: Store, clock: SimulatedClock
) -> None:
    runtime, prometheus = _metered(store, clock, order)
    run_id = runtime.start("order", {"order_id": 14, "card": "review", "amount": 5})
    worker = Worker(runtime)
    worker.run_until_idle()
    store.send_event(run_id, {"type": "NOTHING"}, clock.now())
    (held,) = [r for r in store.claim_runs("holder", clock.now(), 60_000, 10) if r.id == run_id]
    assert runtime.cancel(run_id) == "requested"
    assert _finished(prometheus) == {}  # nothing ended yet: the holder cancels it
    store.release(held.id, "holder", clock.now())
    worker.run_until_idle()  # the order's cancelling step cancels payment and fraud_check
    assert {row.status for row in _tree(runtime, run_id).values()} == {"cancelled"}
    assert _finished(prometheus) == {
        ("order", "cancelled"): 1,
        ("payment", "cancelled"): 1,
        ("fraud_check", "cancelled"): 1,
    }


def test_child_runs_stopped_by_their_parents_step_are_counted_as_cancelled(
    store: Store, clock: SimulatedClock
) -> None:
    runtime, prometheus = _metered(store, clock, talker, spawner)
    worker = Worker(runtime)
    talking = runtime.start("talker")
    worker.run_until_idle()
    runtime.send(talking, "LEAVE")  # leaving the invoking state stops the child run
    worker.run_until_idle()
    assert _finished(prometheus) == {("echo_child", "cancelled"): 1}
    spawning = runtime.start("spawner")
    for event in ("SPAWN", "END"):  # the parent ends: its spawned child is cancelled
        runtime.send(spawning, event)
        worker.run_until_idle()
    assert _finished(prometheus) == {("echo_child", "cancelled"): 2, ("spawner", "done"): 1}


def test_runs_resume_on_the_command_line_refuses_the_same_child(
    crash_url: str, clock: SimulatedClock
) -> None:
    _bank["up"] = False
    store = open_store(crash_url, migrate=True)
    try:
        runtime = Runtime(store, [bank_parent], clock=clock)
        run_id = runtime.start("bank_parent")
        Worker(runtime).run_until_idle()
        (child,) = runtime.children(run_id)
        _bank["up"] = True
        with pytest.raises(SystemExit, match=f"child run of {run_id}.*second one"):
            cli_main(
                [
                    "runs",
                    "resume",
                    child.id,
                    "--store",
                    crash_url,
                    "--machines",
                    "tests.persistence.test_child_runs:bank_parent",
                ]
            )
        assert store.get_run(child.id).status == "error"
    finally:
        store.close()
