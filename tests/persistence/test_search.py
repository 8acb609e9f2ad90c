"""Search attributes and bulk actions (docs/persistence.md, "Run lifecycle"): fields of a run's
context indexed by the steps that change them, found through an index among 10,000 runs, and
`runs cancel|resume --where ... [--dry-run]` acting on every match, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import httpx
import pytest

from persistence.bulk import resume_matching
from persistence.cli import main
from persistence.runtime import Runtime
from persistence.stores import RunQuery, Store, open_store
from persistence.stores.rules import CANCEL_EVENT, RESUME_EVENT
from persistence.worker import Worker
from statecharts import create_machine
from tests.persistence.conftest import Serve, wait_for
from tests.persistence.lifecycle_workflows import tally

MACHINES = "tests.persistence.lifecycle_workflows"


def _found(store: Store, **where: str) -> set[str]:
    return {r.id for r in store.search_runs(RunQuery(search=tuple(where.items())), limit=1000)}


def test_search_attributes_follow_the_context_step_by_step(store: Store) -> None:
    """A run is found by the values its context has now: its start indexes them, a step that
    changes one rewrites it (a step that unsets one deletes it), whoever takes the step."""
    runtime = Runtime(store, [tally])
    eu = runtime.start("tally", {"customer": 42, "region": "eu"})
    us = runtime.start("tally", {"customer": 42, "region": "us"})
    text = runtime.start("tally", {"customer": "42"})  # the string "42": the same text
    other = runtime.start("tally", {"customer": 7, "region": "eu"})
    assert _found(store, customer="42") == {eu, us, text}
    assert _found(store, customer="42", region="eu") == {eu}
    assert store.search_attributes(text) == {"customer": "42"}  # (no region: not indexed)

    runtime.send(eu, {"type": "MOVE", "region": "us"})  # applied in the send
    assert _found(store, region="eu") == {other}
    assert _found(store, customer="42", region="us") == {eu, us}
    runtime.send(eu, {"type": "MOVE"})  # region None: no longer found by region
    assert store.search_attributes(eu) == {"customer": "42"}

    queued = Runtime(store, [tally], step_in_send=False)  # a worker's step this time
    queued.send(us, {"type": "MOVE", "region": "apac"})
    worker = Worker(queued, 1, poll_ms=20)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: _found(store, region="apac") == {us}, 30)
    finally:
        worker.stop()
        thread.join(30)
    assert store.count_matching(RunQuery(search=(("customer", "42"),))) == {"active": 3}
    assert {r.id for r in runtime.list(search={"customer": 42, "region": "apac"})} == {us}
    with pytest.raises(ValueError, match=r"search\['customer'\]: \[42\] is never indexed"):
        runtime.list(search={"customer": [42]})


def test_the_runtime_names_search_attributes_and_refuses_bad_names(store: Store) -> None:
    runtime = Runtime(store, [tally], search={"tally": ["count", "customer"]})
    run = runtime.start("tally", {"customer": 5})
    assert store.search_attributes(run) == {"count": "0", "customer": "5"}
    runtime.send(run, {"type": "ADD", "n": 2})
    assert store.search_attributes(run) == {"count": "2", "customer": "5"}
    with pytest.raises(ValueError, match="'nope' is not among the runtime's machines"):
        Runtime(store, [tally], search={"nope": ["x"]})
    with pytest.raises(ValueError, match=r"search\['tally'\]: 'a=b' is not a field name"):
        Runtime(store, [tally], search={"tally": ["a=b"]})
    bad = create_machine(
        {"id": "bad", "initial": "a", "meta": {"search": "customer"}, "states": {"a": {}}}
    )
    with pytest.raises(ValueError, match=r"bad: meta\.search: expected a list"):
        Runtime(store, [bad])


@pytest.fixture
def db(crash_url: str) -> Iterator[Store]:
    """A migrated store on a fresh database (SQLite file, PostgreSQL schema)."""
    store = open_store(crash_url, check=False)
    store.migrate()
    store.url_given = crash_url  # type: ignore[attr-defined]
    yield store
    store.close()


_BULK_RUNS = {
    "postgres": (
        "INSERT INTO workflow_runs (id, workflow_name, workflow_version, key, state, snapshot, "
        "status, created_at, updated_at) SELECT gen_random_uuid(), 'tally', 'v', NULL, 'idle', "
        "'{}'::jsonb, 'active', now() - i * interval '1 ms', now() "
        "FROM generate_series(1, %s) AS i",
        "(row_number() OVER (ORDER BY id) % 1000)::text",
    ),
    "sqlite": (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        "INSERT INTO workflow_runs (id, workflow_name, workflow_version, key, state, snapshot, "
        "status, created_at, updated_at) SELECT lower(hex(randomblob(16))), 'tally', 'v', NULL, "
        "'idle', '{}', 'active', i, i FROM n",
        "CAST(rowid % 1000 AS TEXT)",
    ),
}
"""Per dialect: the insert of N runs of `tally`, and the customer (0..999) of each."""


def _add_runs(store: Store, count: int) -> None:
    """`count` runs of `tally` with customers 0..999, inserted as the runtime's start would
    leave them (their rows and search rows), in one statement each (setup of 10,000 runs)."""
    runs, customer = _BULK_RUNS[store.dialect]  # type: ignore[attr-defined]
    with store._write() as conn:  # type: ignore[attr-defined]
        conn.execute(runs, (count,))
        conn.execute(
            f"INSERT INTO workflow_search (run_id, name, value) SELECT id, 'customer', "
            f"{customer} FROM workflow_runs WHERE workflow_version = 'v'"
        )


def _plan(store: Store, query: RunQuery) -> tuple[list[str], str]:
    """The plan of the store's runs-list page for `query`: its lines, and the SQL."""
    where, params = store._where(query)  # type: ignore[attr-defined]
    sql = store._page_sql(where)  # type: ignore[attr-defined]
    with store._connection() as conn:  # type: ignore[attr-defined]
        if store.dialect == "postgres":  # type: ignore[attr-defined]
            from persistence.stores.postgres_statements import psycopg_style

            rows = conn.execute(
                "EXPLAIN (FORMAT JSON) " + psycopg_style(sql), (*params, 50, 0)
            ).fetchall()
            return _pg_nodes(rows[0][0][0]["Plan"]), sql
        rows = conn.execute("EXPLAIN QUERY PLAN " + sql, (*params, 50, 0)).fetchall()
        return [str(row[-1]) for row in rows], sql


