"""Command line for durable runs: `worker`, `runs list|show|cancel|resume|versions`,
`db upgrade`.

`register(subparsers)` adds these commands to the `statecharts` CLI; `python -m persistence.cli`
runs them on their own. The store URL comes from `--store` or the STATECHARTS_STORE variable.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import orjson

from persistence.runtime import NotResumableError, Runtime, machines_from
from persistence.scheduling import ScheduledStart
from persistence.stores import RunRecord, Store, StoreError, open_store
from persistence.telemetry import Telemetry, logformat, otlp
from persistence.telemetry.metrics import OtelMetrics, PrometheusMetrics, StoreGauges
from persistence.worker import Worker, WorkerCrashed
from statecharts import Machine, SystemClock
from statecharts.cli import run_one_tool

STORE_ENV = "STATECHARTS_STORE"


def _imported(option: str, spec: str) -> tuple[Any, str]:
    """(module, attribute or "") named by `module[:attribute]`, or exit naming the option."""
    module_name, _, attribute = spec.partition(":")
    try:
        return importlib.import_module(module_name), attribute
    except ImportError as exc:
        raise SystemExit(f"{option} {spec}: cannot import {module_name!r}: {exc}") from exc


def load_machines(specs: Sequence[str]) -> list[Machine]:
    """Machines from `module` (every Machine at module level, or its MACHINES list) or
    `module:attribute` (one machine or a list)."""
    found: list[Machine] = []
    for spec in specs:
        module, attribute = _imported("--machines", spec)
        module_name = module.__name__
        if attribute:
            if not hasattr(module, attribute):
                raise SystemExit(f"--machines {spec}: {module_name} has no {attribute!r}")
            value = getattr(module, attribute)
            machines = machines_from(value if isinstance(value, list | tuple) else [value])
        elif hasattr(module, "MACHINES"):
            listed = module.MACHINES
            machines = machines_from(listed.values() if isinstance(listed, Mapping) else listed)
        else:
            machines = machines_from(vars(module).values())
        if not machines:
            raise SystemExit(f"--machines {spec}: no statecharts Machine found there")
        found.extend(machines)
    return found


def load_schedules(specs: Sequence[str], runtime: Runtime) -> list[ScheduledStart]:
    """Scheduled starts from `module[:name]` (default name `schedules`): a function called
    with the runtime that returns `ScheduledStart`s, or a list of them."""
    found: list[ScheduledStart] = []
    for spec in specs:
        module, attribute = _imported("--schedules", spec)
        attribute = attribute or "schedules"
        value = getattr(module, attribute, None)
        if value is None:
            raise SystemExit(f"--schedules {spec}: {module.__name__} has no {attribute!r}")
        made = value(runtime) if callable(value) else value
        starts = list(made) if isinstance(made, list | tuple) else []
        if not starts or not all(isinstance(s, ScheduledStart) for s in starts):
            raise SystemExit(f"--schedules {spec}: expected ScheduledStart objects (or a "
                             "function of the runtime returning them)")
        found.extend(starts)
    return found


def _store(args: argparse.Namespace, *, check: bool = True, connections: int = 4) -> Store:
    url = args.store or os.environ.get(STORE_ENV)
    if not url:
        raise SystemExit(f"give --store URL or set {STORE_ENV}")
    try:
        return open_store(url, check=check, max_connections=connections)
    except StoreError as exc:
        raise SystemExit(f"store: {exc}") from exc


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", help=f"store URL (default: ${STORE_ENV}), e.g. "
                        "sqlite:///runs.db or postgresql://host/db")  # fmt: skip


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `worker`, `runs` and `db` to a CLI's subcommands."""
    worker = subparsers.add_parser(
        "worker", help="run durable workflows until SIGTERM",
        description="Step the runs of the given machines: claim runs with work due, call the "
                    "invoked functions, fire durable timers, apply retry policies and circuit "
                    "breakers, start error workflows. Run as many workers as you like against "
                    "one store; SIGTERM or Ctrl-C finishes the steps in progress and exits.")
    _add_store(worker)
    worker.add_argument(
        "--machines",
        action="append",
        required=True,
        metavar="MODULE",
        help="module (or module:attr) defining the machines; repeatable",
    )
    worker.add_argument(
        "--schedules",
        action="append",
        default=[],
        metavar="MODULE[:NAME]",
        help="also fire the cron schedules of MODULE's NAME (default 'schedules': a function "
             "of the runtime returning ScheduledStarts); repeatable",
    )
    worker.add_argument("--concurrency", type=int, default=1,
                        help="threads stepping runs at once (default 1)")
    worker.add_argument("--batch", type=int, default=16,
                        help="runs each thread steps together: their calls run at once and their "
                             "steps commit in one transaction per round (default 16)")
    worker.add_argument("--lease-ms", type=int, default=30_000,
                        help="how long a claimed run stays this worker's without a heartbeat; "
                             "after a crash another worker takes it over then (default 30000)")
    worker.add_argument("--poll-ms", type=int, default=200,
                        help="how often an idle worker looks for due work (default 200)")
    worker.add_argument("--stuck-after-ms", type=int, default=3_600_000,
                        help="log active runs that have not changed for this long and have "
                             "nothing due (default 3600000, one hour)")
    worker.add_argument("--log-level", default="INFO",
                        help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    worker.add_argument("--log-format", choices=logformat.FORMATS, default="text",
                        help="text (default) or json: one JSON object per line, operator events "
                             "with run_id, workflow, key, state and trace_id fields")
    worker.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus metrics on http://HOST:PORT/metrics "
                             "(needs prometheus-client: the `metrics` extra)")
    worker.add_argument("--metrics-host", default="127.0.0.1",
                        help="address the metrics server listens on (default 127.0.0.1)")
    worker.add_argument("--metrics-refresh-s", type=float, default=15.0,
                        help="read the store's gauges (runs by status, stuck runs, breakers) "
                             "at most this often (default 15)")
    worker.add_argument("--otlp", action="store_true",
                        help="export traces and metrics over OTLP/HTTP as the standard "
                             "OTEL_EXPORTER_OTLP_* variables say (needs opentelemetry-sdk and "
                             "opentelemetry-exporter-otlp-proto-http)")
    worker.add_argument("--dry-run", action="store_true",
                        help="record external effects as skipped ('dry-run') instead of "
                             "running them; every store write happens as in production")
    worker.set_defaults(handler=_worker)

    runs = subparsers.add_parser("runs", help="inspect and cancel runs",
                                 description="List runs, show one run with its journal and "
                                             "effects, cancel a run, or find runs the loaded "
                                             "definitions can no longer step.")
    actions = runs.add_subparsers(dest="runs_command", required=True)
    listing = actions.add_parser("list", help="runs, newest first",
                                 description="Runs, newest first, with their state and status.")
    _add_store(listing)
    listing.add_argument("--status", help="only runs with this status (active, done, "
                                          "done_partial, error, cancelled)")
    listing.add_argument("--name", help="only runs of this workflow (machine id)")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.add_argument(
        "--stuck-after-ms",
        type=int,
        default=None,
        help="only active runs not updated for this long",
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=_runs_list)
    show = actions.add_parser("show", help="one run with its effects and journal",
                              description="One run: status, state, context, pending timers, "
                                          "its effects (outbox) and its journal of events.")
    _add_store(show)
    show.add_argument("run_id", help="the run's id (as printed by runs list)")
    show.add_argument("--last", type=int, default=None, metavar="N",
                      help="only the newest N journal entries and outbox records "
                           "(events_total says how many the journal has)")
    show.set_defaults(handler=_runs_show)
    cancel = actions.add_parser("cancel", help="cancel a run",
                                description="Cancel a run: at once if no worker holds it, "
                                            "else at the worker's next step.")
    _add_store(cancel)
    cancel.add_argument("run_id", help="the run's id")
    cancel.add_argument("--reason", help="recorded as the run's last error and in its journal")
    cancel.set_defaults(handler=_runs_cancel)
    resume = actions.add_parser(
        "resume", help="resume a failed run from the state it failed in (journaled)",
        description="Make a failed run (status error) active again in the state it failed "
                    "in: the failed calls of its last step run again, with their idempotency "
                    "keys, at a worker's next round. The resume is journaled."
    )
    _add_store(resume)
    resume.add_argument("run_id", help="the failed run's id")
    resume.add_argument("--machines", action="append", required=True, metavar="MODULE",
                        help="module (or module:attr) defining the machines; repeatable")
    resume.set_defaults(handler=_runs_resume)
    versions = actions.add_parser(
        "versions", help="active runs that the given machines cannot step (definition changed)",
        description="Active runs whose definition fingerprint none of the given machines has: "
                    "a worker with these machines would leave them alone."
    )
    _add_store(versions)
    versions.add_argument("--machines", action="append", required=True, metavar="MODULE",
                          help="module (or module:attr) defining the machines; repeatable")
    versions.set_defaults(handler=_runs_versions)

    db = subparsers.add_parser("db", help="database schema",
                               description="Manage the run store's schema.")
    db_actions = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_actions.add_parser("upgrade", help="apply missing schema migrations",
                                    description="Apply the schema migrations the store does "
                                                "not have yet (safe to run again).")
    _add_store(upgrade)
    upgrade.set_defaults(handler=_db_upgrade)


