"""An imported n8n workflow that would call nodes without end inside one event is stopped on
the durable runtime as in memory: the run fails in ``loops_forever`` after the bound of node
runs, its error naming the loop, on SQLite and PostgreSQL (and the memory store)."""

from __future__ import annotations

from typing import Any

from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.worker import Worker
from statecharts import SimulatedClock
from statecharts.io.n8n import from_n8n
from tests.io.n8n_corpus import connections
from tests.io.n8n_oracle import Stubs, stub_machine, widths_of


class Pages(Stubs):
    """Every call of a node returns one item: Page, wired to itself, never stops."""

    def __init__(self) -> None:
        super().__init__(0)

    def call(
        self, node: str, inputs: list[list[dict[str, Any]]], outputs: int
    ) -> list[list[dict[str, Any]]]:
        self.calls.append((node, inputs))
        return [[{"json": {"page": len(self.calls)}}]][: max(outputs, 1)]


def test_a_runaway_run_fails_durably_naming_the_loop(store: Store) -> None:
    data = {
        "nodes": [
            {
                "name": n,
                "type": f"n8n-nodes-base.{t}",
                "typeVersion": 1,
                "position": [x, 0],
                "parameters": {},
            }
            for n, t, x in (
                ("Go", "manualTrigger", 0),
                ("Fetch", "set", 200),
                ("Page", "httpRequest", 400),
            )
        ],
        "connections": connections(
            [("Go", 0, "Fetch", 0), ("Fetch", 0, "Page", 0), ("Page", 0, "Page", 0)]
        ),
    }
    result = from_n8n(data, "w")
    result.primary.config["context"]["n8n"]["flow"]["max_runs"] = 30
    calls = Pages()
    runtime = Runtime(
        store,
        [stub_machine(result, calls, widths_of(data))],
        clock=SimulatedClock(1_700_000_000_000),
    )
    run_id = runtime.start("w")
    runtime.send(run_id, "GO")
    Worker(runtime, lease_ms=5000).run_until_idle()
    record = runtime.get(run_id)
    assert (record.status, record.state) == ("error", "loops_forever")
    assert "runaway: 31 node runs" in str(record.last_error)
    assert "going round 'Page' (30x)" in str(record.last_error)
    assert len(calls.calls) == 31  # Fetch once, Page 30 times, then no more
