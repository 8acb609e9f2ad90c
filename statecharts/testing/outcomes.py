"""Invoked work as part of a test's alphabet: what a running call can do next.

A workflow is a chain of invoked calls; a test that only sends the events named in ``on``
never gets past the first one. Here the harness plays the outside world: for every call
running in a snapshot (``snapshot.children``) it may *complete* it (``xstate.done.actor.<id>``
with an output) or *fail* it (``xstate.error.actor.<id>`` with an error of each declared name),
and pending timers (``after``, retry waits) fire on a simulated clock. Retry exhaustion is
then just a story: fail, wait, fail again, until the policy gives up.

Outputs are given per actor name (the invoke's ``src``): ``outputs={"fetchCustomer":
[{"name": "Ada"}]}`` (lists of examples for exploration; strategies or lists for the
Hypothesis tools). A call with none gets ``DEFAULT_OUTPUT`` (``None``, what a function that
returns nothing gives) and the tool warns once, naming the invoke: a story built on a
placeholder may be cut short by a guard that needed a real value. An empty list says the call
never completes, it only fails (a step whose job is to fail the run).

The error names of a call: ``"Error"`` (any failure), then the names its retry policy declares
(``non_retryable``, ``retry_on``), its ``transient`` list, and those given in
``errors={"src": [...]}``. The error JSON is what a runtime records for an exception of that
class (``retry.error_json``), so a story replays the same on the in-memory and durable runtimes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..events import done_actor_event_type, error_actor_event_type
from ..frozen import FrozenDict, freeze
from ..machine import Machine
from ..nodes import InvokeDef
from ..retry_policy import error_json
from ..snapshot import Snapshot

DEFAULT_OUTPUT: Any = None
"""The output of a call whose actor name has no outputs given."""
GENERIC_ERROR = "Error"
"""The name of the failure every call can have (a plain ``Exception`` subclass)."""
ON_CUTOFF = ("warn", "error", "ignore")


class ExplorationWarning(UserWarning):
    """Exploration was cut off (a bound was hit, or a call had no outputs given)."""


class ExplorationCutOff(AssertionError):
    """Exploration was cut off and the caller asked for that to fail (``on_cutoff="error"``)."""


@dataclass(frozen=True)
class Call:
    """An invoked call running in a snapshot."""

    id: str
    src: str
    invoked_by: str | None
    invoke: InvokeDef | None = field(default=None, repr=False)

    def describe(self) -> str:
        """``invoke 'fetch_customer' (src 'fetchCustomer') in state 'invoice.fetching'``."""
        where = f" in state {self.invoked_by!r}" if self.invoked_by else ""
        return f"invoke {self.id!r} (src {self.src!r}){where}"


def invoke_defs(machine: Machine) -> dict[str, InvokeDef]:
    """Every invoke of the machine by its actor id."""
    return {i.id: i for n in machine.definition.nodes for i in n.invoke}


def running_calls(machine: Machine, snapshot: Snapshot) -> list[Call]:
    """The calls running in ``snapshot``, in the order they were started."""
    if snapshot.status != "active":
        return []
    defs = invoke_defs(machine)
    return [
        Call(ref.id, ref.src, ref.invoked_by, defs.get(ref.id))
        for ref in snapshot.children.values()
    ]


def error_names(
    machine: Machine, call: Call, errors: Mapping[str, Sequence[str]] | None = None
) -> tuple[str, ...]:
    """The failures a call can have (see module docs), in that order, without repeats."""
    names = [GENERIC_ERROR]
    invoke = call.invoke
    if invoke is not None:
        policy = invoke.retry
        if policy is not None:
            names += [*policy.non_retryable, *policy.retry_on]
        transient = getattr(invoke, "transient", None)
        if isinstance(transient, list | tuple):
            names += [str(n) for n in transient]
    names += list((errors or {}).get(call.src, ()))
    return tuple(dict.fromkeys(names))


def is_transient(call: Call, name: str) -> bool:
    """Whether the durable runtime rolls a failure ``name`` of ``call`` back and runs the call
    again (``"transient"`` on the invoke): not an outcome a durable run ever sees."""
    transient = getattr(call.invoke, "transient", None) if call.invoke is not None else None
    return transient is True or (isinstance(transient, list | tuple) and name in transient)


def error_exception(name: str) -> Exception:
    """An exception of class ``name`` (for scripted actors on a real runtime)."""
    kind: type[Exception] = type(name, (Exception,), {})
    return kind(f"{name} (simulated by the test kit)")


def error_event(call_id: str, name: str) -> FrozenDict:
    """``xstate.error.actor.<id>`` carrying the error JSON of an exception named ``name``."""
    return FrozenDict(
        type=error_actor_event_type(call_id),
        error=freeze(error_json(error_exception(name)), "error"),
    )


def done_event(call_id: str, output: Any) -> FrozenDict:
    """``xstate.done.actor.<id>`` with ``output``."""
    return FrozenDict(type=done_actor_event_type(call_id), output=freeze(output, "output"))


def outcome_call(event: Mapping[str, Any]) -> str | None:
    """The call id an outcome event is for (None for other events)."""
    kind = str(event["type"])
    for prefix in ("xstate.done.actor.", "xstate.error.actor."):
        if kind.startswith(prefix):
            return kind[len(prefix) :]
    return None


def is_possible(machine: Machine, snapshot: Snapshot, event: Mapping[str, Any]) -> bool:
    """False for an outcome event of a call that is not running (a story a runtime cannot
    produce: replaying a shortened story must skip those)."""
    call = outcome_call(event)
    return call is None or (snapshot.status == "active" and call in snapshot.children)


def outputs_for(call: Call, outputs: Mapping[str, Sequence[Any]] | None) -> list[Any]:
    """The example outputs of ``call`` (``[DEFAULT_OUTPUT]`` when none are given; none at
    all when an empty list is: the call only fails)."""
    given = (outputs or {}).get(call.src)
    return [DEFAULT_OUTPUT] if given is None else list(given)


def check_outputs(
    machine: Machine, outputs: Mapping[str, Any] | None, errors: Mapping[str, Any] | None = None
) -> None:
    """Reject outputs/errors for actor names the machine never invokes (a typo would
    otherwise silently fall back to the placeholder)."""
    known = {i.src for i in invoke_defs(machine).values()}
    for what, given in (("outputs", outputs), ("errors", errors)):
        unknown = sorted(set(given or {}) - known)
        if unknown:
            raise ValueError(
                f"{what} for {unknown}, but machine {machine.id!r} invokes "
                f"{sorted(known) or 'nothing'}"
            )


@dataclass
class CutOffs:
    """Where a tool stopped short, reported once at the end (warning or failure)."""

    tool: str
    policy: str = "warn"
    notes: dict[str, None] | None = None

    def __post_init__(self) -> None:
        if self.policy not in ON_CUTOFF:
            raise ValueError(f"on_cutoff={self.policy!r}: one of {', '.join(ON_CUTOFF)}")
        self.notes = {}
        self.reported: set[str] = set()

    def add(self, note: str) -> None:
        """Record one place where the tool was cut off."""
        assert self.notes is not None
        self.notes.setdefault(note, None)

    def placeholder(self, call: Call) -> None:
        """Record that ``call`` completed with the placeholder output."""
        self.add(
            f"{call.describe()} has no outputs given; it completed with "
            f"{DEFAULT_OUTPUT!r} (give outputs={{{call.src!r}: [...]}})"
        )

    def report(self) -> None:
        """Warn (or raise ``ExplorationCutOff``) listing the cut-offs not reported yet."""
        shown = [n for n in self.notes or {} if n not in self.reported]
        if not shown or self.policy == "ignore":
            return
        self.reported.update(shown)
        lines = shown[:10] + ([f"... and {len(shown) - 10} more"] if len(shown) > 10 else [])
        message = f"{self.tool} was cut off:\n  " + "\n  ".join(lines)
        if self.policy == "error":
            raise ExplorationCutOff(message)
        warnings.warn(message, ExplorationWarning, stacklevel=3)


__all__ = [
    "DEFAULT_OUTPUT",
    "GENERIC_ERROR",
    "Call",
    "CutOffs",
    "ExplorationCutOff",
    "ExplorationWarning",
    "check_outputs",
    "done_event",
    "error_event",
    "error_exception",
    "error_names",
    "invoke_defs",
    "is_possible",
    "is_transient",
    "outcome_call",
    "outputs_for",
    "running_calls",
]
