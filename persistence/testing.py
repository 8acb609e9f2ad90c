"""Durable model-based testing: the same story on the pure engine and on the durable runtime.

``assert_durable_matches(machine, input=..., outputs=...)`` is a Hypothesis stateful test.
Each example starts one run on ``persistence.Runtime`` + ``Worker`` over a fresh SQLite file
and, beside it, the pure engine (the model). The test chooses the story: events of the
machine's alphabet, the outcome of each invoked call (done with an output drawn per actor name,
or failed with one of its error names) and timer expiries on a simulated clock, and between
steps it may *crash*: drop the store, runtime and worker and open new ones on the same file,
as a restarted process would. Calls take time: events, timer expiries and crashes come while
calls run (the durable run is not held by them), and each call ends when the story says, in
the order they started (a limited call site's too: limited calls run beside their runs, and
the test's runtime gives their limits no cap). After every step it checks that both agree on

* the state value, the context and the run's status (``done``/``error``/...);
* the calls executed: each call the model saw end ran exactly once on the worker, in order,
  with the same input (and, for retried calls, the same idempotency key); a call whose state
  was left before it ended never ran;
* the user actions executed, by name and in order.

The invoked functions are replaced by scripted ones that return the story's chosen output or
raise an exception of the chosen class, so no real service is called; user actions run as
written. Circuit breakers get a threshold that never opens (the pure engine has none), and an
error workflow the machine names is registered as a stub unless given in ``also=``.

It lives beside the runtime it drives (the engine's test kit, ``statecharts.testing``, never
imports ``persistence``) and needs the ``testing`` extra (Hypothesis):
``from persistence.testing import assert_durable_matches``.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from persistence.breakers import BreakerPolicy
from persistence.columns import run_status
from persistence.runtime import Runtime
from persistence.stores import open_store
from persistence.worker import Worker
from statecharts.actions import BuiltinAction
from statecharts.clock import SimulatedClock
from statecharts.effects import Effect, RunAction, StartChild
from statecharts.frozen import FrozenDict, thaw
from statecharts.idempotency import idempotency_key
from statecharts.logic import from_callable
from statecharts.machine import Machine, create_machine
from statecharts.snapshot import Snapshot
from statecharts.testing.graph import event_alphabet
from statecharts.testing.harness import stateful_settings
from statecharts.testing.hypothesis_api import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
    settings,
    st,
)
from statecharts.testing.outcomes import (
    check_outputs,
    error_exception,
    invoke_defs,
    running_calls,
)
from statecharts.testing.strategies import OutputStrategies, event_strategy, outcome_strategy

START = 1_000_000_000_000
"""The simulated clock's start (epoch ms), the same for the model and the runtime."""


class DurableMismatch(AssertionError):
    """The durable runtime and the pure engine disagreed after ``story``."""

    def __init__(self, message: str, story: Sequence[Mapping[str, Any]]) -> None:
        self.story = [thaw(e) for e in story]
        shown = " -> ".join(_describe(e) for e in self.story) or "(no events)"
        super().__init__(f"{message}\n  story: {shown}")


def _describe(event: Mapping[str, Any]) -> str:
    payload = {k: v for k, v in event.items() if k not in ("type", "timer", "crash")}
    text = str(event["type"]) + (f" {payload}" if payload else "")
    return f"(timer) {text}" if "timer" in event else text


