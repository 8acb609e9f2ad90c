"""In-memory engine benchmark: this engine beside python-statemachine, transitions, sismic, XState.

Cases (machines in ``benchmarks.charts``): flat, hier, reenter, counter (guarded, targetless,
``assign``), the entry/exit toggle, the shop and the invoice event mix through an actor's
``send``, and the pure ``machine.transition()`` call on the same charts ("pure flat", ...), which
only XState also offers; XState's pure rows are its ``transition()`` and, for the same chart,
its actor. This engine also runs the actor cases with ``machine.plans = False`` (every
microstep planned afresh by the reference algorithm). Every run checks the final state and
context. Run: ``python -m benchmarks.engine [--n 200000] [--peer-n 20000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from benchmarks.charts import (
    CONFIGS,
    EVENTS,
    event_list,
    expected_context,
    expected_value,
    implementations,
)
from benchmarks.peers import load_peers
from benchmarks.timing import (
    OURS,
    Case,
    Result,
    Round,
    RoundResult,
    case_round,
    interleave,
    skipped,
    table,
)
from benchmarks.xstate_node import XStateProcess, XStateUnavailable, ensure_xstate, node_version

BENCHMARK = "engine"
ACTOR_CASES = ("flat", "hier", "reenter", "counter", "entry/exit toggle", "shop", "invoice")
PURE_CASES = tuple(f"pure {case}" for case in ACTOR_CASES if case != "reenter")
PEER_CASES = ("flat", "hier", "reenter", "counter")  # what the Python peers implement
PLANS_OFF = "plans off"


def ours_label() -> str:
    """This project's subject name with its installed version."""
    try:
        return f"{OURS} {version('statecharts')}"
    except PackageNotFoundError:
        return OURS


def build_machine(case: str, plans: bool = True) -> Any:
    """This engine's machine for ``case``, with the charts' guards and actions."""
    from statecharts import create_machine

    machine = create_machine(CONFIGS[case.removeprefix("pure ")], **implementations())
    machine.plans = plans
    return machine


def check_snapshot(case: str, snapshot: Any, n: int) -> None:
    """Fail unless ``snapshot`` is where ``n`` events of ``case`` must lead."""
    base = case.removeprefix("pure ")
    expected = expected_value(base, n)
    assert snapshot.value == expected, f"{case}: after {n} events {snapshot.value!r}"
    context = expected_context(base, n)
    if context is not None:
        assert snapshot.context == context, f"{case}: context {dict(snapshot.context)}"


def events_of(case: str, n: int) -> list[Any]:
    """The events of a run, those with data frozen beforehand (XState is handed objects
    built before its timer starts too)."""
    from statecharts.events import normalize_event

    return [e if isinstance(e, str) else normalize_event(e) for e in event_list(case, n)]


def actor_case(case: str, plans: bool = True) -> Case:
    """``case(n)``: a fresh started actor, ``n`` sends timed, final snapshot checked."""
    from statecharts import create_actor

    machine = build_machine(case, plans)

    def run(n: int) -> float:
        actor = create_actor(machine)
        actor.start()
        send = actor.send
        events = events_of(case, n)
        t0 = time.perf_counter()
        for event in events:
            send(event)
        seconds = time.perf_counter() - t0
        check_snapshot(case, actor.get_snapshot(), n)
        actor.stop()
        return seconds

    return run


def pure_case(case: str) -> Case:
    """``case(n)``: ``n`` calls of ``machine.transition(snapshot, event)`` from the initial one."""
    machine = build_machine(case)
    transition = machine.transition
    base = case.removeprefix("pure ")

    def run(n: int) -> float:
        snapshot, _ = machine.initial_transition()
        events = events_of(base, n)
        t0 = time.perf_counter()
        for event in events:
            snapshot, _ = transition(snapshot, event)
        seconds = time.perf_counter() - t0
        check_snapshot(case, snapshot, n)
        return seconds

    return run


def engine_case(case: str) -> Case:
    """This engine's case by name (actor cases, or "pure ..." for the pure transition)."""
    return pure_case(case) if case.startswith("pure ") else actor_case(case)


ALL_CASES = (*ACTOR_CASES, *PURE_CASES)


def ours_rounds(n: int) -> tuple[dict[str, Round], list[Result]]:
    """This engine's cases as rounds by case name; a case whose API cannot be imported is a
    skipped row."""
    label = ours_label()
    rounds, skips = {}, []
    for case in ALL_CASES:
        try:
            fn = engine_case(case)
        except ImportError as exc:
            skips.append(skipped(BENCHMARK, case, label, f"engine: {exc}"))
            continue
        rounds[case] = case_round(case, label, fn, n)
    return rounds, skips


