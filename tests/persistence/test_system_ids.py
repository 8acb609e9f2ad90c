"""Tree-wide `systemId` addressing (XState v5's actor system): an actor registered with a
`systemId` is reachable by that name from every actor of its tree, not only from its parent,
and one name is held by one actor at a time. The same charts run in memory (`create_actor`,
`machines.local.LocalRunner`) and durably on every store (SQLite file, PostgreSQL, memory),
where each actor is a run of its own and the events go through the inboxes."""

from __future__ import annotations

from typing import Any

import pytest

from machines.local import LocalRunner
from persistence import Runtime, Worker
from persistence.stores import Store
from statecharts import (
    ImplementationError,
    SimulatedClock,
    SystemIdTakenError,
    assign,
    create_actor,
    create_machine,
    send_to,
    spawn_child,
    stop_child,
)
from tests.persistence.conftest import wait_for

START = 1_700_000_000_000


@pytest.fixture
def clock() -> SimulatedClock:
    return SimulatedClock(start=START)


registry = create_machine(
    {
        "id": "registry",
        "initial": "open",
        "context": {"heard": []},
        "states": {
            "open": {"on": {"REGISTER": {"actions": "hear"}, "CLOSE": "closed"}},
            "closed": {"type": "final"},
        },
        "output": lambda ctx, ev: {"heard": ctx["heard"]},
    },
    actions={"hear": assign({"heard": lambda ctx, ev: [*ctx["heard"], ev["who"]]})},
)

# the grandchild: it addresses its parent's sibling by systemId, which is not its child
leaf = create_machine(
    {
        "id": "leaf",
        "initial": "working",
        "states": {
            "working": {
                "entry": send_to("registry", {"type": "REGISTER", "who": "leaf-entry"}),
                "on": {
                    "REPORT": {
                        "actions": send_to("registry", {"type": "REGISTER", "who": "leaf-report"})
                    },
                    "LATE": {
                        "actions": [
                            send_to("registry", {"type": "REGISTER", "who": "late"}),
                            send_to("nobody", {"type": "REGISTER", "who": "late"}),
                        ]
                    },
                    "STOP": "stopped",
                },
            },
            "stopped": {"type": "final"},
        },
    }
)

middle = create_machine(
    {
        "id": "middle",
        "initial": "waiting",
        "states": {
            "waiting": {
                "invoke": {"id": "leaf", "src": "leaf", "onDone": "finished"},
                "on": {"RELAY": {"actions": send_to("leaf", lambda ctx, ev: {"type": ev["what"]})}},
            },
            "finished": {"type": "final"},
        },
    },
    actors={"leaf": leaf},
)


def _relay(what: str) -> Any:
    return {"actions": send_to("middle", {"type": "RELAY", "what": what})}


tree_root = create_machine(
    {
        "id": "tree_root",
        "type": "parallel",
        "context": {"heard": None},
        "states": {
            "reg": {
                "initial": "open",
                "states": {
                    "open": {
                        "invoke": {
                            "id": "registry",
                            "src": "registry",
                            "systemId": "registry",
                            "onDone": {"target": "closed", "actions": "keep_heard"},
                        },
                        "after": {200: {"actions": send_to("registry", {"type": "CLOSE"})}},
                    },
                    "closed": {"type": "final"},
                },
            },
            "work": {
                "initial": "busy",
                "states": {
                    "busy": {
                        "invoke": {"id": "middle", "src": "middle", "onDone": "finished"},
                        # REPORT while the registry is open, LATE once it has ended
                        "after": {100: _relay("REPORT"), 300: _relay("LATE"), 400: _relay("STOP")},
                    },
                    "finished": {"type": "final"},
                },
            },
        },
        "output": lambda ctx, ev: {"heard": ctx["heard"]},
    },
    actors={"registry": registry, "middle": middle},
    actions={"keep_heard": assign({"heard": lambda ctx, ev: ev["output"]["heard"]})},
)

HEARD = {"heard": ["leaf-entry", "leaf-report"]}
"""What the registry heard from the grandchild, in every runtime: its entry's event (sent in
the step that created the tree) and its REPORT; LATE came after the registry ended."""


def _durable_to_the_end(runtime: Runtime, clock: SimulatedClock, run_id: str) -> None:
    worker = Worker(runtime)
    for _ in range(8):
        worker.run_until_idle()
        clock.advance(100)
    worker.run_until_idle()
    assert runtime.get(run_id).status == "done"


def _descendant(runtime: Runtime, run_id: str, *path: str) -> Any:
    """The child run reached from `run_id` through the invoke ids `path`."""
    row = runtime.get(run_id)
    for invoke in path:
        (row,) = [c for c in runtime.children(row.id) if c.workflow_name == invoke]
    return row


