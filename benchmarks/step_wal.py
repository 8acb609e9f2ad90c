"""What a durable step writes on PostgreSQL, counted by the server: WAL and HOT updates.

Load does not move these counts (wall time it does), so they tell a cut in the step's writes
apart from noise on a shared machine. Two cases: ``rest``, a `send` to runs at rest whose
event assigns the context and stays in its state (the step the send applies itself, issue
20d/20f), over 400 runs in turn; ``inline``, the 3-step workflow through `Inline.run` (its
insert and three steps). Per step (``rest``) or per workflow (``inline``): the WAL records and
bytes of the transactions that wrote the schema's tables (read back with ``pg_walinspect`` over
the measured LSN range, so other schemas' and databases' writes on a shared server are left
out), by record type
and relation; and each table's inserts, updates and HOT updates (``pg_stat_user_tables``, over
the warm-up too: 20 workflows, or the runs' start and 20 steps).

Run: ``python -m benchmarks.step_wal [rest|inline] [--n 500]`` (the bench DSN, in a schema of
its own, dropped after; needs the ``pg_walinspect`` extension, PostgreSQL 15+, which the script
creates in that database if it may).
"""

from __future__ import annotations

import argparse
import collections
import re
import time
from typing import Any

from benchmarks.databases import store_url_or_scratch
from benchmarks.durable_runtime import WORKFLOW, expected, three_steps_machine

RUNS_AT_REST = 400


def _counter() -> Any:
    from statecharts import assign, create_machine

    return create_machine(
        {
            "id": "counter",
            "initial": "counting",
            "context": {"n": 0},
            "states": {"counting": {"on": {"INC": {"actions": "inc"}}}},
        },
        actions={"inc": assign({"n": lambda context, event: context["n"] + 1})},
    )


def _work(case: str, store: Any, n: int, runs_at_rest: int) -> Any:
    """The measured work of `case` (after its warm-up), as a function."""
    from persistence.inline import Inline
    from persistence.runtime import Runtime

    if case == "inline":
        inline = Inline(Runtime(store, machines=[three_steps_machine()]))
        for x in range(20):
            inline.run(WORKFLOW, {"x": 10**6 + x})

        def workflows() -> None:
            for x in range(n):
                got = inline.run(WORKFLOW, {"x": x})
                assert got.output == expected(x), got

        return workflows
    runtime = Runtime(store, machines=[_counter()])
    runs = [runtime.start("counter") for _ in range(runs_at_rest)]
    for run_id in runs[:20]:
        runtime.send(run_id, "INC")

    def steps() -> None:
        for i in range(n):
            runtime.send(runs[i % len(runs)], "INC")

    return steps


def _table_counts(conn: Any, schema: str) -> dict[str, tuple[int, int, int]]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
        "WHERE schemaname = %s",
        (schema,),
    ).fetchall()
    return {name: (ins, upd, hot) for name, ins, upd, hot in rows}


def measure(url: str, case: str, n: int, runs_at_rest: int = RUNS_AT_REST) -> dict[str, Any]:
    """Run `case` `n` times on `url` (a PostgreSQL store URL with ``schema=``) and count."""
    import psycopg

    from persistence import open_store

    schema = url.rsplit("schema=", 1)[1]
    dsn = url.split("?", 1)[0]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        store = open_store(url, migrate=True)
        try:
            work = _work(case, store, n, runs_at_rest)
            start = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            work()
            end = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        finally:
            store.close()  # its sessions report their table counts as they exit
        time.sleep(1.5)
        tables = _table_counts(admin, schema)
        names = dict(
            admin.execute(
                "SELECT c.relfilenode::text, c.relname FROM pg_class c JOIN pg_namespace s "
                "ON s.oid = c.relnamespace WHERE s.nspname = %s",
                (schema,),
            ).fetchall()
        )
        database = admin.execute(
            "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()[0]
        records = admin.execute(
            "SELECT xid::text, resource_manager, record_type, record_length, fpi_length, "
            "block_ref FROM pg_get_wal_records_info(%s, %s)",
            (start, end),
        ).fetchall()
    touched = re.compile(rf"rel \d+/{database}/(\d+)")
    ours = {
        r[0]
        for r in records  # the transactions that wrote this schema's relations
        if r[0] != "0" and any(m in names for m in touched.findall(r[5] or ""))
    }
    mine = [r for r in records if r[0] in ours]
    kinds: dict[tuple[str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
    for _, manager, record_type, length, _, block in mine:
        found = re.search(r"rel \d+/\d+/(\d+)", block or "")
        relation = names.get(found.group(1), "(other)") if found else "-"
        kind = kinds[(f"{manager} {record_type.split()[0]}", relation)]
        kind[0] += 1
        kind[1] += length
    return {
        "case": case,
        "n": n,
        "transactions": len(ours),
        "records": len(mine),
        "bytes": sum(r[3] for r in mine),
        "fpi": sum(r[4] for r in mine),
        "kinds": kinds,
        "tables": {k: v for k, v in tables.items() if any(v)},
    }


def markdown(result: dict[str, Any]) -> str:
    """The counts per step or workflow, then by record type and relation, then per table."""
    n = result["n"]
    per = "step" if result["case"] == "rest" else "workflow"
    lines = [
        f"per {per} ({n} measured): {result['bytes'] / n:,.0f} WAL bytes "
        f"({result['fpi'] / n:,.0f} of them full-page images), {result['records'] / n:.1f} "
        f"records, {result['transactions'] / n:.2f} transactions",
        "",
        f"| WAL record | relation | per {per} | bytes |",
        "|---|---|---:|---:|",
    ]
    for (kind, relation), (count, size) in sorted(
        result["kinds"].items(), key=lambda kv: -kv[1][1]
    ):
        if count / n >= 0.05:
            lines.append(f"| {kind} | {relation} | {count / n:.2f} | {size / n:,.0f} |")
    lines += [
        "",
        "Table counts of the whole run, warm-up included (a session reports them when it "
        "exits, idle ones only every 10 s):",
        "",
        "| table | inserts | updates | HOT updates |",
        "|---|---:|---:|---:|",
    ]
    for table, (ins, upd, hot) in sorted(result["tables"].items()):
        lines.append(f"| {table} | {ins} | {upd} | {hot} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Command line: count one case's writes and print them."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", nargs="?", choices=["rest", "inline"], default="rest")
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args(argv)
    with store_url_or_scratch(None, "step_wal") as url:
        print(markdown(measure(url, args.case, args.n)))


if __name__ == "__main__":
    main()