def _pg_nodes(node: dict[str, Any]) -> list[str]:
    here = [f"{node['Node Type']} {node.get('Relation Name', '')} {node.get('Index Name', '')}"]
    return here + [line for child in node.get("Plans", []) for line in _pg_nodes(child)]


def test_ten_thousand_runs_are_found_by_a_search_attribute_through_its_index(db: Store) -> None:
    """Among 10,000 runs, the ten of one customer are found by the search attribute's index
    (PostgreSQL: no sequential scan of the runs; SQLite: its plan searches the index), and
    the run rows are then read by their keys."""
    _add_runs(db, 10_000)
    runtime = Runtime(db, [tally])
    wanted = {runtime.start("tally", {"customer": 4242, "region": f"r{i}"}) for i in range(10)}
    query = RunQuery(search=(("customer", "4242"),))
    assert {r.id for r in db.search_runs(query, limit=100)} == wanted
    assert db.count_matching(query) == {"active": 10}
    assert len(db.search_runs(RunQuery(search=(("customer", "17"),)), limit=100)) == 10
    for plan_of in (query, RunQuery(workflow_name="tally", search=query.search)):
        plan, sql = _plan(db, plan_of)
        assert any("workflow_search_value" in line for line in plan), (plan, sql)
        if db.dialect == "postgres":  # type: ignore[attr-defined]
            assert not any(line.startswith("Seq Scan workflow_runs") for line in plan), plan
        else:
            assert not any(line.startswith("SCAN workflow_runs") for line in plan), plan


def _cli(*argv: str) -> tuple[int, list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue().splitlines(), err.getvalue()


def test_bulk_cancel_where_dry_run_then_for_real(db: Store) -> None:
    """`runs cancel --where` lists what it would cancel and changes nothing with --dry-run;
    then cancels every active match, each journaled with the reason, reports the counts, and
    leaves the other runs alone (an ended match is not touched)."""
    url = db.url_given  # type: ignore[attr-defined]
    runtime = Runtime(db, [tally])
    closing = {runtime.start("tally", {"customer": 42, "region": f"r{i}"}) for i in range(4)}
    ended = runtime.start("tally", {"customer": 42})
    runtime.send(ended, "FINISH")
    others = {runtime.start("tally", {"customer": 7}) for _ in range(2)}
    journals = {run: len(db.list_events(run)) for run in closing}

    code, lines, summary = _cli(
        "runs", "cancel", "--store", url, "--where", "customer=42", "--dry-run"
    )
    assert code == 0 and sorted(lines) == sorted(f"{run}: would cancel" for run in closing)
    assert "4 run(s) matched (dry run): 4 would cancel" in summary
    assert {db.get_run(run).status for run in closing} == {"active"}
    assert {run: len(db.list_events(run)) for run in closing} == journals

    code, lines, summary = _cli(
        "runs",
        "cancel",
        "--store",
        url,
        "--where",
        "customer=42",
        "--where",
        "region=r1",
        "--reason",
        "one region",
    )
    (one,) = lines
    assert code == 0 and one.endswith(": cancelled") and "1 run(s) matched: 1 cancelled" in summary
    code, lines, summary = _cli(
        "runs", "cancel", "--store", url, "--where", "customer=42", "--reason", "customer closed"
    )
    assert code == 0 and len(lines) == 3 and "3 run(s) matched: 3 cancelled" in summary
    for run in closing:
        row = db.get_run(run)
        last = db.list_events(run)[-1]
        assert row.status == "cancelled" and last.event["type"] == CANCEL_EVENT
        assert last.event["reason"] in ("one region", "customer closed")
    assert db.get_run(ended).status == "done"
    assert {db.get_run(run).status for run in others} == {"active"}
    code, _, summary = _cli("runs", "cancel", "--store", url, "--where", "customer=42")
    assert code == 0 and "0 run(s) matched: none" in summary


def test_bulk_resume_where_in_pages(db: Store) -> None:
    """Failed runs matching --where are resumed (each journaled); in pages of two, every
    match is acted on once; a dry run resumes none."""
    url = db.url_given  # type: ignore[attr-defined]
    runtime = Runtime(db, [tally], step_in_send=False)
    failing = {runtime.start("tally", {"customer": 9, "region": f"r{i}"}) for i in range(5)}
    healthy = runtime.start("tally", {"customer": 9})
    for run in failing:
        runtime.send(run, "BREAK")
    worker = Worker(runtime, 1, poll_ms=20)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: {db.get_run(r).status for r in failing} == {"error"}, 30)
    finally:
        worker.stop()
        thread.join(30)
    code, lines, summary = _cli(
        "runs",
        "resume",
        "--store",
        url,
        "--machines",
        MACHINES,
        "--where",
        "customer=9",
        "--dry-run",
    )
    assert code == 0 and len(lines) == 5 and "5 would resume" in summary
    assert {db.get_run(r).status for r in failing} == {"error"}
    report = resume_matching(runtime, RunQuery(search=(("customer", "9"),)), batch=2)
    assert sorted(report.runs) == sorted((run, "resumed") for run in failing)
    assert dict(report.outcomes) == {"resumed": 5}
    for run in failing:
        assert db.get_run(run).status == "active"
        assert db.list_events(run)[-1].event["type"] == RESUME_EVENT
    assert db.get_run(healthy).version == 1