def test_a_grandchild_reaches_a_system_id_outside_its_branch_in_every_runtime(
    store: Store, clock: SimulatedClock
) -> None:
    memory_clock = SimulatedClock(start=START)
    memory = create_actor(tree_root, clock=memory_clock).start()
    memory_clock.advance(500)
    assert memory.get_snapshot().status == "done"
    assert memory.get_snapshot().output == HEARD
    local = LocalRunner({"tree_root": tree_root}, SimulatedClock(start=START))
    assert local.run("tree_root", {}, key="tree").snapshot.output == HEARD

    runtime = Runtime(store, [tree_root], clock=clock)
    run_id = runtime.start("tree_root", key="tree")
    _durable_to_the_end(runtime, clock, run_id)
    assert runtime.get(run_id).snapshot["output"] == HEARD
    reg = _descendant(runtime, run_id, "registry")
    assert (reg.key, reg.status) == ("registry", "done")  # a systemId names its child run
    applied = [e.event for e in store.list_events(reg.id)]
    assert [e["who"] for e in applied if e["type"] == "REGISTER"] == ["leaf-entry", "leaf-report"]
    # LATE: the registry had ended, "nobody" never existed: logged and dead-lettered with
    # the sender, as a send to an unknown child is
    grandchild = _descendant(runtime, run_id, "middle", "leaf")
    letters = sorted(runtime.dead_letters(grandchild.id), key=lambda d: d.reason)
    assert [(d.event["who"], d.reason) for d in letters] == [
        (
            "late",
            "not delivered: no active child run 'nobody' (its own by invoke id, or by "
            "systemId in its run tree)",
        ),
        (
            "late",
            "not delivered: no active child run 'registry' (its own by invoke id, or by "
            "systemId in its run tree)",
        ),
    ]
    assert runtime.dead_letters(reg.id) == []


def test_a_system_id_is_delivered_with_the_sending_step(
    store: Store, clock: SimulatedClock
) -> None:
    runtime = Runtime(store, [tree_root], clock=clock)
    run_id = runtime.start("tree_root")
    grandchild = _descendant(runtime, run_id, "middle", "leaf")
    reg = _descendant(runtime, run_id, "registry")
    # the grandchild's first step was committed with the tree: its event is queued already
    assert [e.event for e in store.pending_events(reg.id)] == [
        {"type": "REGISTER", "who": "leaf-entry"}
    ]
    only_leaves = Runtime(store, [leaf], clock=clock)  # steps the grandchild alone
    runtime.send(grandchild.id, "REPORT")
    Worker(only_leaves).run_until_idle()
    assert runtime.get(grandchild.id).version == 2
    assert [e.event["who"] for e in store.pending_events(reg.id)] == ["leaf-entry", "leaf-report"]


# -- one name, one actor ----------------------------------------------------------------------

rival = create_machine(
    {
        "id": "rival",
        "initial": "running",
        "states": {
            "running": {
                "invoke": {"id": "second_registry", "src": "registry", "systemId": "registry"}
            }
        },
    },
    actors={"registry": registry},
)

duplicate_root = create_machine(
    {
        "id": "duplicate_root",
        "initial": "running",
        "context": {"problem": None},
        "states": {
            "running": {
                "invoke": [
                    {"id": "registry", "src": "registry", "systemId": "registry"},
                    {
                        "id": "rival",
                        "src": "rival",
                        "onError": {"target": "refused", "actions": "keep_problem"},
                    },
                ]
            },
            "refused": {},
        },
    },
    actors={"registry": registry, "rival": rival},
    actions={"keep_problem": assign({"problem": lambda ctx, ev: ev["error"]["message"]})},
)


def test_a_tree_whose_first_step_registers_a_system_id_twice_is_refused(
    store: Store, clock: SimulatedClock
) -> None:
    # in memory the rival fails while starting and its parent takes the error (XState)
    memory = create_actor(duplicate_root, clock=clock).start()
    assert memory.get_snapshot().value == "refused"
    assert memory.get_snapshot().context["problem"] == (
        "actor 'registry': SystemIdTakenError: systemId 'registry' is already registered in "
        "this actor tree by actor 'registry'; actor 'second_registry' cannot register it too"
    )
    # durably the whole first step of the tree is one transaction: the start is refused,
    # naming the run that holds the name and the child that asked for it; nothing is stored
    runtime = Runtime(store, [duplicate_root], clock=clock)
    with pytest.raises(
        SystemIdTakenError,
        match=r"systemId 'registry' is already registered "
        r"in this actor tree by child run \S+ \(registry, child 'registry' of "
        r"run \S+\); child 'second_registry' \(registry\) of run \S+ cannot "
        "register it too",
    ):
        runtime.start("duplicate_root", key="dup")
    assert runtime.list() == []


