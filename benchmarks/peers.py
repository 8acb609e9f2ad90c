"""The Python peers on the benchmark machines: python-statemachine, transitions, sismic.

Each peer builds the machines of ``benchmarks.charts`` in its own idiom and exposes
``cases()`` (``case(n) -> seconds``: build, send ``n`` events timed, check the final state),
``rehydrate()`` (per event: rebuild from stored JSON bytes, send, store back as JSON bytes, the
way the library's users have to since none of them has a snapshot format) and ``instance(case)``
(one started machine, for the memory benchmark). A peer that is not installed raises
``ImportError`` from its constructor; callers turn that into a skipped row.
"""

from __future__ import annotations

import time
from importlib.metadata import version
from typing import Any

import orjson

from benchmarks.charts import COUNTER_LIMIT, event_list, expected_leaves
from benchmarks.timing import Case


class Peer:
    """Common shape of a peer library."""

    name = ""

    def cases(self) -> dict[str, Case]:
        """The in-memory cases this peer supports, by case name."""
        raise NotImplementedError

    def rehydrate(self) -> Case:
        """The rehydrate case on the hier chart (events t1/t2)."""
        raise NotImplementedError

    def instance(self, case: str) -> object:
        """One started machine of ``case`` (for memory measurements)."""
        raise NotImplementedError


# --------------------------------------------------------------------------- python-statemachine
class PythonStatemachine(Peer):
    """python-statemachine's ``StateChart`` (SCXML-conformant base class)."""

    def __init__(self) -> None:
        from statemachine import State, StateChart
        from statemachine.orderedset import OrderedSet

        self.name = f"python-statemachine {version('python-statemachine')} (StateChart)"
        self._ordered_set = OrderedSet

        class Toggle(StateChart):  # type: ignore[misc,type-arg]
            off = State(initial=True)
            on = State()
            toggle = off.to(on) | on.to(off)

        class Hier(StateChart):  # type: ignore[misc,type-arg]
            class work(State.Compound):  # type: ignore[misc]
                class p(State.Parallel):  # type: ignore[misc]
                    class r1(State.Compound):  # type: ignore[misc]
                        a = State(initial=True)
                        b = State()
                        t1 = a.to(b) | b.to(a)

                    class r2(State.Compound):  # type: ignore[misc]
                        c = State(initial=True)
                        d = State()
                        t2 = c.to(d) | d.to(c)

            idle = State()
            leave = work.to(idle)
            enter = idle.to(work)

        class Counter(StateChart):  # type: ignore[misc,type-arg]
            counting = State(initial=True)
            done = State(final=True)
            INC = counting.to.itself(  # type: ignore[no-untyped-call]
                internal=True, cond="not_too_many", on="inc"
            ) | counting.to(done)

            def __init__(self) -> None:
                self.count = 0
                super().__init__()

            def not_too_many(self) -> bool:
                return self.count < COUNTER_LIMIT

            def inc(self) -> None:
                self.count += 1

        self._classes: dict[str, Any] = {
            "flat": Toggle,
            "hier": Hier,
            "reenter": Hier,
            "counter": Counter,
        }

    def instance(self, case: str) -> object:
        return self._classes[case]()

    def _case(self, case: str) -> Case:
        cls = self._classes[case]

        def run(n: int) -> float:
            sm = cls()
            send = sm.send
            events = event_list(case, n)
            t0 = time.perf_counter()
            for event in events:
                send(event)
            seconds = time.perf_counter() - t0
            _check_psm(sm, case, n)
            return seconds

        return run

    def cases(self) -> dict[str, Case]:
        return {case: self._case(case) for case in ("flat", "hier", "reenter", "counter")}

    def rehydrate(self) -> Case:
        hier = self._classes["hier"]
        ordered_set = self._ordered_set

        class Row:  # what the library reads the state from: a model with a `state` field
            def __init__(self, state: Any) -> None:
                self.state = state

        def run(n: int) -> float:
            stored: bytes | None = None  # None: the machine enters its initial configuration
            events = event_list("hier", n)
            t0 = time.perf_counter()
            for event in events:
                raw = None if stored is None else ordered_set(orjson.loads(stored))
                sm = hier(model=Row(raw))
                sm.send(event)
                stored = orjson.dumps(list(sm.configuration_values))
            seconds = time.perf_counter() - t0
            _check_leaf_names(orjson.loads(stored or b"[]"), "hier", n, total=6)
            return seconds

        return run


