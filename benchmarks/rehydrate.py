"""Rehydrate benchmark: a durable step without the database, once per event.

Per event: restore the snapshot from JSON bytes, send one event (t1/t2 alternating on the hier
chart), persist back to JSON bytes. This engine does it with ``machine.restore`` /
``machine.transition`` / ``snapshot_to_json`` (what a durable worker does), and once more through
an actor (``create_actor(machine, snapshot=...)``, ``send``, ``get_persisted_snapshot``). The
Python peers have no snapshot format, so each is rebuilt from its stored active-state list the
way its users have to (see ``benchmarks.peers``). Construction is timed here: it is the cost.
Run: ``python -m benchmarks.rehydrate [--n 50000] [--peer-n 5000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import time

import orjson

from benchmarks.charts import event_list
from benchmarks.engine import build_machine, check_snapshot, ours_label
from benchmarks.peers import load_peers
from benchmarks.timing import Case, Result, Round, case_round, interleave, skipped, table

BENCHMARK = "rehydrate"
CASE = "rehydrate (hier)"


def pure_rehydrate() -> Case:
    """Per event: ``restore(bytes)`` -> ``transition`` -> ``snapshot_to_json``."""
    from statecharts import snapshot_to_json

    machine = build_machine("hier")
    restore, transition = machine.restore, machine.transition

    def run(n: int) -> float:
        stored = snapshot_to_json(machine.initial_transition()[0])
        events = event_list("hier", n)
        t0 = time.perf_counter()
        for event in events:
            snapshot, _ = transition(restore(stored), event)
            stored = snapshot_to_json(snapshot)
        seconds = time.perf_counter() - t0
        check_snapshot("hier", machine.restore(stored), n)
        return seconds

    return run


def actor_rehydrate() -> Case:
    """Per event: an actor started from the restored snapshot, one ``send``, persisted."""
    from statecharts import create_actor

    machine = build_machine("hier")
    restore = machine.restore

    def run(n: int) -> float:
        stored = orjson.dumps(machine.persist(machine.initial_transition()[0]))
        events = event_list("hier", n)
        t0 = time.perf_counter()
        for event in events:
            actor = create_actor(machine, snapshot=restore(stored))
            actor.start()
            actor.send(event)
            stored = orjson.dumps(actor.get_persisted_snapshot())
            actor.stop()
        seconds = time.perf_counter() - t0
        check_snapshot("hier", machine.restore(stored), n)
        return seconds

    return run


def run(n: int = 50_000, peer_n: int = 5_000, repeat: int = 5) -> list[Result]:
    """This engine (pure and actor) and every Python peer, runs interleaved."""
    label = ours_label()
    rounds: list[Round] = []
    skips: list[Result] = []
    for how, make in (("pure transition", pure_rehydrate), ("actor", actor_rehydrate)):
        try:
            rounds.append(case_round(CASE, f"{label} ({how})", make(), n))
        except ImportError as exc:
            skips.append(skipped(BENCHMARK, CASE, f"{label} ({how})", f"engine: {exc}"))
    peers, missing = load_peers()
    rounds += [case_round(CASE, peer.name, peer.rehydrate(), peer_n) for peer in peers]
    skips += [skipped(BENCHMARK, CASE, name, why) for name, why in missing.items()]
    return interleave(BENCHMARK, rounds, repeat) + skips


def main(argv: list[str] | None = None) -> None:
    """Command line: run the rehydrate benchmark and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50_000, help="events per run, this engine")
    ap.add_argument("--peer-n", type=int, default=5_000, help="events per run, Python peers")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    print(table(run(args.n, args.peer_n, args.repeat)))


if __name__ == "__main__":
    main()