@dataclass
class Script:
    """The outcomes the story chose, per actor name, consumed by the scripted functions; and
    what those functions and the user actions were called with."""

    outcomes: dict[str, deque[FrozenDict]] = field(default_factory=dict)
    calls: list[tuple[str, Any, str]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    def function(self, src: str) -> Callable[..., Any]:
        """The scripted stand-in for actor ``src``."""

        def call(input: Any, idempotency_key: str) -> Any:
            self.calls.append((src, thaw(input), idempotency_key))
            queue = self.outcomes.get(src)
            if not queue:
                raise AssertionError(f"call {src!r} ran but the story chose no outcome for it")
            event = queue.popleft()
            if "error" in event:
                raise error_exception(str(event["error"]["name"]))
            return thaw(event.get("output"))

        call.__name__ = src
        return call

    def action(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` counting its calls under ``name`` (its signature kept, for the worker)."""

        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.actions.append(name)
            return fn(*args, **kwargs)

        return counted


def scripted(machine: Machine, script: Script) -> Machine:
    """``machine`` with every invoked actor scripted and every user action counted."""
    actors = {
        i.src: from_callable(script.function(i.src), i.src) for i in invoke_defs(machine).values()
    }
    actions = {
        name: script.action(name, fn)
        for name, fn in machine.implementations.actions.items()
        if callable(fn) and not isinstance(fn, BuiltinAction)
    }
    return machine.provide(actors=actors, actions=actions)


def _stub_workflows(machine: Machine, also: Sequence[Machine]) -> list[Machine]:
    meta = machine.root.meta
    target = meta.get("error_workflow") if isinstance(meta, Mapping) else None
    if not target or any(m.id == target for m in also):
        return []
    return [
        create_machine(
            {"id": str(target), "initial": "noted", "states": {"noted": {"type": "final"}}}
        )
    ]


class _Durable:
    """One run on a SQLite file, reopened on every crash."""

    def __init__(self, path: Path, machines: list[Machine], clock: SimulatedClock) -> None:
        self.path, self.machines, self.clock = path, machines, clock
        self.run_id = ""
        self._open()

    def _open(self) -> None:
        self.store = open_store(f"sqlite:///{self.path}", migrate=True)
        breakers = {
            i.breaker: BreakerPolicy(failure_threshold=10**9)
            for m in self.machines
            for i in invoke_defs(m).values()
            if i.breaker
        }
        self.runtime = Runtime(self.store, self.machines, clock=self.clock, breakers=breakers)
        self.worker = Worker(self.runtime, lease_ms=60_000, report_every_s=10**9)

    def crash(self) -> None:
        """Forget every object and reopen the file (what a restarted process has)."""
        self.store.close()
        self._open()

    def close(self) -> None:
        self.store.close()


def durable_test(
    machine: Machine,
    *,
    input: Any = None,
    outputs: OutputStrategies | None = None,
    errors: Mapping[str, Sequence[str]] | None = None,
    payloads: Mapping[str, Any] | None = None,
    also: Sequence[Machine] = (),
    fire_timers: bool = True,
    crashes: bool = True,
    max_steps: int = 15,
    max_examples: int = 10,
) -> type[RuleBasedStateMachine]:
    """The ``RuleBasedStateMachine`` behind ``assert_durable_matches`` (its ``TestCase`` is a
    pytest test)."""
    check_outputs(machine, outputs, errors)
    alphabet = event_alphabet(machine)

    class DurableTest(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.folder = Path(tempfile.mkdtemp(prefix="statecharts-durable-"))
            self.script = Script()
            self.clock = SimulatedClock(START)
            self.story: list[FrozenDict] = []
            self.expected_calls: list[StartChild] = []
            self.ended_calls: list[StartChild] = []
            self.expected_actions: list[str] = []
            self.snapshot, effects = machine.initial_transition(input, START)
            self._expect(effects)
            run_machine = scripted(machine, self.script)
            self.durable = _Durable(
                self.folder / "runs.db",
                [run_machine, *also, *_stub_workflows(machine, also)],
                self.clock,
            )
            self.durable.run_id = self.durable.runtime.start(machine.id, input)
            self._sync()

        def _expect(self, effects: Sequence[Effect]) -> None:
            for effect in effects:
                if isinstance(effect, StartChild):
                    self.expected_calls.append(effect)
                elif (
                    isinstance(effect, RunAction) and effect.type in machine.implementations.actions
                ):
                    self.expected_actions.append(effect.type)

        def _at_rest(self) -> bool:
            return not running_calls(machine, self.snapshot)

        def _sync(self) -> None:
            """Let the worker step the run (its calls beside wait for the story) and compare."""
            self.durable.worker.run_until_idle(calls=False)
            self._compare()

        def _fail(self, message: str) -> None:
            raise DurableMismatch(f"machine {machine.id!r}: {message}", self.story)

        def _compare(self) -> None:
            record = self.durable.runtime.get(self.durable.run_id)
            stored = self.durable.runtime.snapshot(self.durable.run_id)
            model = self.snapshot
            ran = [(src, value) for src, value, _ in self.script.calls]
            wanted = [(c.src, thaw(c.input)) for c in self.ended_calls]
            if ran != wanted:
                self._fail(f"calls executed {ran}, the pure engine ended {wanted}")
            for (src, _, key), call in zip(self.script.calls, self.ended_calls, strict=True):
                if call.key is not None and key != idempotency_key(
                    self.durable.run_id, call.key, len(key)
                ):
                    self._fail(
                        f"call {src!r} ran with idempotency key {key!r}, not the one "
                        f"of the pure engine's call record {call.key!r}"
                    )
            if thaw(stored.value) != thaw(model.value):
                self._fail(f"durable state {thaw(stored.value)!r}, pure {thaw(model.value)!r}")
            if stored.context != model.context:
                self._fail(
                    f"durable context {thaw(stored.context)!r}, pure {thaw(model.context)!r}"
                )
            if record.status != run_status(model):
                self._fail(
                    f"durable run status {record.status!r}, pure snapshot status "
                    f"{model.status!r} (run status {run_status(model)!r})"
                )
            if self.script.actions != self.expected_actions:
                self._fail(
                    f"actions executed {self.script.actions}, the pure engine asked "
                    f"for {self.expected_actions}"
                )

        def _step(self, item: FrozenDict, deliver: Callable[[], tuple[Snapshot, Any]]) -> None:
            self.story.append(item)
            self.snapshot, effects = deliver()
            self._expect(effects)

        if alphabet:

            @precondition(lambda self: self.snapshot.status == "active")
            @rule(event=event_strategy(machine, payloads))
            def send(self, event: FrozenDict) -> None:
                now = self.clock.now()
                self._step(event, lambda: machine.transition(self.snapshot, event, now))
                self.durable.runtime.send(self.durable.run_id, thaw(event))
                self._sync()

        @precondition(lambda self: not self._at_rest())
        @rule(data=st.data())
        def finish_call(self, data: st.DataObject) -> None:
            calls = running_calls(machine, self.snapshot)  # the runtime's order
            call = calls[0]
            outcome = data.draw(
                outcome_strategy(machine, call, outputs, errors, durable=True),
                label=f"outcome of {call.id}",
            )
            now = self.clock.now()
            self.script.outcomes.setdefault(call.src, deque()).append(outcome)
            self.ended_calls.append(self._started(call.id))
            self._step(outcome, lambda: machine.transition(self.snapshot, outcome, now))
            if not self.durable.worker.run_one_call():
                self._fail(
                    f"call {call.src!r} is running in the pure engine, but no call "
                    "was due on the durable runtime"
                )
            self._sync()

        def _started(self, child_id: str) -> StartChild:
            """The start of the running call `child_id` (its latest)."""
            return next(c for c in reversed(self.expected_calls) if c.id == child_id)

        @precondition(
            lambda self: (
                fire_timers and self.snapshot.status == "active" and bool(self.snapshot.timers)
            )
        )
        @rule()
        def fire_timers_due(self) -> None:
            due = self.snapshot.timers[0].due_at
            self.clock.set(max(self.clock.now(), due))
            while (
                self.snapshot.status == "active"
                and self.snapshot.timers
                and self.snapshot.timers[0].due_at <= self.clock.now()
            ):
                timer = self.snapshot.timers[0]
                self._step(
                    FrozenDict({**timer.event, "timer": timer.id}),
                    functools.partial(
                        machine.fire_timer, self.snapshot, timer.id, self.clock.now()
                    ),
                )
            self._sync()

        if crashes:

            @precondition(
                lambda self: (
                    self.snapshot.status == "active"
                    and not (self.story and "crash" in self.story[-1])
                )
            )
            @rule()
            def crash_and_restore(self) -> None:
                self.story.append(FrozenDict(type="(crash: reopen the store)", crash=True))
                self.durable.crash()
                self._compare()

        @precondition(lambda self: self.snapshot.status != "active")
        @rule()
        def look_again(self) -> None:
            """The run ended: the stored run must still agree (nothing else can happen)."""
            self._compare()

        @invariant()
        def no_outcome_left_unused(self) -> None:
            if self._at_rest():
                left = {src: len(q) for src, q in self.script.outcomes.items() if q}
                if left:
                    self._fail(f"outcomes chosen but never consumed by a call: {left}")

        def teardown(self) -> None:
            self.durable.close()
            shutil.rmtree(self.folder, ignore_errors=True)

    DurableTest.__name__ = DurableTest.__qualname__ = f"DurableTest_{machine.id}"
    DurableTest.TestCase.settings = _settings(max_examples, max_steps)
    return DurableTest


def _settings(max_examples: int, max_steps: int) -> settings:
    return stateful_settings(max_examples, max_steps, shrink=True)


def assert_durable_matches(
    machine: Machine, *, max_examples: int = 10, max_steps: int = 15, **options: Any
) -> None:
    """Run ``durable_test`` now (derandomized): raises ``DurableMismatch`` with the shrunk
    story when the durable runtime and the pure engine disagree. Options: ``input``,
    ``outputs``, ``errors``, ``payloads``, ``also`` (companion machines, e.g. the error
    workflow), ``fire_timers``, ``crashes``."""
    test_class = durable_test(machine, max_examples=max_examples, max_steps=max_steps, **options)
    run_state_machine_as_test(test_class, settings=_settings(max_examples, max_steps))


__all__ = ["DurableMismatch", "Script", "assert_durable_matches", "durable_test", "scripted"]