def _check_psm(sm: Any, case: str, n: int) -> None:
    if case == "counter":
        assert sm.count == n and list(sm.configuration_values) == ["counting"], sm.count
        return
    total = 1 if case == "flat" or (case == "reenter" and n % 2) else 6
    _check_leaf_names(list(sm.configuration_values), case, n, total)


def _check_leaf_names(active: list[str], case: str, n: int, total: int) -> None:
    """``active`` must hold exactly ``total`` states, among them the expected leaves."""
    leaves = expected_leaves(case, n)
    assert len(active) == total and leaves <= set(active), (case, n, active)


# --------------------------------------------------------------------------- transitions
class Transitions(Peer):
    """transitions: ``Machine`` for the flat and counter charts, ``HierarchicalMachine`` else."""

    HIER_STATES: list[Any] = [
        {
            "name": "work",
            "initial": "p",
            "children": [
                {
                    "name": "p",
                    "parallel": [
                        {
                            "name": "r1",
                            "children": ["a", "b"],
                            "initial": "a",
                            "transitions": [["t1", "a", "b"], ["t1", "b", "a"]],
                        },
                        {
                            "name": "r2",
                            "children": ["c", "d"],
                            "initial": "c",
                            "transitions": [["t2", "c", "d"], ["t2", "d", "c"]],
                        },
                    ],
                }
            ],
        },
        "idle",
    ]
    HIER_TRANSITIONS: list[Any] = [["leave", "work", "idle"], ["enter", "idle", "work"]]

    def __init__(self) -> None:
        from transitions import Machine
        from transitions.extensions import HierarchicalMachine

        self.name = f"transitions {version('transitions')}"
        self._machine = Machine
        self._hmachine = HierarchicalMachine

    class Model:
        """The object transitions decorates with ``state`` and trigger methods."""

        count = 0

        def not_too_many(self) -> bool:
            return self.count < COUNTER_LIMIT

        def inc(self) -> None:
            self.count += 1

    def instance(self, case: str) -> object:
        m = self.Model()
        if case == "flat":
            self._machine(
                m,
                states=["off", "on"],
                initial="off",
                auto_transitions=False,
                transitions=[["toggle", "off", "on"], ["toggle", "on", "off"]],
            )
        elif case == "counter":
            self._machine(
                m,
                states=["counting", "done"],
                initial="counting",
                auto_transitions=False,
                transitions=[
                    {
                        "trigger": "INC",
                        "source": "counting",
                        "dest": None,
                        "conditions": "not_too_many",
                        "after": "inc",
                    },
                    {"trigger": "INC", "source": "counting", "dest": "done"},
                ],
            )
        else:
            self._hmachine(
                m,
                states=self.HIER_STATES,
                transitions=self.HIER_TRANSITIONS,
                initial="work",
                auto_transitions=False,
            )
        return m

    def _case(self, case: str) -> Case:
        def run(n: int) -> float:
            m: Any = self.instance(case)
            trigger = m.trigger
            events = event_list(case, n)
            t0 = time.perf_counter()
            for event in events:
                trigger(event)
            seconds = time.perf_counter() - t0
            _check_transitions(m, case, n)
            return seconds

        return run

    def cases(self) -> dict[str, Case]:
        return {case: self._case(case) for case in ("flat", "hier", "reenter", "counter")}

    def rehydrate(self) -> Case:
        # transitions' idiom for many objects: one shared machine, models added and removed
        shared = self._hmachine(
            model=None,
            states=self.HIER_STATES,
            transitions=self.HIER_TRANSITIONS,
            initial="work",
            auto_transitions=False,
        )
        model = self.Model

        def run(n: int) -> float:
            stored: bytes | None = None
            events = event_list("hier", n)
            t0 = time.perf_counter()
            for event in events:
                m: Any = model()
                if stored is None:
                    shared.add_model(m)
                else:
                    shared.add_model(m, initial=orjson.loads(stored))
                m.trigger(event)
                stored = orjson.dumps(list(m.state))
                shared.remove_model(m)
            seconds = time.perf_counter() - t0
            leaves = [s.rsplit("_", 1)[1] for s in orjson.loads(stored or b"[]")]
            _check_leaf_names(leaves, "hier", n, total=2)
            return seconds

        return run


def _check_transitions(m: Any, case: str, n: int) -> None:
    if case == "counter":
        assert m.count == n and m.state == "counting", (m.count, m.state)
        return
    state = m.state if isinstance(m.state, list) else [m.state]
    leaves = [s.rsplit("_", 1)[-1] for s in state]
    _check_leaf_names(leaves, case, n, total=len(expected_leaves(case, n)))


