"""Scaling benchmark: cost per event as the chart grows, for events touching the same states.

Each generated chart has ``states`` states (root not counted) and a chain of compound states
``l1 > l2 > ...`` down to two atomic leaves ``a <-> b`` at depth ``depth``; the event ``tick``
toggles the leaves, so every event exits one state and enters one, whatever the chart's size.
The remaining states are atomic fillers spread over the chain's levels, each with a transition
on its own event name, so the chart's transition table grows with it. Cost should stay flat
across sizes when an event costs in proportion to the active states, not to the chart.
Each chart is measured with a plain ``tick`` and with a guarded one (the guard always passes,
so no cache of guard-free transitions applies), through an actor and through the pure call.
Run: ``python -m benchmarks.scaling [--n 50000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.engine import ours_label
from benchmarks.timing import Case, Result, Round, case_round, interleave, skipped

BENCHMARK = "scaling"
SIZES = (10, 100, 1_000)
DEPTHS = (2, 4, 8)


def scaled_chart(states: int, depth: int, guarded: bool = False) -> dict[str, Any]:
    """An XState config with ``states`` states whose leaves ``a``/``b`` sit at ``depth``.

    ``guarded``: the ``tick`` transitions carry a guard (always true), so an engine cannot serve
    them from a cache of guard-free transition plans and runs its full selection each event.
    """
    chain = depth + 1  # l1..l{depth-1} plus a and b
    if depth < 2 or states < chain:
        raise ValueError(f"{states} states cannot hold a chain of depth {depth}")
    # levels[k] is the `states` mapping of the node at depth k (0 = root)
    root: dict[str, Any] = {"id": "scale", "initial": "l1", "states": {}}
    levels = [root]
    node = root
    for k in range(1, depth):
        child_initial = f"l{k + 1}" if k < depth - 1 else "a"
        child: dict[str, Any] = {"initial": child_initial, "states": {}}
        node["states"][f"l{k}"] = child
        node = child
        levels.append(node)
    node["states"]["a"] = {"on": {"tick": _tick("b", guarded)}}
    node["states"]["b"] = {"on": {"tick": _tick("a", guarded)}}
    for i in range(states - chain):
        level = i % depth
        target = f"l{level + 1}" if level < depth - 1 else "a"
        levels[level]["states"][f"f{i}"] = {"on": {f"e{i}": target}}
    return root


def _tick(target: str, guarded: bool) -> Any:
    return {"target": target, "guard": "ok"} if guarded else target


def expected_value(depth: int, n: int) -> Any:
    """The state value after ``n`` ticks: ``{"l1": {"l2": ... "a" or "b"}}``."""
    value: Any = "a" if n % 2 == 0 else "b"
    for k in range(depth - 1, 0, -1):
        value = {f"l{k}": value}
    return value


def count_states(config: dict[str, Any]) -> int:
    """States below the root of an XState config (to check the generator)."""
    children = config.get("states", {})
    return len(children) + sum(count_states(child) for child in children.values())


def scaling_case(states: int, depth: int, pure: bool, guarded: bool = False) -> Case:
    """``case(n)``: ``n`` ticks on the generated chart via an actor or the pure transition."""
    from statecharts import create_machine

    if not pure:
        from statecharts import create_actor
    machine = create_machine(
        scaled_chart(states, depth, guarded),
        guards={"ok": lambda context, event: True} if guarded else None,
    )

    def run(n: int) -> float:
        events = ["tick"] * n
        if pure:
            snapshot, _ = machine.initial_transition()
            transition = machine.transition
            t0 = time.perf_counter()
            for event in events:
                snapshot, _ = transition(snapshot, event)
            seconds = time.perf_counter() - t0
        else:
            actor = create_actor(machine)
            actor.start()
            send = actor.send
            t0 = time.perf_counter()
            for event in events:
                send(event)
            seconds = time.perf_counter() - t0
            snapshot = actor.get_snapshot()
            actor.stop()
        assert snapshot.value == expected_value(depth, n), (states, depth, snapshot.value)
        return seconds

    return run


def run(n: int = 50_000, repeat: int = 5) -> list[Result]:
    """Every (size, depth) pair: plain and guarded ticks, through an actor and the pure call.

    Runs are interleaved across all charts, so load from other processes spreads evenly."""
    label = ours_label()
    rounds: list[Round] = []
    skips: list[Result] = []
    for guarded in (False, True):
        for pure in (False, True):
            how = "pure transition" if pure else "actor send"
            subject = f"{label} ({how}, {'guarded' if guarded else 'plain'} tick)"
            for depth in DEPTHS:
                for states in SIZES:
                    case = f"{states} states, depth {depth}"
                    try:
                        fn = scaling_case(states, depth, pure, guarded)
                    except ImportError as exc:
                        skips.append(skipped(BENCHMARK, case, subject, f"engine: {exc}"))
                        continue
                    rounds.append(case_round(case, subject, fn, n))
    return interleave(BENCHMARK, rounds, repeat) + skips


def scaling_table(results: list[Result]) -> str:
    """One row per subject and depth: µs/event (median) at each chart size, and the growth."""
    sizes = " | ".join(f"µs/event, {size:,} states" for size in SIZES)
    lines = [
        f"| subject | depth | {sizes} | {SIZES[-1]:,} ÷ {SIZES[0]:,} states |",
        "|---|---:|" + "---:|" * (len(SIZES) + 1),
    ]
    by_case = {(r.subject, r.case): r for r in results}
    for subject in dict.fromkeys(r.subject for r in results):
        for depth in DEPTHS:
            row = [by_case.get((subject, f"{size} states, depth {depth}")) for size in SIZES]
            costs = [1e6 / r.median if r is not None and r.ok else None for r in row]
            cells = " | ".join("—" if c is None else f"{c:.2f}" for c in costs)
            first, last = costs[0], costs[-1]
            growth = f"{last / first:.2f}x" if first and last else "—"
            lines.append(f"| {subject} | {depth} | {cells} | {growth} |")
    notes = {r.note for r in results if r.note}
    return "\n".join(lines) + "\n" + "".join(f"\n{note}\n" for note in sorted(notes))


def main(argv: list[str] | None = None) -> None:
    """Command line: run the scaling benchmark and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    print(scaling_table(run(args.n, args.repeat)))


if __name__ == "__main__":
    main()
