"""A rule-based test harness (``hypothesis.stateful``) that drives a user's machine with
random events, invoke outcomes and timer firings, and checks invariants after every macrostep.

The harness plays the outside world: it sends the events the machine names in ``on``,
completes or fails each running call (``outputs=`` per actor name: a strategy or a list of
examples; ``errors=`` adds error names; see ``outcomes``) and fires pending timers on a
simulated clock (``after``, retry waits). The events it chose, timers included, are the run's
complete story: ``replay`` plays it again on the pure core.

Invariants are declared per state, either in the config::

    "paying": {"meta": {"invariants": ["credit_not_negative"]}, ...}

with the named checks passed as ``checks={"credit_not_negative": lambda ctx: ...}``, or by
state path::

    invariants={"paying": lambda ctx: ctx["credit"] >= 0, "": always_checked}

A check takes the context and returns a bool; it applies while its state is active (the key
``""`` applies always). When one fails, the error,
``InvariantViolation``, shows a minimal event list (the failing run replayed on the pure core
with every removable run of events removed) and carries it as ``events``.

    TestTurnstile = machine_test(turnstile, invariants=...).TestCase   # a pytest test
    run_machine_test(turnstile, invariants=...)                         # or run it now
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StatechartError
from ..frozen import FrozenDict, thaw
from ..machine import Machine
from ..nodes import HISTORY
from ..snapshot import Snapshot
from .coverage import CoverageRecorder, state_name
from .graph import event_alphabet
from .hypothesis_api import (
    HealthCheck,
    Phase,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
    settings,
    st,
)
from .outcomes import Call, CutOffs, check_outputs, is_possible, running_calls
from .strategies import OutputStrategies, event_strategy, outcome_strategy

Check = Callable[[Any], bool]


class InvariantViolation(AssertionError):
    """An invariant failed (or the machine raised) after ``events`` from the initial state."""

    def __init__(self, message: str, events: Sequence[Mapping[str, Any]]) -> None:
        self.events = [thaw(e) for e in events]
        shown = " -> ".join(_describe(e) for e in self.events) or "(no events)"
        super().__init__(f"{message}\n  events: {shown}")

    @property
    def event_types(self) -> list[str]:
        """The counterexample's event types."""
        return [e["type"] for e in self.events]


def _describe(event: Mapping[str, Any]) -> str:
    payload = {k: v for k, v in event.items() if k not in ("type", "timer")}
    text = str(event["type"]) + (f" {payload}" if payload else "")
    return f"(timer) {text}" if "timer" in event else text


@dataclass(frozen=True)
class _Invariant:
    state: str  # "" for always
    name: str
    check: Check


def collect_invariants(
    machine: Machine,
    invariants: Mapping[str, Check | Sequence[Check]] | None = None,
    checks: Mapping[str, Check] | None = None,
) -> list[_Invariant]:
    """The invariants of ``machine``: from ``invariants`` (state path -> check(s)) and from
    each state's ``meta["invariants"]`` (names looked up in ``checks``). Unknown state paths
    and names raise ``ValueError`` naming them."""
    found: list[_Invariant] = []
    paths = {
        state_name(n): n
        for n in machine.definition.nodes
        if n.parent is not None and n.type != HISTORY
    }
    for path, value in (invariants or {}).items():
        if path and path not in paths:
            raise ValueError(
                f"invariants[{path!r}]: machine {machine.id!r} has no state "
                f"{path!r} (states: {', '.join(paths)})"
            )
        for fn in value if isinstance(value, Sequence) else [value]:
            if not callable(fn):
                raise ValueError(f"invariants[{path!r}]: a check is a callable(context)")
            found.append(_Invariant(path, getattr(fn, "__name__", "invariant"), fn))
    for path, node in paths.items():
        meta = node.meta or {}
        names = meta.get("invariants", []) if isinstance(meta, Mapping) else []
        for name in names if isinstance(names, list | tuple) else [names]:
            if name not in (checks or {}):
                raise ValueError(
                    f"{node.config_path}.meta.invariants: no check named {name!r} in checks="
                )
            found.append(_Invariant(path, str(name), (checks or {})[name]))
    return found


