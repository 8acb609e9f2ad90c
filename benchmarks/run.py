"""Run every benchmark and write ``docs/performance.md`` (``python -m benchmarks.run``).

Benchmarks run one after another in this process (DBOS and XState in subprocesses), this project
and every peer measured in the same run on the same machine. ``--quick`` shrinks every count for
a fast check of the whole pipeline; its numbers are noisy and say so in the document.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import (
    durable,
    durable_scaling,
    engine,
    goals,
    hotspots,
    load,
    memory,
    million,
    rehydrate,
    scaling,
    takeover,
    telemetry,
    waiting_calls,
)
from benchmarks.durable_runtime import STEP_GAP_S
from benchmarks.timing import machine_info, table

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "performance.md"
ALL = (
    "engine",
    "rehydrate",
    "scaling",
    "memory",
    "durable",
    "durable_scaling",
    "waiting_calls",
    "takeover",
    "telemetry",
    "load",
    "million",
    "hotspots",
)
PROFILED = ("flat", "counter", "shop", "rehydrate")


@dataclass(frozen=True)
class Sizes:
    """Event and repetition counts for one full run."""

    n: int = 200_000
    peer_n: int = 20_000
    rehydrate_n: int = 50_000
    rehydrate_peer_n: int = 5_000
    scaling_n: int = 50_000
    memory_k: int = 1_000
    durable_n: int = 600
    durable_scaling_n: int = 300
    raw_n: int = 3_000
    repeat: int = 5
    durable_repeat: int = 3
    telemetry_n: int = 300
    waiting_n: int = 10_000


QUICK = Sizes(
    n=5_000,
    peer_n=1_000,
    rehydrate_n=2_000,
    rehydrate_peer_n=300,
    scaling_n=3_000,
    memory_k=100,
    durable_n=40,
    durable_scaling_n=20,
    raw_n=200,
    repeat=2,
    durable_repeat=1,
    telemetry_n=30,
    waiting_n=200,
)


def run_all(sizes: Sizes, only: tuple[str, ...]) -> tuple[list[str], list[goals.Goal]]:
    """Run the chosen benchmarks; return markdown sections and the goals checked."""
    sections: list[str] = []
    checked: list[goals.Goal] = []
    steps: dict[str, Callable[[], tuple[str, list[goals.Goal]]]] = {
        "engine": lambda: _engine(sizes),
        "rehydrate": lambda: _rehydrate(sizes),
        "scaling": lambda: _scaling(sizes),
        "memory": lambda: (memory.markdown(memory.run(sizes.memory_k)), []),
        "durable": lambda: _durable(sizes),
        "durable_scaling": lambda: _durable_scaling(sizes),
        "waiting_calls": lambda: _waiting_calls(sizes),
        "takeover": lambda: (takeover.markdown(takeover.run()), []),
        "telemetry": lambda: (
            telemetry.markdown(telemetry.run(sizes.telemetry_n, sizes.durable_repeat)),
            [],
        ),
        "load": lambda: (CACHED["load"](), []),
        "million": lambda: (CACHED["million"](), []),
        "hotspots": lambda: (
            "\n".join(
                hotspots.markdown(case, hotspots.profile(case, 20_000, 10)) for case in PROFILED
            ),
            [],
        ),
    }
    for name in only:
        started = time.perf_counter()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        section, found = steps[name]()
        took = time.perf_counter() - started
        print(f"[bench] {name} done in {took:.0f}s", file=sys.stderr, flush=True)
        sections.append(_section(name, section))
        checked += found
    return sections, checked


CACHED: dict[str, Callable[[], str]] = {
    "load": load.cached_markdown,
    "million": million.cached_markdown,
}
"""The opt-in benchmarks' sections: from the results file each writes (`make load`, `make
bench-million`), not run here."""


def _section(name: str, body: str) -> str:
    return f"## {TITLES[name]}\n\n{INTRO[name]}\n\n{body}"


def write_section(name: str, output: Path = DEFAULT_OUTPUT) -> None:
    """Put an opt-in benchmark's section (`CACHED`), from its results file, into the document in
    place of the one there (or at its end), leaving the rest of the document as it is."""
    text = output.read_text(encoding="utf-8") if output.exists() else "# Performance\n"
    heading = f"## {TITLES[name]}\n"
    new = _section(name, CACHED[name]())
    if heading in text:
        begin = text.index(heading)
        end = text.find("\n## ", begin + len(heading))
        text = text[:begin] + new + (text[end + 1 :] if end >= 0 else "")
    else:  # before the section that follows it in `ALL`, if the document has one
        later = [f"## {TITLES[n]}\n" for n in ALL[ALL.index(name) + 1 :]]
        at = min((text.index(h) for h in later if h in text), default=None)
        text = (
            text.rstrip("\n") + "\n\n" + new if at is None else text[:at] + new + "\n" + text[at:]
        )
    output.write_text(text, encoding="utf-8")


def _engine(s: Sizes) -> tuple[str, list[goals.Goal]]:
    results = engine.run(s.n, s.peer_n, s.repeat)
    return table(results), goals.engine_goals(results)


def _rehydrate(s: Sizes) -> tuple[str, list[goals.Goal]]:
    results = rehydrate.run(s.rehydrate_n, s.rehydrate_peer_n, s.repeat)
    return table(results, title_cases=False), goals.rehydrate_goals(results)


def _scaling(s: Sizes) -> tuple[str, list[goals.Goal]]:
    results = scaling.run(s.scaling_n, s.repeat)
    return scaling.scaling_table(results), goals.scaling_goals(results)


def _durable(s: Sizes) -> tuple[str, list[goals.Goal]]:
    rows = durable.run(s.durable_n, s.raw_n, s.durable_repeat)
    return (
        durable.markdown(rows) + "\nEncrypted payloads (AES-GCM), each encrypted row over "
        "its plain row:\n\n" + durable.encryption_markdown(rows) + "\n" + durable.codec_cost(),
        goals.durable_goals(rows),
    )


def _durable_scaling(s: Sizes) -> tuple[str, list[goals.Goal]]:
    report = durable_scaling.run(s.durable_scaling_n, s.durable_repeat)
    return durable_scaling.markdown(report), goals.durable_scaling_goals(report)


def _waiting_calls(s: Sizes) -> tuple[str, list[goals.Goal]]:
    rows = waiting_calls.run(s.waiting_n)
    return waiting_calls.table(rows), goals.waiting_calls_goals(rows)


TITLES = {
    "engine": "Engine, in memory (`python -m benchmarks.engine`)",
    "rehydrate": "Rehydrate per event (`python -m benchmarks.rehydrate`)",
    "scaling": "Scaling with chart size (`python -m benchmarks.scaling`)",
    "memory": "Memory (`python -m benchmarks.memory`)",
    "durable": "Durable runs (`python -m benchmarks.durable`)",
    "durable_scaling": "Durable scaling: 10k vs 1M rows (`python -m benchmarks.durable_scaling`)",
    "waiting_calls": "Runs waiting on slow calls (`python -m benchmarks.waiting_calls`)",
    "takeover": "Takeover after SIGKILL (`python -m benchmarks.takeover`)",
    "telemetry": "Cost of tracing and metrics (`python -m benchmarks.telemetry`)",
    "load": "Thundering herd: 100,000 runs due at one instant (`python -m benchmarks.load`)",
    "million": "One PostgreSQL, a million active runs (`python -m benchmarks.million`)",
    "hotspots": "Where the time goes (`python -m benchmarks.hotspots CASE`)",
}

INTRO = {
    "engine": (
        "Events per second through a started actor's `send` (flat, hier, reenter, counter, the "
        "entry/exit toggle, the shop, the invoice event mix) and through the pure "
        "`machine.transition()` (pure ...), which only XState also has: its pure rows are "
        "XState's `transition()` and, the fair comparison, XState's actor on the same chart "
        '(the same measurement as that chart\'s actor table). "plans off" is this engine '
        "with `machine.plans = False`: every microstep planned afresh by the reference "
        "algorithm. Machines and their guards and actions: `benchmarks/charts.py` (the same "
        "configs, and the same functions written in JavaScript, are handed to XState). Each "
        "run checks the final state and context on both sides. XState runs in one long-lived "
        "Node process that runs a case when asked, so each of its runs is timed right beside "
        "this engine's runs of the same chart (its actor run, then the pure runs). The "
        "slower Python peers get fewer events per run (`n`) and run only the first four "
        "charts; rates are per event."
    ),
    "rehydrate": (
        "Per event: restore from JSON bytes, send one event (hier chart, t1/t2), persist back "
        "to JSON bytes. The peers have no snapshot format and are rebuilt from their stored "
        "active-state list the way their users have to (`benchmarks/peers.py`)."
    ),
    "scaling": (
        "Cost per `tick` event (exits one leaf, enters its sibling) on generated charts of "
        "10, 100 and 1,000 states with the leaves at depth 2, 4 and 8; the rest of each chart "
        "is atomic filler states with transitions on their own events."
    ),
    "memory": (
        "tracemalloc: traced bytes per started actor (1,000 alive at once, after a warm-up "
        "instance), the persisted snapshot's JSON size, and bytes per restored snapshot."
    ),
    "durable": (
        "The 3-step workflow (three invoked steps, each result committed before the next step "
        "runs) on the same PostgreSQL and SQLite files as raw single-row UPDATE commits (the "
        "database's ceiling for one write per step) and DBOS Transact. The headline rows are at "
        "**equal concurrency**: each client thread runs one workflow at a time in its own "
        "thread, DBOS's workflow functions and this project's `Inline.run` alike, and beside "
        "them the statements of one `Inline.run` replayed by psycopg alone for fresh run ids "
        "(the database's part of a workflow, none of this project's Python); then a "
        "client starting runs one at a time for an idle worker in its process, each start handing "
        "the run's first call to the worker's call executor; then the "
        "batched worker served as in production (`Worker.run`: 16 runs per round, one commit "
        "per round, the calls run by its call executor beside their runs and their ends "
        "written in bursts), over starts and steps and over a backlog started beforehand. "
        "Steps/s = 3 x workflows/s; '÷ raw' compares steps/s "
        "with raw commits/s at the same client count, and 'commits per step' says what each "
        "step cost (transactions per workflow from `pg_stat_database`, every autocommit "
        "statement counted, divided by 3). The second table: one step (`send` of an event "
        "whose transition runs an `assign`) until the commit of the new state returned, with "
        "the worker idle in between: the run is at rest, so the send applies the event in its "
        "own transaction; the 'queued' row is the same with `Runtime(step_in_send=False)`, "
        "the event queued and the worker woken to step it (the path before issue 20d); "
        "'the floor' is what is left when the engine, runtime and store are taken away: one "
        "single-row UPDATE of a snapshot-sized document, committed, on one connection, as "
        f"many times and as far apart ({STEP_GAP_S * 1000:g} ms) as the steps, on the same "
        "server or file: its p50 "
        "is the part of a step's latency that belongs to the host (the commit's flush and "
        "its round trip)."
    ),
    "durable_scaling": (
        "The 3-step workflow with one worker on PostgreSQL while `workflow_runs` holds 10,000 "
        "and then 1,000,000 other runs (99% finished, 1% waiting on a timer a day away). The "
        "scan counters cover the measured runs; the plans are PostgreSQL's own (auto_explain) "
        "for every statement the store ran on `workflow_runs` at 1M rows."
    ),
    "waiting_calls": (
        "Runs each awaiting one async call that sleeps 1 s and returns its input, all started "
        "at once, against DBOS Transact's async workflows (one async step each) on the same "
        "PostgreSQL server, each side in a process of its own with a fresh database: this "
        "project's starts from 4 client threads with one `Worker` in the same process (its "
        "call executor holds the calls on one asyncio loop), then the same runs started by one "
        "`Runtime.start_many` (500 runs per transaction), DBOS's `start_workflow_async` "
        "gathered on its event loop. Time from the first start until every run is done, each "
        "side told in its process (DBOS: the handles' results; this project: the telemetry of "
        "the steps that ended the runs), each output checked after; memory per waiting call "
        "is the process's peak resident set while the calls wait, less its resident set "
        "before the first start, over the number of runs. "
        "CPU per run is over the same seconds: the side's process (all its threads), and the "
        "rest of the machine (every core's busy time less the process's: the PostgreSQL "
        "server, mostly); their sum over the machine's cores is the time the CPU alone takes, "
        "a floor under the time to all done that no scheduling of the same work removes."
    ),
    "takeover": (
        "A worker subprocess holding leases on 4 runs (their step hangs in it) is SIGKILLed; "
        "another worker, already polling, finishes them once the leases expire. The time is "
        "bounded by the lease (2 s here; heartbeats renew it every third of that)."
    ),
    "telemetry": (
        "The 3-step workflow started and driven to the end by one worker thread, the same runs "
        "on the same store in every row; only the runtime's `Telemetry` differs: off (no spans, "
        "no metrics; the baseline of the ratios), OpenTelemetry's API without an SDK (the "
        "default: no-op spans), the SDK recording every span into a batch processor whose "
        "exporter drops them, and that plus Prometheus counters and histograms. Subjects "
        "alternate run by run."
    ),
    "load": (
        "100,000 runs on PostgreSQL, each asleep on a durable timer due at the same instant, "
        "then one call of a fake downstream; 4 worker processes drain them. Then the same with "
        'the call behind `limit: "downstream"`, `Limit(max_in_flight=4)`. The load test takes '
        "minutes, so it is opt-in (`make load`): this section shows its last run, from "
        "`benchmarks/load_results.json`, with that run's date, machine and load."
    ),
    "million": (
        "1,000,000 active runs in one PostgreSQL database, half waiting for an event, half on "
        "a timer: the bytes each run takes, the latency of a worker's claim with nothing due "
        "and with work due, 100,000 of the timers due at one instant drained by 4 worker "
        "processes, and the plans of the store's statements at that size. It takes about 20 "
        "minutes, so it is opt-in (`make bench-million`): this section shows its last run, from "
        "`benchmarks/million_results.json`, with that run's date, machine and load. The "
        "Scaling page (docs/scaling.md) says what each step past one process was tested with."
    ),
    "hotspots": (
        "The functions with the most own time under cProfile while this engine runs 20,000 "
        "events of a case (cProfile slows every call alike: read shares, not times). For a "
        "sampling profile: `py-spy record -- python -m benchmarks.hotspots counter`."
    ),
}


WHY_SHORT: dict[str, str] = {
    # part of goal names -> why they can fall short (printed only for goals that did, this run)
    "vs XState": """\
- **Charts that do work against XState** (issue 19: counter, shop, invoice through an actor;
  the pure `transition()` of those against XState's actor): every event takes a compiled
  route, composed into one function when the machine first meets it (`Route.take`: the
  choices' plain guards as a chain, each plan's compiled actions run in that function, the
  eventless route after it, the new snapshot by `msgspec.structs.replace`; closures, no
  generated code), so what is left is fixed per-event work in CPython. Counted by `python -m
  benchmarks.instructions` (callgrind: instructions, repeatable under load; within about 2%
  from run to run), per event through an actor: counter about 11.2k (12.5k before issue
  19m's lane, whose `Actor.send` takes the route itself, 12.8k before the smaller actor, 14k
  before issues 19k and 19l, 16k before issue 19f's lane, 20k before the composed routes),
  entry/exit toggle about 13.3k (14.7k, 15.5k, 17.6k, 18.4k, 21k), shop about 14.9k (16.3k,
  17.3k, 18.8k, 19.8k, 25k), invoice about 17.3k (18.6k, 20.4k, 22.2k); pure
  `transition()`: counter about 8.9k (9.3k before issue 19l's lane, 10.1k before issue 19h's,
  12k, 14k), entry/exit toggle about 8.2k (9.3k), shop about 11.5k
  (12.7k, 13.7k, 14.4k, 17k), invoice about 13.0k (14.9k, 15.7k). Issue 19l's lane has a
  route run its plan's actions itself, as data (`Op`: a user action's `RunAction` built, an
  assign's keys set, constants frozen once), where each action was a closure call of about
  0.5k; the full step keeps to the reference `run_plan` (no compiled copy of the actions,
  which are compiled only when a route asks: plans-off steps about 10% fewer instructions);
  and `FrozenDict` lost its hash slot (8 bytes a context; the slot itself cost about 30 of a
  context's 2.3k instructions). Issue 19h's lane has
  `transition()` take the compiled route itself (no `Machine.step` call, and a string event's
  type read from the string). Subscripting a `dict` subclass costs about 200 instructions
  more than a `dict`'s, which every user guard or value reading `context[...]` or
  `event[...]` pays: `dict.__getitem__` is a `METH_COEXIST` method, so CPython gives every
  subclass the generic `slot_mp_subscript`, and only C could put `dict`'s own back. Issue
  19f's lane took out per-event layers and CPython 3.11 slow paths: the one-key
  `assign` runs inside its route's choice, a string or already-frozen event skips
  `normalize_event`'s call, the actor no longer binds `machine.step` and `clock.now` anew on
  every `send`, and assigned integers are tested against one-digit bounds before the 64-bit
  ones (the 64-bit comparison is a generic call). Most of what is left is CPython's own
  price: a new frozen context (a `dict` subclass) about 2.3k with the old one's free (a plain
  copy with the new values, then `FrozenDict`'s own copy of it: no pure-Python way fills a
  subclass in place), the new snapshot about 1.2k, each Python call about 0.5k (the user
  guard, each assigned value), a `RunAction` about 0.8k, and around the route the actor's
  `send` (the lock, the mailbox checks: 11.2k through the actor against 8.9k pure on the
  counter). `python -m
  benchmarks.hotspots shop` shows the shares.""",
    "scaling flat": """\
- **Scaling with chart size**: the rows time 1 to 20 µs per event, and on a shared machine one
  row can pass the limit in one run and not in the next (the row that does moves from run to
  run). A real growth with chart size shows at every depth and in every run; rerun
  `python -m benchmarks.scaling` to tell the two apart.""",
    "durable steps/s vs raw": """\
- **Durable steps against the raw UPDATE rate, each step its own commit** (issue 20 made this
  honest: the old figure divided 16-run commits by one-row commits): a 3-step workflow in the
  caller is four transactions (the start's insert, one commit per step), 1.33 commits per step,
  and a step's commit is one statement that writes the run row (its state and its lease expiry,
  `wake_at`, change and are indexed, so it is not a HOT update: a new entry in each of the run's
  indexes, thirteen with its primary key), the effect outcomes, the next step's outbox row and
  the journal row, where the raw UPDATE writes one jsonb column. Issue 20i's schema 6 took out
  the journal's and the outbox's second unique indexes (the outbox's was its idempotency key,
  made of the run, step and index its other key holds): counted by the server (`python -m
  benchmarks.step_wal inline`, WAL records of the workflow's own transactions, which load does
  not move), 68 WAL records and 9.1 KB per workflow against 77 and 10.1 KB; the step statement's
  executor time (auto_explain) 0.40-0.59 ms against 0.65-0.67 ms in the same minutes at load
  4-5. Index entries are not most of it: dropping five more of the run's indexes in an
  experiment took about 0.07 ms off the statement; the foreign-key checks of the outbox and
  journal inserts (a lookup of the run per row) take 0.02-0.05 ms each. The batched rows show
  what sharing commits buys.""",
    "durable transactions per workflow": """\
- **Transactions per workflow**: four, not three, by design (the insert, one commit per step;
  `pg_stat_database` counted between closed sessions, which report their counts when they
  exit: counted around open ones, the figure was 3.00 one run and 3.89 another). Three would
  fold the start into the first step, running the first step's effects before anything
  records the run: a crash there leaves a side effect done under a key no record holds and
  nobody retries (DBOS, too, records its workflow before its first step). The guarantee was
  kept over the count. The idle-worker row (about 8) adds what serving a start takes: the
  run worker's claim on the start's wake-up (it finds nothing: the run rests while its call
  runs), the call executor's claim of the call and its read of the run, and the transactions
  in which the LISTENing sessions read the NOTIFYs. Issue 40's last session woke the executor
  at once by the start and by each end (one event, not slices of sleep), and had it claim
  only when a claim may find something (a wake-up, a full claim, slots given back; else at
  most every 10 ms), not beside every step of a chain of adopted calls: 34.6 -> 110-129
  workflows/s over its two benches, 14.0 -> 8.1 transactions.""",
    "durable step latency": """\
- **Step latency with an idle worker** (`python -m benchmarks.step_profile` times each
  phase): a `send` to a run at rest applies the event in its own transaction (issue 20d). When
  the runtime wrote the run's row itself (it started the run or committed its last step, the
  send's or its own worker's: `Runtime.resting`, issue 20f), the step is computed from that
  row before anything is read and, on PostgreSQL, written in one round trip: BEGIN, the row
  lock, one statement that writes the run, journal and outbox rows only if the row is still
  the one the step came from (same version, snapshot and definition, active, no lease, no
  queued event, no pending effect), and COMMIT, pipelined. A row that moved on writes nothing
  and the send takes the locked path, two round trips more (BEGIN, the lock, the insert and
  the reads pipelined; then the step's statement with the COMMIT). Per sent-event step that
  is one transaction instead of the send's, the worker's read and its commit
  (`pg_stat_database`: 1.06-1.08 against 2.84-3.03, issue 20d's count). The 'queued' row is
  the path before issue 20d. Issue 20f's lane measured on a machine shared with other lanes'
  suites (load 5-6; a raw single-row UPDATE's commit took 3.5 ms p50 there), interleaved in
  one process: 5.8 ms p50, 14.0 ms p99 from the row written here against 6.4 and 16.2 ms from
  the locked row; with `synchronous_commit` off in that session 2.2 against 5.2 ms p50. The
  profile's phases from rest: no database call before staging (0.08 ms), staging 0.07 ms, then
  the one round trip. On the server (the statement log): the step's statement 0.21 ms (its
  run row written with plain parameters: the batch statement's JSON row sets took 0.29 ms and
  0.1 ms more client CPU), the lock 0.05 ms, then the COMMIT's flush. Since schema 6 (issue
  20i) the run's update is HOT, written in place with no index entry, when the step leaves the
  run's indexed columns as they were, as this one does (the stuck-runs index covers
  `updated_minute`, a generated column that changes once a minute, not `updated_at`; the
  table's fillfactor is 90, so the new version fits on the row's page): `python -m
  benchmarks.step_wal rest` counts 5.1 WAL records and 570-680 bytes a step (the run's HOT
  update, the journal row and its one index entry, the row lock, the commit) against 13.6 and
  1,260 (seven index entries of the run, two of the journal), every update HOT against none;
  the statement's executor time (auto_explain) 0.15-0.18 ms against 0.23-0.24 ms in the same
  minutes at load 4-5. What is left above the goal's 1 ms is the commit with its round trip (a
  raw UPDATE, 0.48 ms on a quiet host) and about 0.4 ms of statement, staging and psycopg's
  pipeline; the wall time could not be measured quiet (at load 2-5 every commit's flush took
  5-6 ms, on both schemas). The second table's 'floor' row measures that commit and round
  trip beside the steps (the same server, as far apart): a step's p50 less the floor's is the
  part that is this project's. By hand on AMD EPYC (2026-12-07, 15:00-15:30 UTC), steps 2 ms
  apart: the calling thread's CPU 0.46-0.52 ms a step (0.27-0.31 ms back to back: two idle
  milliseconds cool its caches), the server backend's 0.52-0.56 ms (a bare single-row
  UPDATE's 0.20 ms), the floor's p50 0.48-0.50 ms and a step's 1.07-1.28 ms; taking one part of
  the step's statement away at a time (the rest check, the journal row, the snapshot compared,
  the journal's foreign key, 10 of the run table's 16 indexes) moved the backend's CPU by at
  most 0.05 ms each, inside the noise: no one part is the cost.""",
    "vs DBOS": """\
- **Against DBOS at equal concurrency** (one workflow in flight per client): each side waits
  for its synchronous commits, four here (the start's insert, one per step: see transactions
  per workflow) and about 18 for DBOS (its workflow row, step outputs and status, 5 of them
  writing). The row "its statements replayed by psycopg alone" splits a workflow's time: the
  very statements one `Inline.run` sent, sent again for fresh run ids by a bare psycopg loop
  (a cursor per statement, prepared by the server as the store's are; every replayed run
  checked to have ended) are the database's part, and what the in-the-caller row takes beyond
  it is this project's Python in the calling thread. Measured interleaved on 2026-12-02 (load
  0.7-1.9): DBOS 63-76 workflows/s, in the caller 182-195, replayed 362-412, so the database's
  part alone is about 5.5x DBOS and the calling thread's Python is about half of each
  workflow's wall time (about 2.9 of 5.4 ms). That Python was cut by about a third over issue
  20's lanes (`python -m benchmarks.inline_profile --instructions`: the caller's instructions
  per workflow under callgrind, which load does not move; 3.77M -> 2.53M): no OpenTelemetry
  no-op spans when no SDK is configured, pool checkouts without the pool's context manager,
  the hot statements on cursors kept per statement and handed to psycopg as the same encoded
  bytes (psycopg keeps a cursor's adapters only while it runs the same query again), run-id
  arrays and JSON parameters sent as text, one step's run row as plain parameters, times as
  epoch milliseconds converted in SQL. What is
  left is spread thin, none of it above about 15%: psycopg's own Python around each
  `execute` (about 100k instructions a statement, 35k of it adapting parameters), the pool's
  `getconn` and `putconn` (about 33k each, four times), the engine's transition (about 155k a
  step) and `persist` (27k), building a step's parameters (80k), then the driver's staging
  (child runs, row columns, outbox rows, telemetry: 20-30k each). Four times DBOS here would
  need the calling thread's part down to about a third of what it is: a client with no Python
  per statement, not a trim. Issue 20m's lane sent the insert and the step commits through
  libpq itself (`psycopg.pq`, prepared by name per connection, no cursor): 2.53M -> 2.26M
  instructions and about 10% less calling-thread CPU, with no wall-clock change it could see
  (3.9-4.2 ms per workflow either way); not taken, being a second way to run SQL with its own
  rules on psycopg's internals. DBOS's rate moves with the host more than this project's
  (51 workflows/s at 08:00 UTC, 92 at 18:00 on the same machine, against 188 and 269), so
  the ratio does too (3.72x, 2.93x). Keeping one connection for a whole `Inline.run` would save the
  checkouts but hold a pooled connection through the user's effects, so it was not done.
  Calls beside their runs (issue 40: a call recorded with its step, run by the caller, its
  end written with the step that applies its result) took the caller's instructions to
  3.45-3.53M per workflow; issue 40's inline lane took them to 2.67-2.88M (three callgrind
  runs of the same tree differ by that much) with the same statements and guarantees: the
  records every start, step and call builds (`StepCommit`, `RunRecord`, `CallRecord`,
  `NewRun`, a call's plan and end, ...) are frozen msgspec structs like the engine's
  `Snapshot` (a frozen dataclass's `__init__` set each field through `object.__setattr__`,
  about 1,300 instructions a field and some 450 fields a workflow), a call's site is found
  once, its context set by a small class. On
  the server, the step's statement takes 0.29-0.31 ms of executor time and the insert
  0.24-0.26 ms (auto_explain, medians, load 5); index writes are not what is left (dropping
  five of the run's indexes moved the backend's CPU per workflow less than the noise). Where
  the disk is busy (other processes fsyncing: see the load averages) every commit costs more
  on both sides and the ratio moves with it. The batched worker on a backlog is bound by
  Python per step (the transition, the snapshot's JSON, the effect call), not by the
  database; at four clients the threads share one process's GIL and the two cores with
  PostgreSQL and DBOS's process. On a host of another kind (Intel Xeon, 2026-12-07: the pages
  before were written on AMD EPYC) the row read 2.61x (261 against 100 workflows/s): DBOS's
  rate was the same, the store's statements replayed alone were slower (423 workflows/s
  against 474) while a raw single-row UPDATE committed as fast (3,323 against 3,308 a
  second), below the floor where the pages before it read 2.93-3.72x. There, side by side
  (2,000 workflows, three runs each, alternating), the tree before issue 40 took 3.45-3.56 ms
  a workflow in the caller and this one 3.96-4.02 ms: the calls' own rows (each call and its
  attempt recorded with a step, the previous call's and attempt's end, the check that the
  call is still held by its caller) cost about 0.26 ms of the server and 0.22 ms of the
  calling thread's CPU a workflow. The store's pool now hands out the connection given back
  last: psycopg's pool hands out the one given back first, so once it had grown to two
  connections a workflow's four statements alternated between two backends, each gone cold
  (on AMD EPYC, 2026-12-07, twelve alternating pairs of 2,000-3,000 workflows: 3.99 against
  4.77 ms a workflow in the caller, the server's CPU 1.98 against 2.56 ms, medians). On that
  host, that day, the row read 2.84-3.82x with this code and 2.90-3.15x with the code before
  it (DBOS 57-79 workflows/s): the 3x floor is met or missed with the host's state.""",
    "waiting calls": """\
- **Waiting calls**: the row started one at a time (`Runtime.start` per run, one statement
  each) is bound by those starts; `start_many` is the path for a burst. Its time moves with the
  host: 2.79 s on Intel Xeon (2026-12-07 11:23 UTC, its CPU alone 1.91 s on 2 cores), 3.59
  and 3.84 s in two runs of this page's command on AMD EPYC the same afternoon (its CPU
  alone 2.50 and 2.87 s), the runs after a peer's 10,000 workflows had left the load average
  in the hundreds. By hand on that host in quieter minutes, thirteen runs each of this code
  and of the code before the pool's order (above), alternating: 2.78-4.46 s (median 3.33)
  against 2.97-4.66 s (median 3.26).""",
}


def why_short(checked: list[goals.Goal]) -> str:
    """The explanations of the goals this run fell short of (none: say so)."""
    short = [g.name for g in checked if g.met is False]
    found = [text for part, text in WHY_SHORT.items() if any(part in name for name in short)]
    if not found:
        return ""
    return "### Where goals fall short, and why\n\n" + "\n".join(found) + "\n"


def document(
    sections: list[str],
    checked: list[goals.Goal],
    info: dict[str, str],
    sizes: Sizes,
    quick: bool,
    seconds: float,
) -> str:
    """The whole ``docs/performance.md``."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = "\n".join(f"- {k}: {v}" for k, v in info.items())
    warning = (
        "\n> **Quick run** (`--quick`): tiny counts, numbers are noisy; for the pipeline only.\n"
        if quick
        else ""
    )
    return f"""# Performance

Written by `python -m benchmarks.run` (`make bench`) on {when} in {seconds:.0f} s.

Every table compares this project with its peers measured in the same run on the same machine:
medians over {sizes.repeat} timed runs ({sizes.durable_repeat} for the durable benchmarks), each
after a warm-up, with the subjects' runs interleaved so that load from other processes falls on
all of them alike. Ratios are this project's median divided by the peer's (above 1: this project
is faster). Absolute numbers depend on the machine and on what else it was doing (see the load
averages below): read them as ratios. The peers are installed from
`benchmarks/requirements.txt`; XState is npm-installed into `benchmarks/.cache/` (not committed).
{warning}
## Machine

{machine}

## Goals (issues 11, 19 and 20)

{goals.markdown(checked)}
{why_short(checked)}
{chr(10).join(sections)}"""


def main(argv: list[str] | None = None) -> None:
    """Command line: run the benchmarks and write the document."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny counts: check the pipeline")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma list of {', '.join(ALL)}")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    ap.add_argument(
        "--section",
        choices=sorted(CACHED),
        help="run nothing: put this opt-in benchmark's section, from its results file, into "
        "the document in place of the one there",
    )
    args = ap.parse_args(argv)
    if args.section:
        write_section(args.section, args.output)
        print(f"[bench] wrote the {args.section} section of {args.output}", file=sys.stderr)
        return
    only = tuple(name for name in args.only.split(",") if name)
    unknown = [name for name in only if name not in ALL]
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; choose from {list(ALL)}")
    sizes = QUICK if args.quick else Sizes()
    info = machine_info()
    started = time.perf_counter()
    sections, checked = run_all(sizes, only)
    info["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = document(sections, checked, info, sizes, args.quick, time.perf_counter() - started)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(text)
    print(f"[bench] wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