spawner = create_machine(
    {
        "id": "svc_spawner",
        "initial": "running",
        "states": {
            "running": {
                "on": {
                    "SPAWN": {"actions": spawn_child("registry", id="a", system_id="svc")},
                    "SWAP": {
                        "actions": [
                            stop_child("a"),
                            spawn_child("registry", id="b", system_id="svc"),
                        ]
                    },
                    "TELL": {"actions": send_to("svc", {"type": "REGISTER", "who": "root"})},
                }
            }
        },
    },
    actors={"registry": registry},
)


def test_a_step_that_registers_a_held_system_id_fails_its_run_naming_both(
    store: Store, clock: SimulatedClock
) -> None:
    memory = create_actor(spawner, clock=clock).start()
    for event in ("SPAWN", "SWAP", "TELL"):  # a stopped child's name is free again
        memory.send({"type": event})
    with pytest.raises(
        ImplementationError,
        match="systemId 'svc' is already registered in "
        "this actor tree by actor 'b'; actor 'a' cannot register it too",
    ):
        memory.send({"type": "SPAWN"})
    assert memory.get_snapshot().status == "error"

    runtime = Runtime(store, [spawner], clock=clock)
    run_id = runtime.start("svc_spawner")
    worker = Worker(runtime)
    for event in ("SPAWN", "SWAP", "TELL"):
        runtime.send(run_id, event)
        worker.run_until_idle()
    children = {c.parent_invoke_id: c for c in runtime.children(run_id)}
    b = children["b"]
    assert (b.key, b.status, b.snapshot["context"]["heard"]) == ("svc", "active", ["root"])
    assert [c.status for c in runtime.children(run_id) if c.id != b.id] == ["cancelled"]
    runtime.send(run_id, "SPAWN")
    worker.run_until_idle()
    failed = runtime.get(run_id)
    assert failed.status == "error"
    assert (
        f"systemId 'svc' is already registered in this actor tree by child run {b.id} "
        f"(registry, child 'b' of run {run_id}); child 'a' (registry) of run {run_id} "
        "cannot register it too"
    ) in (failed.last_error or "")
    assert {c.status for c in runtime.children(run_id)} == {"cancelled"}  # none started


pair = create_machine(
    {
        "id": "pair",
        "initial": "running",
        "states": {
            "running": {
                "invoke": [
                    {"id": "left", "src": "svc_spawner"},
                    {"id": "right", "src": "svc_spawner"},
                ]
            }
        },
    },
    actors={"svc_spawner": spawner},
)


def test_postgres_lets_one_of_two_concurrent_steps_take_a_system_id(
    pg_dsn: str, pg_schema: str, clock: SimulatedClock
) -> None:
    """Two workers step two runs of one tree at once, each registering `svc`: each check
    would miss the other's uncommitted row; the tree's lock makes the second wait, see the
    first's child and fail, so the tree never holds the name twice."""
    import threading

    import psycopg

    from persistence.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn, schema=pg_schema, max_size=4)
    try:
        store.migrate()
        # the events queue for the workers (a send would take the step, and wait, itself)
        runtime = Runtime(store, [pair], clock=clock, step_in_send=False)
        run_id = runtime.start("pair")
        sides = {c.parent_invoke_id: c for c in runtime.children(run_id)}
        with psycopg.connect(pg_dsn) as holder:  # holds the tree's lock, as a registration does
            holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 18))", (run_id,))
            for side in sides.values():
                runtime.send(side.id, "SPAWN")
            workers = [
                threading.Thread(target=Worker(runtime, batch=1).run_until_idle) for _ in sides
            ]
            for thread in workers:
                thread.start()
            wait_for(
                lambda: all(store.get_run(s.id).lease_owner is not None for s in sides.values())
            )
            threading.Event().wait(0.5)  # both claimed: neither step may commit meanwhile
            assert all(store.get_run(s.id).version == s.version for s in sides.values())
            holder.commit()  # both steps were waiting for the tree: now one at a time
        for thread in workers:
            thread.join(timeout=60)
        after = [store.get_run(s.id) for s in sides.values()]
        failed = [r for r in after if r.status == "error"]
        assert len(failed) == 1  # the other took the name (then was cancelled with `pair`,
        # which does not handle its child's error)
        assert "systemId 'svc' is already registered in this actor tree" in (
            failed[0].last_error or ""
        )
        (registered,) = store.list_runs(workflow_name="registry")  # one child run, ever
        assert registered.key == "svc" and registered.parent_run_id != failed[0].id
    finally:
        store.close()
