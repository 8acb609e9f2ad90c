"""Metrics scraped over HTTP from a real `statecharts worker --metrics-port` process, parsed with
prometheus_client's parser, match what the store says."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
from prometheus_client.parser import text_string_to_metric_families

from persistence import open_store
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.telemetry import Telemetry
from tests.telemetry import workflows

STUCK_AFTER_MS = 800
AMOUNTS = [10, 20, 30, 40, 150, 200, 17]  # 5 paid (17 after one retry), 2 declined
HELD = [50, 60]  # paid, then on hold until RELEASE: stuck once STUCK_AFTER_MS passes
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], metric: str, **labels: str
) -> float:
    return samples.get((metric, tuple(sorted(labels.items()))), 0.0)


def _sum(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], metric: str, **labels: str
) -> float:
    return sum(
        v for (n, ls), v in samples.items() if n == metric and set(labels.items()) <= set(ls)
    )


def _settled(store: Store, ids: list[str]) -> bool:
    runs = [store.get_run(i) for i in ids]
    return all(r.terminal or r.state == "on_hold" for r in runs) and not any(
        c.status in ("pending", "running") for r in runs for c in store.list_calls(r.id)
    )


def test_scraped_metrics_match_the_store(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = open_store(url, migrate=True)
    runtime = Runtime(store, [workflows.billing], telemetry=Telemetry.off())
    ids = [
        runtime.start(
            "billing", {"amount": a}, key=f"bill-{a}", traceparent=TRACEPARENT if a > 100 else None
        )
        for a in AMOUNTS
    ]
    ids += [runtime.start("billing", {"amount": a, "hold": True}) for a in HELD]
    port = _free_port()
    env = {**os.environ, workflows.CALLS_ENV: str(tmp_path / "calls.txt")}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "persistence.cli",
            "worker",
            "--store",
            url,
            "--machines",
            "tests.telemetry.workflows",
            "--poll-ms",
            "50",
            "--metrics-port",
            str(port),
            "--metrics-refresh-s",
            "0.2",
            "--stuck-after-ms",
            str(STUCK_AFTER_MS),
            "--log-format",
            "json",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "worker.log").open("wb"),
    )
    processes.append(worker)
    deadline = time.monotonic() + 60
    while not _settled(store, ids):
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        assert time.monotonic() < deadline, "runs did not settle"
        time.sleep(0.1)
    time.sleep(STUCK_AFTER_MS / 1000 + 0.5)  # the held runs are stuck now; gauges refreshed
    samples = _scrape(port)

    runs = [store.get_run(i) for i in ids]
    by_status: dict[str, int] = {}
    for r in runs:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    assert by_status == {"done": 5, "error": 2, "active": 2}
    # gauges read from the store
    for status in ("active", "done", "done_partial", "error", "cancelled"):
        assert _value(
            samples, "statecharts_runs", workflow="billing", status=status
        ) == by_status.get(status, 0), status
    assert _value(samples, "statecharts_stuck_runs", workflow="billing") == 2
    assert len(store.stuck_runs(runtime.clock.now(), STUCK_AFTER_MS)) == 2
    # counters of what the worker did, against the rows it wrote
    assert (
        _value(samples, "statecharts_runs_finished_total", workflow="billing", outcome="done") == 5
    )
    assert (
        _value(samples, "statecharts_runs_finished_total", workflow="billing", outcome="error") == 2
    )
    assert _value(samples, "statecharts_steps_total", workflow="billing") == sum(
        r.version - 1 for r in runs
    )
    # each invoked charge is a call beside its run, counted as an effect of kind start_child
    effects = [c for r in runs for c in store.list_calls(r.id)]
    failed = [c for c in effects if c.status == "failed"]
    assert len(failed) == 3  # two declined, one timed out
    assert _value(
        samples,
        "statecharts_effect_failures_total",
        workflow="billing",
        kind="start_child",
        name="charge",
    ) == len(failed)
    assert _value(
        samples,
        "statecharts_effect_duration_seconds_count",
        workflow="billing",
        kind="start_child",
        name="charge",
    ) == len(effects)
    assert _sum(samples, "statecharts_retries_scheduled_total", workflow="billing") == 1
    assert _value(samples, "statecharts_step_duration_seconds_count", workflow="billing") == _value(
        samples, "statecharts_steps_total", workflow="billing"
    )
    # a run whose work is calls is never claimed (its calls are leased beside it, each end
    # applied with its step); the run whose retry waits on a timer is claimed once it is due
    assert _sum(samples, "statecharts_claim_lag_seconds_count", workflow="billing") >= 1
    assert _value(samples, "statecharts_lease_takeovers_total", workflow="billing") == 0

    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    store.close()
    # --log-format json: one line per failed run and retry, with what an operator needs
    lines = [orjson.loads(line) for line in (tmp_path / "worker.log").read_text().splitlines()]
    failed_lines = [x for x in lines if x.get("event") == "run_failed"]
    assert sorted(x["key"] for x in failed_lines) == ["bill-150", "bill-200"]
    for x in failed_lines:
        assert x["level"] == "WARNING" and x["workflow"] == "billing"
        assert x["run_id"] in ids and x["state"] and "declined" in x["message"]
        assert x["trace_id"] == TRACEPARENT.split("-")[1]
    (retry,) = [x for x in lines if x.get("event") == "retry_scheduled"]
    assert retry["key"] == "bill-17" and retry["trace_id"] is None