# --------------------------------------------------------------------------- sismic
SISMIC_CHARTS = {
    "flat": """
statechart:
  name: toggle
  root state:
    name: root
    initial: "off"
    states:
      - name: "off"
        transitions: [{target: "on", event: toggle}]
      - name: "on"
        transitions: [{target: "off", event: toggle}]
""",
    "hier": """
statechart:
  name: hier
  root state:
    name: root
    initial: work
    states:
      - name: idle
        transitions: [{target: work, event: enter}]
      - name: work
        initial: p
        transitions: [{target: idle, event: leave}]
        states:
          - name: p
            parallel states:
              - name: r1
                initial: a
                states:
                  - name: a
                    transitions: [{target: b, event: t1}]
                  - name: b
                    transitions: [{target: a, event: t1}]
              - name: r2
                initial: c
                states:
                  - name: c
                    transitions: [{target: d, event: t2}]
                  - name: d
                    transitions: [{target: c, event: t2}]
""",
    # sismic rejects two enabled transitions on one event (non-determinism), so the
    # fallback to `done` needs the negated guard.
    "counter": f"""
statechart:
  name: counter
  preamble: count = 0
  root state:
    name: root
    initial: counting
    states:
      - name: counting
        transitions:
          - {{event: INC, guard: count < {COUNTER_LIMIT}, action: count += 1}}
          - {{event: INC, guard: count >= {COUNTER_LIMIT}, target: done}}
      - name: done
        type: final
""",
}


class Sismic(Peer):
    """sismic's ``Interpreter`` on YAML-defined charts (its documented way to define them)."""

    def __init__(self) -> None:
        from sismic.interpreter import Interpreter  # type: ignore[import-untyped]
        from sismic.io import import_from_yaml  # type: ignore[import-untyped]

        self.name = f"sismic {version('sismic')}"
        self._interpreter = Interpreter
        self._charts = {
            case: import_from_yaml(SISMIC_CHARTS["hier" if case == "reenter" else case])
            for case in ("flat", "hier", "reenter", "counter")
        }

    def instance(self, case: str) -> object:
        it = self._interpreter(self._charts[case])
        it.execute_once()  # enters the initial configuration
        return it

    def _case(self, case: str) -> Case:
        def run(n: int) -> float:
            it: Any = self.instance(case)
            queue, once = it.queue, it.execute_once
            events = event_list(case, n)
            t0 = time.perf_counter()
            for event in events:
                queue(event)
                once()
            seconds = time.perf_counter() - t0
            if case == "counter":
                count = it.context["count"]
                assert count == n and it.configuration == ["root", "counting"], count
            else:
                total = 2 if case == "flat" or (case == "reenter" and n % 2) else 7  # + root
                _check_leaf_names(list(it.configuration), case, n, total)
            return seconds

        return run

    def cases(self) -> dict[str, Case]:
        return {case: self._case(case) for case in ("flat", "hier", "reenter", "counter")}

    def rehydrate(self) -> Case:
        chart = self._charts["hier"]
        interpreter = self._interpreter

        def run(n: int) -> float:
            # sismic has no public restore API; its maintainer's advice (sismic issue #89) is
            # to set the private _configuration and _initialized fields.
            stored: bytes | None = None
            events = event_list("hier", n)
            t0 = time.perf_counter()
            for event in events:
                it: Any = interpreter(chart)
                if stored is None:
                    it.execute_once()
                else:
                    it._configuration = set(orjson.loads(stored))
                    it._initialized = True
                it.queue(event)
                it.execute_once()
                stored = orjson.dumps(list(it.configuration))
            seconds = time.perf_counter() - t0
            _check_leaf_names(orjson.loads(stored or b"[]"), "hier", n, total=7)
            return seconds

        return run


PEERS: tuple[type[Peer], ...] = (PythonStatemachine, Transitions, Sismic)

#: Names for peers that failed to import, so skipped rows still say who is missing.
PEER_LABELS = {
    PythonStatemachine: "python-statemachine (StateChart)",
    Transitions: "transitions",
    Sismic: "sismic",
}


def load_peers() -> tuple[list[Peer], dict[str, str]]:
    """Instantiate every importable peer; return them and ``{label: reason}`` for the rest."""
    loaded: list[Peer] = []
    missing: dict[str, str] = {}
    for cls in PEERS:
        try:
            loaded.append(cls())
        except ImportError as exc:
            missing[PEER_LABELS[cls]] = (
                f"not installed ({exc.name}); pip install -r benchmarks/requirements.txt"
            )
    return loaded, missing
