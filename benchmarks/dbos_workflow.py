"""DBOS Transact running a 3-step workflow: the durable peer, in its own process.

DBOS keeps global state (one launched instance per process, background threads), so
``benchmarks.durable`` runs this module as a subprocess per measurement:
``python -m benchmarks.dbos_workflow --url URL --n N --clients C --repeat R``. Each step's result
is checkpointed by DBOS in its system database at ``URL`` (PostgreSQL or SQLite). ``C`` threads
each run workflows one after another; the module prints one JSON line:
``{"version": ..., "rates": [workflows/s per run]}``. Every workflow's result is checked.
"""

from __future__ import annotations

import argparse
import json
from importlib.metadata import version
from typing import Any

from benchmarks.durable_rows import in_threads


def expected(x: int) -> int:
    """What the workflow returns for input ``x``: ((x + 1) * 2) - 3."""
    return (x + 1) * 2 - 3


def launch(url: str) -> tuple[Any, Any]:
    """Configure and launch DBOS; return it and the registered workflow function."""
    from dbos import DBOS, DBOSConfig

    config: DBOSConfig = {"name": "statecharts-bench", "system_database_url": url}
    DBOS(config=config)

    @DBOS.step()
    def add_one(x: int) -> int:
        return x + 1

    @DBOS.step()
    def double(x: int) -> int:
        return x * 2

    @DBOS.step()
    def minus_three(x: int) -> int:
        return x - 3

    @DBOS.workflow()
    def three_steps(x: int) -> int:
        return int(minus_three(double(add_one(x))))

    DBOS.launch()
    return DBOS, three_steps


def timed_run(workflow: Any, n: int, clients: int, offset: int) -> float:
    """``n`` workflows split over ``clients`` threads; return workflows per second."""
    per_client = n // clients

    def client(c: int) -> None:
        base = offset + c * per_client
        for x in range(base, base + per_client):
            got = workflow(x)
            if got != expected(x):
                raise AssertionError(f"workflow({x}) returned {got}")

    return per_client * clients / in_threads(clients, client)


def main(argv: list[str] | None = None) -> None:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="DBOS system database URL")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    dbos, workflow = launch(args.url)
    try:
        timed_run(workflow, 20 * args.clients, args.clients, offset=10**6)  # warm-up
        rates = [
            timed_run(workflow, args.n, args.clients, offset=r * args.n) for r in range(args.repeat)
        ]
    finally:
        dbos.destroy()
    print(json.dumps({"version": version("dbos"), "rates": rates}))


if __name__ == "__main__":
    main()
