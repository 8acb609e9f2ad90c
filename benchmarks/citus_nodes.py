"""Citus: the 3-step workflow's throughput with one worker node and with two (docs/citus.md).

The same client load both times (``--workers`` client threads starting ``--n`` runs, then a
worker with as many threads finishing them, `benchmarks.durable_runtime.drive`) against the
coordinator at STATECHARTS_CITUS_DSN, in a schema of its own whose tables are distributed
either onto the first worker node alone (the others marked ``shouldhaveshards = false`` while
the tables are created) or over every worker node. The two layouts alternate, ``--repeat``
times each; the report is the median workflows/s of each and their ratio. Run:
``STATECHARTS_CITUS_DSN=postgresql://... python -m benchmarks.citus_nodes [--n 300]``.
On one machine every node shares its cores with the others and with the client: the ratio
says what a second node costs or brings there, not what a second machine would.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from benchmarks.durable_runtime import _runtime, check_outputs, drive, three_steps_machine

SHARDS = 8


def _nodes(conn: psycopg.Connection[Any]) -> list[tuple[str, int]]:
    """The worker nodes (not the coordinator)."""
    rows = conn.execute(
        "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid > 0 AND noderole = 'primary' "
        "ORDER BY nodeport"
    ).fetchall()
    return [(str(h), int(p)) for h, p in rows]


@contextmanager
def _placed(
    conn: psycopg.Connection[Any], nodes: list[tuple[str, int]], one: bool
) -> Iterator[None]:
    """New distributed tables go to the first node alone (`one`) or to every node."""
    try:
        for host, port in nodes[1:]:
            conn.execute(
                "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', %s)",
                (host, port, not one),
            )
        yield
    finally:
        for host, port in nodes[1:]:
            conn.execute(
                "SELECT citus_set_node_property(%s, %s, 'shouldhaveshards', true)", (host, port)
            )


def measure(dsn: str, workers: int, n: int, repeat: int) -> dict[int, list[float]]:
    """Workflows/s per number of worker nodes holding the tables (1, then all), `repeat`
    times each, alternating."""
    from persistence import open_store
    from persistence.runtime import Runtime
    from persistence.worker import Worker

    machine = three_steps_machine()
    rates: dict[int, list[float]] = {}
    base = dsn.split("://", 1)[1]
    with psycopg.connect(dsn, autocommit=True) as conn:
        nodes = _nodes(conn)
        if len(nodes) < 2:
            raise SystemExit(f"the cluster at {dsn} needs two worker nodes, it has {nodes}")
        for i in range(repeat):
            for one in (True, False):
                schema = f"bench_citus_{i}_{'one' if one else 'all'}"
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                url = f"citus://{base}{'&' if '?' in base else '?'}schema={schema}&shards={SHARDS}"
                try:
                    with _placed(conn, nodes, one):
                        open_store(url, migrate=True).close()
                    held = conn.execute(
                        "SELECT count(DISTINCT nodeport) FROM citus_shards "
                        "WHERE table_name = %s::regclass",
                        (f"{schema}.workflow_runs",),
                    ).fetchone()
                    count = int(held[0]) if held else 0
                    assert count == (1 if one else len(nodes)), (schema, count)
                    with _runtime(open_store(url), Runtime, machine) as runtime:
                        drive(runtime, Worker, workers, 5, offset=10**6)  # warm-up
                        rate, _, ids = drive(runtime, Worker, workers, n, offset=0)
                        check_outputs(runtime, ids, offset=0)
                    rates.setdefault(count, []).append(rate)
                    print(f"{count} node(s): {rate:.1f} workflows/s", flush=True)
                finally:
                    conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return rates


def main(argv: list[str] | None = None) -> None:
    """Measure and print the two medians and their ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="workflows per measured run")
    ap.add_argument("--workers", type=int, default=4, help="client and worker threads")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    dsn = os.environ.get("STATECHARTS_CITUS_DSN")
    if not dsn:
        raise SystemExit("set STATECHARTS_CITUS_DSN to a Citus coordinator (docs/citus.md)")
    rates = measure(dsn, args.workers, args.n, args.repeat)
    one, many = (statistics.median(rates[k]) for k in sorted(rates))
    print(
        f"median workflows/s: 1 node {one:.1f}, {max(rates)} nodes {many:.1f}; "
        f"ratio {many / one:.2f} (runs {rates})"
    )


if __name__ == "__main__":
    main()