def plans_off_rounds(n: int) -> list[Round]:
    """The actor cases again with the plans off (fewer events: it is several times slower)."""
    label = f"{ours_label()}, {PLANS_OFF}"
    return [case_round(case, label, actor_case(case, plans=False), n) for case in ACTOR_CASES]


def python_peer_rounds(n: int) -> tuple[list[Round], list[Result]]:
    """python-statemachine, transitions and sismic on the actor cases, as rounds."""
    peers, missing = load_peers()
    rounds = [
        case_round(case, peer.name, fn, n) for peer in peers for case, fn in peer.cases().items()
    ]
    skips = [
        skipped(BENCHMARK, case, label, why)
        for label, why in missing.items()
        for case in PEER_CASES
    ]
    return rounds, skips


def xstate_cases(n: int, warmup: int) -> list[dict[str, Any]]:
    """The case list handed to ``xstate_bench.mjs`` (same configs, events, counts, checks)."""
    cases = []
    for name in ALL_CASES:
        base = name.removeprefix("pure ")
        cases.append(
            {
                "name": name,
                "kind": "pure" if name.startswith("pure ") else "actor",
                "config": CONFIGS[base],
                "events": list(EVENTS[base]),
                "n": n,
                "expect": {
                    "n": expected_value(base, n),
                    "warmup": expected_value(base, warmup),
                    "context": expected_context(base, n),
                    "warmupContext": expected_context(base, warmup),
                },
            }
        )
    return cases


def xstate_label() -> str:
    """XState's subject name with its version and Node's (XState installed if needed)."""
    return f"xstate {ensure_xstate()} (Node.js {node_version()})"


def xstate_rounds(node: XStateProcess, label: str, n: int) -> dict[str, Round]:
    """XState v5's cases as rounds by case name, each one run in the long-lived ``node``
    (warmed up there on ``n`` events per case: V8 must tier up its JIT; CPython has nothing
    comparable, so the Python subjects warm up on 2,000 events). A chart's actor run is also
    the fair figure for this engine's pure API on that chart (``XSTATE_ACTOR``)."""

    def case_round_of(case: str) -> Round:
        def once() -> RoundResult:
            found = {(case, label): (n, node.rate(case))}
            if f"pure {case}" in PURE_CASES:
                found[(f"pure {case}", f"{label} {XSTATE_ACTOR}")] = found[(case, label)]
            return found

        return once

    return {case: case_round_of(case) for case in ALL_CASES}


XSTATE_ACTOR = "actor (same chart)"


def chart_order(*by_case: dict[str, Round]) -> list[Round]:
    """Rounds chart by chart: each subject's actor run, then each one's pure run, so that
    XState's run of a chart is timed beside this engine's runs of the same chart."""
    ordered = []
    for base in ACTOR_CASES:
        for case in (base, f"pure {base}"):
            ordered += [rounds[case] for rounds in by_case if case in rounds]
    return ordered


def run(n: int = 200_000, peer_n: int = 20_000, repeat: int = 5) -> list[Result]:
    """Every subject on every case, runs interleaved; ordered by case for the tables."""
    ours, skips = ours_rounds(n)
    peer_rounds, peer_skips = python_peer_rounds(peer_n)
    skips += peer_skips
    with ExitStack() as stack:
        try:
            label = xstate_label()
            node = stack.enter_context(XStateProcess(xstate_cases(n, warmup=n), warmup=n))
            xstate = xstate_rounds(node, label, n)
        except XStateUnavailable as exc:
            xstate = {}
            skips += [skipped(BENCHMARK, case, "xstate (Node.js)", str(exc)) for case in ALL_CASES]
        rounds = chart_order(ours, xstate) + plans_off_rounds(peer_n) + peer_rounds
        results = interleave(BENCHMARK, rounds, repeat) + skips
    order = {case: i for i, case in enumerate(ALL_CASES)}
    subjects = [ours_label(), "xstate", "python-statemachine", "transitions", "sismic"]
    rank = {name: i for i, name in enumerate(subjects)}

    def key(r: Result) -> tuple[int, int, bool, bool]:
        prefix = next((i for p, i in rank.items() if r.subject.startswith(p)), 99)
        return (
            order[r.case],
            prefix,
            r.subject.endswith(PLANS_OFF),
            r.subject.endswith(XSTATE_ACTOR),
        )

    return sorted(results, key=key)


def main(argv: list[str] | None = None) -> None:
    """Command line: run the engine benchmark and print its tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="events per run, this engine/XState")
    ap.add_argument("--peer-n", type=int, default=20_000, help="events per run, Python peers")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per case (median kept)")
    args = ap.parse_args(argv)
    print(table(run(args.n, args.peer_n, args.repeat)))


if __name__ == "__main__":
    main()
