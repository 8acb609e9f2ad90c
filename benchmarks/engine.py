"""In-memory engine benchmark: this engine beside python-statemachine, transitions, sismic, XState.

Cases (machines in ``benchmarks.charts``): flat, hier, reenter, counter (guarded, targetless,
``assign``) through an actor's ``send``, and the pure ``machine.transition()`` call on the flat,
hier and counter charts ("pure flat", ...), which only XState also offers. Every run checks the
final state. Run: ``python -m benchmarks.engine [--n 200000] [--peer-n 20000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from benchmarks.charts import CONFIGS, COUNTER_LIMIT, EVENTS, event_list, expected_value
from benchmarks.peers import load_peers
from benchmarks.timing import OURS, Case, Result, measure, skipped, table
from benchmarks.xstate_node import XStateUnavailable, ensure_xstate, node_version, run_xstate

BENCHMARK = "engine"
ACTOR_CASES = ("flat", "hier", "reenter", "counter")
PURE_CASES = ("pure flat", "pure hier", "pure counter")


def ours_label() -> str:
    """This project's subject name with its installed version."""
    try:
        return f"{OURS} {version('statecharts')}"
    except PackageNotFoundError:
        return OURS


def build_machine(case: str) -> Any:
    """This engine's machine for ``case`` (the counter gets its guard and assign)."""
    from statecharts import assign, create_machine

    config = CONFIGS[case.removeprefix("pure ")]
    if config["id"] != "counter":
        return create_machine(config)
    return create_machine(
        config,
        guards={"notTooMany": lambda context, event: context["count"] < COUNTER_LIMIT},
        actions={"inc": assign({"count": lambda context, event: context["count"] + 1})},
    )


def check_snapshot(case: str, snapshot: Any, n: int) -> None:
    """Fail unless ``snapshot`` is where ``n`` events of ``case`` must lead."""
    base = case.removeprefix("pure ")
    expected = expected_value(base, n)
    assert snapshot.value == expected, f"{case}: after {n} events {snapshot.value!r}"
    if base == "counter":
        assert snapshot.context["count"] == n, f"counter: count {snapshot.context['count']}"


def actor_case(case: str) -> Case:
    """``case(n)``: a fresh started actor, ``n`` sends timed, final snapshot checked."""
    from statecharts import create_actor

    machine = build_machine(case)

    def run(n: int) -> float:
        actor = create_actor(machine)
        actor.start()
        send = actor.send
        events = event_list(case, n)
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
        events = event_list(base, n)
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


def measure_ours(n: int, repeat: int) -> list[Result]:
    """This engine on every case (a case whose API cannot be imported is a skipped row)."""
    label = ours_label()
    results = []
    for case in (*ACTOR_CASES, *PURE_CASES):
        try:
            fn = engine_case(case)
        except ImportError as exc:
            results.append(skipped(BENCHMARK, case, label, f"engine: {exc}"))
            continue
        results.append(measure(BENCHMARK, case, label, fn, n, repeat))
    return results


def measure_python_peers(n: int, repeat: int) -> list[Result]:
    """python-statemachine, transitions and sismic on the actor cases."""
    peers, missing = load_peers()
    results = []
    for peer in peers:
        for case, fn in peer.cases().items():
            results.append(measure(BENCHMARK, case, peer.name, fn, n, repeat))
    for label, why in missing.items():
        results.extend(skipped(BENCHMARK, case, label, why) for case in ACTOR_CASES)
    return results


def xstate_cases(n: int) -> list[dict[str, Any]]:
    """The case list handed to ``xstate_bench.mjs`` (same configs, events, counts, checks)."""
    warmup = min(n, 2_000)
    cases = []
    for name in (*ACTOR_CASES, *PURE_CASES):
        base = name.removeprefix("pure ")
        cases.append({
            "name": name,
            "kind": "pure" if name.startswith("pure ") else "actor",
            "config": CONFIGS[base],
            "events": list(EVENTS[base]),
            "n": n,
            "expect": {"n": expected_value(base, n), "warmup": expected_value(base, warmup)},
        })
    return cases


def measure_xstate(n: int, repeat: int) -> list[Result]:
    """XState v5 on Node.js on every case (skipped rows when Node.js is unavailable)."""
    names = (*ACTOR_CASES, *PURE_CASES)
    try:
        label = f"xstate {ensure_xstate()} (Node.js {node_version()})"
        rows = run_xstate(xstate_cases(n), repeat, warmup=min(n, 2_000))
    except XStateUnavailable as exc:
        return [skipped(BENCHMARK, case, "xstate (Node.js)", str(exc)) for case in names]
    return [Result(BENCHMARK, case, label, n, tuple(rows[case]["rates"])) for case in names]


def run(n: int = 200_000, peer_n: int = 20_000, repeat: int = 5) -> list[Result]:
    """Every subject on every case, ordered by case for the tables."""
    results = measure_ours(n, repeat) + measure_xstate(n, repeat)
    results += measure_python_peers(peer_n, repeat)
    order = {case: i for i, case in enumerate((*ACTOR_CASES, *PURE_CASES))}
    return sorted(results, key=lambda r: order[r.case])  # stable: ours, xstate, peers


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