def _worker(args: argparse.Namespace) -> int:
    logformat.configure(args.log_level, args.log_format)
    shutdown_otlp = otlp.configure() if args.otlp else None
    store = _store(args, connections=args.concurrency + 3)
    runtime = Runtime(store, load_machines(args.machines), dry_run=args.dry_run)
    server = _serve_metrics(args, runtime)
    try:
        Worker(runtime, args.concurrency, batch=args.batch, lease_ms=args.lease_ms,
               poll_ms=args.poll_ms, stuck_after_ms=args.stuck_after_ms,
               schedules=load_schedules(args.schedules, runtime)).run()  # fmt: skip
    except WorkerCrashed as exc:
        logging.getLogger("statecharts.worker").critical("%s; exiting with status 70", exc)
        return 70  # EX_SOFTWARE: a supervisor restarts the worker
    finally:
        if server is not None:
            server.shutdown()
        if shutdown_otlp is not None:
            shutdown_otlp()  # flush the spans and metrics still queued
        runtime.store.close()
    return 0


def _serve_metrics(args: argparse.Namespace, runtime: Runtime) -> Any:
    """The runtime's telemetry with the metrics asked for; the Prometheus server, if any."""
    sinks: list[Any] = []
    gauges = StoreGauges(runtime, every_s=args.metrics_refresh_s,
                         stuck_after_ms=args.stuck_after_ms)  # fmt: skip
    server = None
    if args.metrics_port is not None:
        try:
            prometheus = PrometheusMetrics(gauges=gauges)
        except ImportError as exc:
            raise SystemExit(f"--metrics-port: {exc}") from exc
        server, _ = prometheus.serve(args.metrics_port, args.metrics_host)
        logging.getLogger("statecharts.worker").info(
            "metrics on http://%s:%d/metrics", args.metrics_host, server.server_port)
        sinks.append(prometheus)
    if args.otlp:
        sinks.append(OtelMetrics(gauges=gauges))
    if sinks:
        runtime.telemetry = Telemetry(metrics=sinks)
    return server