def machine_test(
    machine: Machine,
    *,
    invariants: Mapping[str, Check | Sequence[Check]] | None = None,
    checks: Mapping[str, Check] | None = None,
    payloads: Mapping[str, st.SearchStrategy[Mapping[str, Any]]] | None = None,
    input: Any = None,
    fire_timers: bool = True,
    max_steps: int = 50,
    max_examples: int = 200,
    outputs: OutputStrategies | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
    recorder: CoverageRecorder | None = None,
) -> type[RuleBasedStateMachine]:
    """A ``RuleBasedStateMachine`` class driving ``machine`` (see module docs); its
    ``TestCase`` attribute is a unittest/pytest test. ``recorder`` collects coverage."""
    declared = collect_invariants(machine, invariants, checks)
    check_outputs(machine, outputs, errors)
    alphabet = event_alphabet(machine)
    cutoffs = CutOffs(f"machine_test of {machine.id!r}")

    class MachineTest(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.events: list[FrozenDict] = []
            self.now = 0
            trace: list[Any] = []
            self.snapshot = self._guard(lambda: machine.start(input, lambda: self.now, trace)[0])
            self._record(None, self.snapshot, trace)

        def _guard(self, step: Callable[[], Snapshot]) -> Snapshot:
            try:
                return step()
            except StatechartError as exc:
                raise InvariantViolation(
                    f"machine {machine.id!r} raised {exc!r}", self.events
                ) from exc

        def _record(self, before: Snapshot | None, snapshot: Snapshot, trace: list[Any]) -> None:
            if recorder is not None:
                recorder.macrostep(before, trace, snapshot)

        def _deliver(self, event: FrozenDict) -> None:
            self.events.append(event)
            trace: list[Any] = []
            before = self.snapshot
            self.snapshot = self._guard(
                lambda: machine.step(before, event, lambda: self.now, trace)[0]
            )
            self._record(before, self.snapshot, trace)

        if alphabet:

            @precondition(lambda self: self.snapshot.status == "active")
            @rule(event=event_strategy(machine, payloads))
            def send(self, event: FrozenDict) -> None:
                self._deliver(event)

        @precondition(lambda self: bool(running_calls(machine, self.snapshot)))
        @rule(data=st.data())
        def finish_call(self, data: st.DataObject) -> None:
            calls = running_calls(machine, self.snapshot)
            call: Call = data.draw(st.sampled_from(calls), label="call")
            if call.src not in (outputs or {}):
                cutoffs.placeholder(call)
            self._deliver(
                data.draw(outcome_strategy(machine, call, outputs, errors), label="outcome")
            )

        @precondition(
            lambda self: (
                fire_timers and self.snapshot.status == "active" and bool(self.snapshot.timers)
            )
        )
        @rule()
        def fire_next_timer(self) -> None:
            timer = self.snapshot.timers[0]
            self.now = max(self.now, timer.due_at)
            self.events.append(FrozenDict({**timer.event, "timer": timer.id}))
            trace: list[Any] = []
            before = self.snapshot
            self.snapshot = self._guard(
                lambda: machine.deliver_timer(before, timer.id, lambda: self.now, trace)[0]
            )
            self._record(before, self.snapshot, trace)

        @precondition(lambda self: self.snapshot.status != "active")
        @rule()
        def run_ended(self) -> None:
            """Nothing can happen once the run ended (a rule, so the story may stop here)."""

        @invariant()
        def declared_invariants_hold(self) -> None:
            failed = _failing(self.snapshot, declared)
            if failed is not None:
                events = minimize(machine, self.events, declared, input)
                final = replay(machine, events, input)
                assert final is not None
                raise InvariantViolation(_message(failed, final), events)

        def teardown(self) -> None:
            cutoffs.report()

    MachineTest.__name__ = MachineTest.__qualname__ = f"MachineTest_{machine.id}"
    MachineTest.TestCase.settings = _settings(max_examples, max_steps)
    return MachineTest


def _failing(snapshot: Snapshot, declared: Sequence[_Invariant]) -> _Invariant | None:
    for item in declared:
        if item.state and not snapshot.matches(item.state):
            continue
        if not item.check(snapshot.context):
            return item
    return None


def _message(item: _Invariant, snapshot: Snapshot) -> str:
    where = f"in state {item.state!r}" if item.state else "always"
    return (
        f"invariant {item.name!r} ({where}) failed: value {thaw(snapshot.value)!r}, "
        f"context {thaw(snapshot.context)!r}"
    )


def replay(
    machine: Machine, events: Sequence[Mapping[str, Any]], input: Any = None
) -> Snapshot | None:
    """The snapshot after the story ``events`` (timer firings marked with a ``timer`` key),
    or None when the story cannot happen: a marked timer is not the next one due at that
    point, or an invoke outcome is for a call that is not running."""
    now = 0
    snapshot, _ = machine.initial_transition(input, now)
    for item in events:
        if "timer" in item:
            if not snapshot.timers or snapshot.timers[0].id != item["timer"]:
                return None
            now = max(now, snapshot.timers[0].due_at)
            snapshot, _ = machine.fire_timer(snapshot, item["timer"], now)
        elif not is_possible(machine, snapshot, item):
            return None
        elif snapshot.status == "active":
            snapshot, _ = machine.transition(snapshot, item, now)
    return snapshot


def minimize(
    machine: Machine,
    events: Sequence[FrozenDict],
    declared: Sequence[_Invariant],
    input: Any = None,
) -> list[FrozenDict]:
    """A sub-list of ``events`` after which the same invariant still fails and from which no
    contiguous run of events can be dropped (found by replaying the pure core; this takes the
    place of Hypothesis's shrink phase, which the harness turns off)."""
    current = list(events)
    final = replay(machine, current, input)
    target = _failing(final, declared) if final is not None else None
    if target is None:
        return current

    def still_fails(candidate: list[FrozenDict]) -> bool:
        try:
            snapshot = replay(machine, candidate, input)
        except StatechartError:
            return False
        return snapshot is not None and _failing(snapshot, declared) == target

    chunk = max(1, len(current) // 2)
    while chunk >= 1:  # cheap first pass: drop halves, quarters, ...
        start, shrunk = 0, False
        while start < len(current):
            candidate = current[:start] + current[start + chunk :]
            if still_fails(candidate):
                current, shrunk = candidate, True
            else:
                start += chunk
        if not shrunk:
            chunk //= 2
    # then every contiguous run, longest first (events often only matter together)
    changed = True
    while changed:
        changed = False
        for size in range(len(current), 0, -1):
            for start in range(len(current) - size + 1):
                candidate = current[:start] + current[start + size :]
                if still_fails(candidate):
                    current, changed = candidate, True
                    break
            if changed:
                break
    return current


def stateful_settings(max_examples: int, max_steps: int, *, shrink: bool) -> settings:
    """The kit's Hypothesis settings for a stateful run of a machine: repeatable (derandomized,
    no example database), no deadline; `shrink` adds Hypothesis's shrink phase."""
    phases = [Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if shrink else [])]
    return settings(
        max_examples=max_examples,
        stateful_step_count=max_steps,
        deadline=None,
        derandomize=True,
        database=None,
        phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def _settings(max_examples: int, max_steps: int) -> settings:
    # no shrink phase: ``minimize`` replays the failing run on the pure core and reports a
    # minimal event list itself, faster than shrinking the whole stateful run
    return stateful_settings(max_examples, max_steps, shrink=False)


def run_machine_test(
    machine: Machine, *, max_examples: int = 200, max_steps: int = 50, **options: Any
) -> None:
    """Run ``machine_test`` now (derandomized, so reproducible); raises the shrunk
    ``InvariantViolation`` when an invariant fails."""
    test_class = machine_test(machine, max_examples=max_examples, max_steps=max_steps, **options)
    run_state_machine_as_test(test_class, settings=_settings(max_examples, max_steps))
