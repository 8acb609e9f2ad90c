"""Run inside a fresh venv with the ``metrics`` extra: ``metrics_text.py DB`` runs one durable
SQLite run with Prometheus metrics and prints the registry in Prometheus' text format."""

import sys

from prometheus_client import generate_latest

from persistence import Runtime, open_store
from persistence.telemetry import Telemetry
from persistence.telemetry.metrics import PrometheusMetrics, StoreGauges
from persistence.worker import Worker
from statecharts import create_machine

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
    prometheus = PrometheusMetrics(gauges=StoreGauges(runtime, every_s=0))
    runtime.telemetry = Telemetry(metrics=[prometheus])
    runtime.start("hello")
    Worker(runtime).run_until_idle()
    sys.stdout.write(generate_latest(prometheus.registry).decode())
    store.close()