def _row(run: RunRecord) -> dict[str, Any]:
    data = asdict(run)
    del data["snapshot"], data["previous_owner"], data["due_at"]
    return data


def _runs_list(args: argparse.Namespace) -> int:
    store = _store(args)
    if args.stuck_after_ms is not None:
        runs = store.stuck_runs(SystemClock().now(), args.stuck_after_ms, args.limit)
    else:
        runs = store.list_runs(status=args.status, workflow_name=args.name, limit=args.limit)
    if args.json:
        sys.stdout.write(orjson.dumps([_row(r) for r in runs]).decode() + "\n")
        return 0
    for r in runs:
        print(f"{r.id}  {r.workflow_name:<20} {r.status:<10} v{r.version:<4} {r.state}"
              + (f"  last_error={r.last_error}" if r.last_error else "")
              + (f"  problem={r.problem}" if r.problem else ""))  # fmt: skip
    return 0


def _runs_show(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        run = store.get_run(args.run_id)
    except StoreError as exc:
        raise SystemExit(str(exc)) from exc
    if args.last is not None and args.last < 0:
        raise SystemExit(f"--last must be at least 0, got {args.last}")
    data = {
        **_row(run),
        "snapshot": run.snapshot,
        "effects": [asdict(e) for e in store.list_effects(run.id, last=args.last)],
        "events": [asdict(e) for e in store.list_events(run.id, last=args.last)],
        "events_total": store.count_events(run.id),
        "inbox": [asdict(e) for e in store.pending_events(run.id)],
        "dead_letters": [asdict(d) for d in store.dead_letters(run.id)],
    }
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _runs_cancel(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        outcome = store.cancel_run(args.run_id, SystemClock().now(), args.reason)
    except StoreError as exc:
        raise SystemExit(str(exc)) from exc
    print(f"{args.run_id}: {outcome}")
    return 0


def _runs_resume(args: argparse.Namespace) -> int:
    runtime = Runtime(_store(args), load_machines(args.machines))
    try:
        run = runtime.resume(args.run_id)
    except (StoreError, NotResumableError) as exc:
        raise SystemExit(str(exc)) from exc
    print(f"{run.id}: resumed in state {run.state} (step {run.version})")
    return 0


def _runs_versions(args: argparse.Namespace) -> int:
    runtime = Runtime(_store(args), load_machines(args.machines))
    unknown = runtime.unknown_versions()
    for v in unknown:
        print(f"{v.workflow_name}  version {v.workflow_version}  label {v.label}  {v.runs} "
              "active run(s): no definition or migration in the given machines")  # fmt: skip
    if not unknown:
        print("every active run has a definition or a migration here")
    return 1 if unknown else 0


def _db_upgrade(args: argparse.Namespace) -> int:
    store = _store(args, check=False)
    try:
        applied = store.migrate()
    except StoreError as exc:
        raise SystemExit(f"db upgrade: {exc}") from exc
    version = store.schema_version()
    print(f"applied migrations {applied}; schema at version {version}" if applied
          else f"schema already at version {version}")  # fmt: skip
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m persistence.cli ...`"""
    return run_one_tool(register, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
