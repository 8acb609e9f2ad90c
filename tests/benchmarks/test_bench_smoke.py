"""Smoke test of the benchmarks' own cases for this engine: tiny counts, final states checked.

No timing is asserted: the point is that each benchmark case of this project still runs and
lands where it must, so ``python -m benchmarks.run`` cannot quietly measure a broken path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import statecharts
from benchmarks import engine, memory, rehydrate, scaling
from benchmarks.charts import event_list, expected_context, expected_value

COUNTS = (0, 1, 2, 3, 6)
needs_actors = pytest.mark.skipif(
    not hasattr(statecharts, "create_actor"),
    reason="statecharts.create_actor not on this branch yet",
)


@pytest.mark.parametrize("case", engine.PURE_CASES)
def test_pure_cases_reach_their_final_state(case: str) -> None:
    run = engine.engine_case(case)
    for n in COUNTS:
        assert run(n) >= 0.0


@needs_actors
@pytest.mark.parametrize("case", engine.ACTOR_CASES)
def test_actor_cases_reach_their_final_state(case: str) -> None:
    run = engine.engine_case(case)
    for n in COUNTS:
        assert run(n) >= 0.0


@needs_actors
@pytest.mark.parametrize("case", engine.ACTOR_CASES)
def test_actor_cases_with_the_plans_off_reach_their_final_state(case: str) -> None:
    run = engine.actor_case(case, plans=False)
    for n in COUNTS:
        assert run(n) >= 0.0


@pytest.mark.parametrize("case", engine.ACTOR_CASES)
def test_final_state_check_rejects_a_run_that_lost_an_event(case: str) -> None:
    machine = engine.build_machine(case)
    snapshot, _ = machine.initial_transition()
    sent = 5
    for event in event_list(case, sent):
        snapshot, _ = machine.transition(snapshot, event)
    assert snapshot.value == expected_value(case, sent)
    assert dict(snapshot.context) == (expected_context(case, sent) or {})
    engine.check_snapshot(case, snapshot, sent)
    with pytest.raises(AssertionError):
        engine.check_snapshot(case, snapshot, sent + 1)


def test_pure_rehydrate_round_trips_through_json_bytes() -> None:
    run = rehydrate.pure_rehydrate()
    for n in COUNTS:
        run(n)


@needs_actors
def test_actor_rehydrate_round_trips_through_json_bytes() -> None:
    run = rehydrate.actor_rehydrate()
    for n in COUNTS:
        run(n)


@pytest.mark.parametrize(("states", "depth"), [(10, 2), (10, 8), (100, 4), (1_000, 8)])
def test_scaling_charts_have_their_size_and_reach_their_final_state(
    states: int, depth: int
) -> None:
    for guarded in (False, True):
        assert scaling.count_states(scaling.scaled_chart(states, depth, guarded)) == states
        run = scaling.scaling_case(states, depth, pure=True, guarded=guarded)
        for n in COUNTS:
            run(n)
        if hasattr(statecharts, "create_actor"):
            scaling.scaling_case(states, depth, pure=False, guarded=guarded)(3)


def test_scaling_chart_rejects_a_size_too_small_for_its_depth() -> None:
    with pytest.raises(ValueError, match="cannot hold a chain of depth 8"):
        scaling.scaled_chart(5, 8)


def test_memory_rows_measure_snapshot_sizes() -> None:
    machine = engine.build_machine("hier")
    rows = memory.ours_rows({"bench hier": machine}, k=5)
    [row] = rows
    stored = statecharts.snapshot_to_json(machine.initial_transition()[0])
    assert row.snapshot_json == len(stored)
    assert row.per_restored is not None and row.per_restored > 0


@pytest.mark.parametrize("workers", [1, 2])
def test_durable_runtime_runs_the_three_step_workflow_on_sqlite(
    tmp_path: Path, workers: int
) -> None:
    pytest.importorskip("persistence.runtime", reason="persistence runtime not on this branch")
    from benchmarks import durable_runtime

    whole, worker = durable_runtime.measure_sqlite(tmp_path, "sqlite", workers, n=4, repeat=1)
    assert "per round" in whole.note and len(whole.rates) == 1 and whole.rates[0] > 0
    assert durable_runtime.WORKER in worker.subject and "beforehand" in worker.note
    assert worker.rates[0] > whole.rates[0]  # the same runs, without the time of the starts


@pytest.mark.parametrize("clients", [1, 2])
def test_the_equal_concurrency_rows_run_the_workflow_in_the_caller_and_by_a_woken_worker(
    tmp_path: Path, clients: int
) -> None:
    from benchmarks import durable_runtime

    rows = durable_runtime.inline_sqlite(tmp_path, "sqlite", clients, n=6)
    assert [r.subject.split(" ", 2)[2] for r in rows] == (
        [durable_runtime.INLINE, durable_runtime.WOKEN]
        if clients == 1
        else [durable_runtime.INLINE]
    )
    assert all(r.rates[0] > 0 and r.transactions == () for r in rows)  # none counted on SQLite


def test_the_encrypted_rows_seal_every_payload_and_the_overhead_table_compares_them(
    tmp_path: Path,
) -> None:
    from benchmarks import durable, durable_runtime

    rows = [
        *durable_runtime.inline_sqlite(tmp_path, "sqlite", 1, n=4),
        *durable_runtime.measure_sqlite(tmp_path, "sqlite", 1, n=4, repeat=1),
        *durable_runtime.inline_sqlite(tmp_path, "sqlite", 1, n=4, encrypted=True),
        *durable_runtime.measure_sqlite(tmp_path, "sqlite", 1, n=4, repeat=1, encrypted=True),
    ]
    assert [r.subject.split(" ", 2)[2] for r in rows[-3:]] == [
        durable_runtime.ENCRYPTED_INLINE,
        durable_runtime.ENCRYPTED_RUNTIME,
        durable_runtime.ENCRYPTED_WORKER,
    ]
    stored = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.glob("runs-*.db*"))
    assert '"$enc":"bench"' in stored  # (the encrypted runs' file holds envelopes)
    table = durable.encryption_markdown(rows)
    assert table.count("\n| sqlite | 1 |") == 3 and "encrypted ÷ plain" in table
    assert "sealed" in durable.codec_cost(50)


def test_the_step_latency_row_has_its_percentiles(tmp_path: Path) -> None:
    from benchmarks import durable, durable_runtime

    row = durable_runtime.step_latency(f"sqlite:///{tmp_path / 'l.db'}", "sqlite", events=5)
    assert row.unit == "ms" and 0 < row.median <= row.p99[0]
    assert "| p50 | p99 |" in durable.markdown([row])


def test_the_latency_floor_row_is_in_the_latency_table_not_taken_for_the_raw_commits(
    tmp_path: Path,
) -> None:
    from dataclasses import replace

    from benchmarks import durable, durable_runtime

    floor = durable.floor_sqlite(tmp_path, "sqlite", events=5)
    assert floor.unit == "ms" and floor.n == 5 and 0 < floor.median <= floor.p99[0]
    raw = replace(durable.raw_sqlite(tmp_path, 1, 20, 1, "FULL"), backend="sqlite")
    inline = durable_runtime.inline_sqlite(tmp_path, "sqlite", 1, n=4)[0]
    throughput, latency = durable.markdown([floor, inline, raw]).split("| p50 | p99 |")
    assert floor.subject in latency and floor.subject not in throughput
    inline_line = next(line for line in throughput.splitlines() if inline.subject in line)
    assert f"| {inline.steps / raw.steps:.0%} |" in inline_line  # steps ÷ the raw commits/s


def test_plans_are_deduplicated_per_statement_from_a_server_log() -> None:
    from benchmarks.durable_scaling import distinct_plans

    def entry(pid: int, run_id: str, database: str = "bench", node: str = "Index Scan") -> str:
        plan = (
            '{"Query Text": "SELECT * FROM workflow_runs WHERE id = $1", "Plan": '
            f'{{"Node Type": "{node}", "Index Name": "workflow_runs_pkey", '
            '"Relation Name": "workflow_runs", "Index Cond": "(id = \'' + run_id + "')\"}}"
        )
        return (
            f"2026-11-30 00:31:47.566 UTC [{pid}] root@{database} LOG:  duration: 0.1 ms  plan:\n"
            + "\n".join("\t" + line for line in plan.splitlines())
            + "\n"
        )

    log = (
        entry(4, "c", database="other", node="Seq Scan")  # another database on the server
        + entry(1, "a")
        + entry(2, "b")
        + ("2026-11-30 00:31:48.000 UTC [3] root@bench LOG:  could not receive data\n")
    )
    [plan] = distinct_plans(log, "bench")
    assert "Index Scan using workflow_runs_pkey on workflow_runs" in plan
    assert plan.startswith("SELECT * FROM workflow_runs WHERE id = $1")


def test_shortfalls_are_explained_only_for_goals_that_fell_short() -> None:
    from benchmarks.goals import Goal
    from benchmarks.run import why_short

    met = Goal("durable steps/s vs raw UPDATE", ">= 70%", "145%", True)
    short = Goal("engine pure counter vs XState's actor", ">= 3x", "2.1x", False)
    assert why_short([met]) == ""
    text = why_short([met, short])
    assert "Charts that do work" in text and "raw UPDATE rate" not in text


def test_the_telemetry_overhead_rows_run_every_subject() -> None:
    from benchmarks import telemetry

    rows = telemetry.run(n=5, repeat=1, stores=("memory",))
    assert [r.subject for r in rows] == list(telemetry.SUBJECTS)
    assert all(r.median > 0 for r in rows)
    assert "| memory | off |" in telemetry.markdown(rows)


def test_the_inline_profile_splits_a_workflow_into_its_phases(tmp_path: Path) -> None:
    from benchmarks import inline_profile

    result = inline_profile.profile(f"sqlite:///{tmp_path / 'p.db'}", n=3)
    assert result["n"] == 3 and result["statements"] is None and result["backend_ms"] is None
    assert {
        "start: initial transition",
        "step: apply and stage the commit",
        inline_profile.CALL_END,
        inline_profile.REST,
    } <= set(result["phases"])
    assert "| **the calling thread, in all** |" in inline_profile.markdown(result)


def test_an_opt_in_benchmarks_section_is_replaced_in_place_and_the_rest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import run

    monkeypatch.setitem(run.CACHED, "million", lambda: "new figures\n")
    doc = tmp_path / "performance.md"
    load, million, hot = (f"## {run.TITLES[n]}\n\n" for n in ("load", "million", "hotspots"))
    doc.write_text(f"# Performance\n\n{load}herd\n\n{million}old figures\n\n{hot}profile\n")
    run.write_section("million", doc)
    text = doc.read_text()
    assert "new figures" in text and "old figures" not in text
    assert text.index("herd") < text.index("new figures") < text.index("profile")
    doc.write_text(f"# Performance\n\n{load}herd\n\n{hot}profile\n")  # never written before
    run.write_section("million", doc)
    text = doc.read_text()
    assert text.index("herd") < text.index("new figures") < text.index(hot) < text.index("profile")


def test_the_million_benchmark_finds_a_sequential_scan_of_the_runs_deep_in_a_plan() -> None:
    from benchmarks.million import label, seq_scanned

    index = {"Node Type": "Index Scan", "Relation Name": "workflow_runs"}
    plan = {
        "Node Type": "ModifyTable",
        "Relation Name": "workflow_runs",
        "Plans": [
            {"Node Type": "Limit", "Plans": [index]},
            {"Node Type": "Seq Scan", "Relation Name": "workflow_inbox"},
        ],
    }
    assert seq_scanned(plan) == {"workflow_inbox"}
    plan["Plans"][0]["Plans"] = [{"Node Type": "Seq Scan", "Relation Name": "workflow_runs"}]
    assert seq_scanned(plan) == {"workflow_inbox", "workflow_runs"}
    claim = "WITH due AS (SELECT id FROM workflow_runs LIMIT 32 FOR UPDATE SKIP LOCKED) UPDATE"
    assert label(claim) == "claim"
    assert label("INSERT INTO workflow_inbox (run_id) SELECT id FROM workflow_runs") == "send"


@pytest.mark.parametrize("side", ["ours", "ours-many"])
def test_the_waiting_calls_sides_of_this_project_run_in_a_database_of_their_own(
    side: str,
) -> None:
    """Each side `waiting_calls.run` measures, in its subprocess against a fresh database on
    the bench server (every run's output checked there); DBOS's side needs the benchmark's
    own requirements."""
    from benchmarks import waiting_calls

    row = waiting_calls.measure(side, 20, 0.05)
    assert row.n == 20 and 0 < row.starting_s <= row.done_s
    assert ("start_many" in row.subject) == (side == "ours-many")
    # (each run's start, call and step cost its process CPU; the floor is that CPU's time)
    assert row.cpu_ms > 0 and row.other_cpu_ms >= 0
    assert row.cpu_floor_s(1) == pytest.approx((row.cpu_ms + row.other_cpu_ms) * 20 / 1e3)
    assert f"{row.cpu_ms:.2f} ms, {row.other_cpu_ms:.2f} ms" in waiting_calls.table([row])


def test_a_waiting_calls_side_past_its_timeout_is_a_row_that_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A side still running at `SIDE_TIMEOUT_S` is stopped and reported unfinished, with its
    time as a lower bound, and the peer's ratio over it as one: the rest of `make bench`
    goes on (a DBOS side past the timeout once ended the whole run, every section lost)."""
    from benchmarks import goals, waiting_calls

    monkeypatch.setattr(waiting_calls, "SIDE_TIMEOUT_S", 1)
    slow = waiting_calls.measure("ours", 20, 30.0)  # each call takes 30 s
    assert (slow.finished, slow.done_s, slow.n) == (False, 1, 20)
    assert "not done after 1 s (stopped)" in waiting_calls.table([slow])
    ours = waiting_calls.Row(slow.subject, 20, 0.1, 0.5, 0.01)
    nan = float("nan")
    peer = waiting_calls.Row("DBOS Transact, async workflows", 20, nan, 1, nan, finished=False)
    vs = next(g for g in goals.waiting_calls_goals([ours, peer]) if "vs DBOS" in g.name)
    assert vs.measured == "> 2.00x (0.50 s vs over 1 s)" and vs.met is False