def test_bulk_options_are_checked(db: Store) -> None:
    url = db.url_given  # type: ignore[attr-defined]
    for argv, message in (
        (["runs", "cancel", "--store", url], "give RUN, or --where NAME=VALUE"),
        (["runs", "cancel", "--store", url, "abcd", "--where", "a=1"], "not both"),
        (["runs", "cancel", "--store", url, "--where", "customer"], "expected NAME=VALUE"),
        (["runs", "list", "--store", url, "--where", "=1"], "expected NAME=VALUE"),
    ):
        with pytest.raises(SystemExit, match=message):
            main(argv)


def test_the_runs_list_of_the_ui_and_its_api_filter_by_search_attributes(
    store: Store,
    serve: Serve,
) -> None:
    from persistence.ui.app import create_app

    runtime = Runtime(store, [tally])
    eu = runtime.start("tally", {"customer": 42, "region": "eu"})
    runtime.start("tally", {"customer": 42, "region": "us"})
    runtime.start("tally", {"customer": 7, "region": "eu"})
    base = serve(create_app(store, [tally]))
    page = httpx.get(f"{base}/api/runs", params={"where": "customer=42, region=eu"})
    assert page.status_code == 200, page.text
    assert [r["id"] for r in page.json()["runs"]] == [eu] and page.json()["total"] == 1
    bad = httpx.get(f"{base}/api/runs", params={"where": "customer"})
    assert bad.status_code == 422 and "where 'customer': expected NAME=VALUE" in bad.text
    html = httpx.get(f"{base}/", params={"where": "customer=42,region=eu"})
    assert html.status_code == 200 and eu[:8] in html.text
    assert 'name="where"' in html.text and json.dumps("customer=42,region=eu")[1:-1] in html.text
    run_page = httpx.get(f"{base}/runs/{eu}")
    assert run_page.status_code == 200
    assert 'href="/?where=customer%3D42">customer=42</a>' in run_page.text


def test_on_postgres_a_step_rewrites_only_the_search_rows_whose_values_it_changed(
    pg_dsn: str,
    pg_schema: str,
) -> None:
    """A search row keeps its row version (`xmin`) through steps that leave its value alone:
    an ADD (the count, not indexed) rewrites none, a MOVE rewrites the region's only."""
    from persistence.stores.postgres import PostgresStore

    store = PostgresStore(pg_dsn, schema=pg_schema, max_size=2)
    try:
        store.migrate()
        runtime = Runtime(store, [tally])
        run = runtime.start("tally", {"customer": 42, "region": "eu"})

        def versions() -> dict[str, str]:
            with store._connection() as conn:
                rows = conn.execute(
                    "SELECT name, xmin::text FROM workflow_search WHERE run_id = %s", (run,)
                ).fetchall()
            return dict(rows)

        first = versions()
        runtime.send(run, {"type": "ADD", "n": 1})
        assert versions() == first and store.get_run(run).version == 2
        runtime.send(run, {"type": "MOVE", "region": "us"})
        moved = versions()
        assert moved["customer"] == first["customer"] and moved["region"] != first["region"]
        assert store.search_attributes(run) == {"customer": "42", "region": "us"}
    finally:
        store.close()
