"""Run inside a fresh venv: ``otel_run.py DB TRACEPARENT`` runs one durable SQLite run started
with that traceparent to its end and prints JSON: whether OpenTelemetry's API is importable,
whether this process imported it, and the traceparent the run's row kept."""

import json
import sys

from persistence import Runtime, open_store
from persistence.worker import Worker
from statecharts import create_machine, tracing

machine = create_machine(
    {
        "id": "hello",
        "initial": "saying",
        "states": {
            "saying": {"invoke": {"src": "say", "onDone": "done"}},
            "done": {"type": "final"},
        },
    },
    actors={"say": lambda input: "hi"},
)

if __name__ == "__main__":
    store = open_store(f"sqlite:///{sys.argv[1]}", migrate=True)
    runtime = Runtime(store, [machine])
    run_id = runtime.start("hello", traceparent=sys.argv[2])
    Worker(runtime).run_until_idle()
    run = runtime.get(run_id)
    print(
        json.dumps(
            {
                "available": tracing.available(),
                "imported": "opentelemetry" in sys.modules,
                "status": run.status,
                "traceparent": run.traceparent,
            }
        )
    )
    store.close()
