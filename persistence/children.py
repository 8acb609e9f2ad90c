"""Child runs: a durable run's child machines run as durable runs of their own.

When a step of a run invokes (or spawns) a child *machine*, the child is not an outbox effect
executed after the commit: it is a run, created in the step's own transaction (its own row,
`parent_run_id` and `parent_invoke_id` set, key `<parent key or id>/<invoke id>` unless the
invoke names a `systemId`), and stepped by any worker like any run. What a step does to its
child runs is decided here, from the effects the pure engine returned, in their order:

- `StartChild` of a machine: a child run to create (`Runtime.child_runs` builds the rows);
- `StopChild` of a child run: its active run is cancelled, recursively (and detached, so a
  late result never reaches an invoke that replaced it);
- `SendTo` a child and `SendParent`: the event is queued in the other run's inbox, with the
  step; an event for no active child (or a run without a parent) is a dead letter.

The child's end comes back the same way (`child_ended_event`, queued in the parent's inbox with
the child's last step), so a crash at any point delivers it exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from persistence.outbox import actor_logic, starts_child_run
from persistence.stores import Delivery
from persistence.stores.records import ACTIVE
from persistence.stores.rules import child_ended_event
from statecharts import Machine, Snapshot
from statecharts.effects import Effect, SendParent, SendTo, StartChild, StopChild
from statecharts.events import snapshot_actor_event_type
from statecharts.frozen import thaw


class Starter(Protocol):
    """What `detached_start` needs of a runtime (`persistence.Runtime` is one): `start`."""

    def start(self, name: str, input: Any = None, key: str | None = None) -> str:
        """Start a run of workflow `name` with `input` under `key`; its id."""
        ...


def nested_machines(machines: Iterable[Machine]) -> list[Machine]:
    """The child machines `machines` can invoke or spawn, at any depth (not `machines`
    themselves), each once: a runtime steps their child runs."""
    given = list(machines)
    seen = {id(m) for m in given}
    found: list[Machine] = []
    todo = list(given)
    while todo:
        machine = todo.pop()
        candidates = list(machine.implementations.actors.values())
        for node in machine.definition.by_id.values():
            candidates += [invoke.logic for invoke in node.invoke if invoke.logic is not None]
        for logic in candidates:
            if isinstance(logic, Machine) and id(logic) not in seen:
                seen.add(id(logic))
                found.append(logic)
                todo.append(logic)
    return found


def snapshot_invokes(machine: Machine) -> list[str]:
    """The config paths of `machine`'s invokes of a child machine that have `onSnapshot`:
    a child run does not report its snapshots to its parent (each child step would cost its
    parent a step; the parent reads the child's row instead), so a runtime refuses them."""
    found = []
    for node in machine.definition.by_id.values():
        handled = {t.event for t in node.transitions}
        for invoke in node.invoke:
            logic = invoke.logic or machine.implementations.actors.get(invoke.src)
            if isinstance(logic, Machine) and snapshot_actor_event_type(invoke.id) in handled:
                found.append(f"{machine.id}: {invoke.config_path}.onSnapshot")
    return found


def child_key(parent_id: str, parent_key: str | None, start: StartChild) -> str:
    """The key of the child run `start` creates: the invoke's `systemId` when it names one,
    else `<parent key or id>/<invoke id>`, and `#<attempt>` from a retried call's second
    attempt on (each attempt is a run of its own)."""
    if start.system_id:
        return start.system_id
    base = f"{parent_key or parent_id}/{start.id}"
    return base if start.attempt <= 1 else f"{base}#{start.attempt}"


def child_run_ids(machine: Machine, snapshot: Snapshot) -> set[str]:
    """The ids of `snapshot`'s children that are child runs (machines)."""
    found = set()
    for ref in snapshot.children.values():
        payload = {"invoked_by": ref.invoked_by, "id": ref.id, "src": ref.src}
        try:
            logic = actor_logic(machine, payload)[0]
        except Exception:  # a src the definition no longer knows: not a child run here
            continue
        if isinstance(logic, Machine):
            found.add(ref.id)
    return found


@dataclass(slots=True)
class ChildWork:
    """What one step does to related runs: the child runs it starts and stops, the events
    it sends them (or its parent), in the order the store applies them."""

    starts: list[StartChild] = field(default_factory=list)
    stops: list[str] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.starts or self.stops or self.deliveries)


def child_work(
    parent_run_id: str | None, effects: Sequence[Effect], existing: set[str], status: str
) -> ChildWork:
    """The child-run work of a step whose engine effects were `effects`, of a run whose parent
    is `parent_run_id`; `existing` are the child runs it had before the step, `status` the
    run's status after it (a run that ends stops every child run it has, whatever the engine
    said, e.g. when an action raised)."""
    work = ChildWork()
    for effect in effects:
        if starts_child_run(effect):
            assert isinstance(effect, StartChild)
            work.starts.append(effect)
        elif isinstance(effect, StopChild):
            started = next((s for s in work.starts if s.id == effect.id), None)
            if started is not None:  # started and stopped within this step: never started
                work.starts.remove(started)
            elif effect.id in existing and effect.id not in work.stops:
                work.stops.append(effect.id)
        elif isinstance(effect, SendTo):
            work.deliveries.append(Delivery(thaw(effect.event), child=effect.target))
        elif isinstance(effect, SendParent):
            work.deliveries.append(Delivery(thaw(effect.event), parent=parent_run_id))
    if status != ACTIVE:
        work.starts = []
        work.stops += sorted(existing - set(work.stops))
    return work


def ended_delivery(
    parent_run_id: str | None,
    invoke_id: str | None,
    status: str,
    snapshot: Snapshot,
    failure: str | None,
) -> Delivery | None:
    """The event that reports the end of a child run (in `status`) to its parent
    `parent_run_id`, queued with its last step; None for a top-level run or one that goes
    on."""
    if status == ACTIVE or parent_run_id is None or invoke_id is None:
        return None
    error = thaw(snapshot.error) if snapshot.status == "error" else None
    event = child_ended_event(invoke_id, status, thaw(snapshot.output), error, failure)
    return Delivery(event, parent=parent_run_id, completes=True)


def detached_start(
    runtime: Starter,
    workflow: str,
    input: Callable[[Mapping[str, Any], Mapping[str, Any]], Any] | None = None,
) -> Callable[..., str]:
    """A user action that starts a *detached* run of `workflow`: no child of the run that
    executes it (nothing waits for it, it outlives its starter, n8n's Execute Workflow with
    "wait for sub-workflow completion" off). Its input is `input(context, event)` (default: the
    context). It starts once per action effect however often a crash makes the action run
    again: the run's key is `detached:<the action's idempotency key>`. Returns the run's id.

        actions={"start_report": detached_start(runtime, "report")}
    """

    def start_detached(
        context: Mapping[str, Any], event: Mapping[str, Any], *, idempotency_key: str, **params: Any
    ) -> str:
        value = thaw(context) if input is None else input(context, event)
        return runtime.start(workflow, value, key=f"detached:{idempotency_key}")

    start_detached.__name__ = f"start_{workflow}"
    return start_detached
