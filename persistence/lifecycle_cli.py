"""The run-lifecycle parts of `statecharts runs`: `runs wait`, `runs send --wait`, and search
attributes, `runs list --where` and `runs cancel|resume --where ... [--dry-run]`.

`persistence.cli` adds these options to its parsers and calls the functions here with the store
or runtime it opened.

Exit codes of the waits: `EXIT_DONE` (0) the run ended done (`runs wait`) or the event was
applied (`send --wait`), `EXIT_FAILED` (1) the run failed (or ended before applying the event),
`EXIT_CANCELLED` (3) it was cancelled, `EXIT_TIMEOUT` (124, as timeout(1)) the wait elapsed.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import orjson

from persistence.bulk import BulkReport, cancel_matching, resume_matching
from persistence.runtime import Runtime
from persistence.search import parse_where
from persistence.stores import RunQuery, RunRecord, Store
from persistence.waiting import MAX_WAIT_S, Answer, StillRunningError, wait_applied, wait_ended

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_CANCELLED = 3
EXIT_TIMEOUT = 124

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def seconds(text: str) -> float:
    """A duration such as `5s`, `500ms`, `2m` or `1h` (a bare number is seconds) in seconds,
    at most `MAX_WAIT_S`; the argparse error names the value otherwise."""
    found = _DURATION.match(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 5s, 500ms, 2m)")
    value = float(found.group(1)) * _UNIT_S[found.group(2)]
    if value > MAX_WAIT_S:
        raise argparse.ArgumentTypeError(f"{text!r} is over the longest wait, {MAX_WAIT_S:g}s")
    return value


def add_where(parser: argparse.ArgumentParser) -> None:
    """`--where NAME=VALUE` (repeatable, all must hold): runs by search attribute."""
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="only runs whose search attribute NAME is VALUE (compared as "
        "text); repeatable, all must hold",
    )


def add_bulk(parser: argparse.ArgumentParser, verb: str) -> None:
    """The options of a bulk `cancel`/`resume`: `--where`, `--workflow`, `--dry-run`."""
    add_where(parser)
    parser.add_argument(
        "--workflow", metavar="NAME", help="with --where: only runs of this workflow"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help=f"with --where: list the runs that would be {verb}, change nothing",
    )


def add_wait_option(send: argparse.ArgumentParser) -> None:
    """`runs send --wait DURATION`."""
    send.add_argument(
        "--wait",
        type=seconds,
        default=None,
        metavar="DURATION",
        help="wait up to DURATION (e.g. 5s) for a worker's step to apply the "
        "event, and print the run after it (exit 124 if the wait elapses "
        "first: the event stays queued)",
    )


def add_wait_command(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """`runs wait RUN --timeout DURATION`; the caller adds `--store` and the handler."""
    wait = actions.add_parser(
        "wait",
        help="wait for a run to end; print its output or error",
        description="Wait until the run ends, then print its status with the machine's "
        "output (done) or error as JSON. Exit 0 done, 1 error, 3 cancelled, "
        "124 when the timeout elapses first. On PostgreSQL the wait is woken by "
        "the run's steps (LISTEN/NOTIFY), on SQLite it reads again with a short "
        "backoff.",
    )
    wait.add_argument("run_id", metavar="RUN", help="the run's id or a unique prefix")
    wait.add_argument(
        "--timeout",
        type=seconds,
        default=30.0,
        metavar="DURATION",
        help="how long to wait (default 30s)",
    )
    return wait


def where_query(
    args: argparse.Namespace, workflow: str | None, status: str | None = None
) -> RunQuery:
    """The `RunQuery` of `--where` (with `workflow` and `status`); exits naming a bad term."""
    try:
        pairs = parse_where(args.where)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    return RunQuery(workflow_name=workflow, status=status, search=pairs)


def _print(data: dict[str, Any]) -> None:
    sys.stdout.write(orjson.dumps(data).decode() + "\n")


def print_answer(answer: Answer) -> int:
    """Print a `send --wait`'s answer as JSON; its exit code."""
    run = answer.run
    _print(
        {
            "run_id": answer.run_id,
            "inbox_id": answer.inbox_id,
            "outcome": answer.status,
            "step": answer.step,
            "state": answer.state,
            "reason": answer.reason,
            "run": {
                "status": run.status,
                "state": run.state,
                "version": run.version,
                "context": run.snapshot.get("context"),
            },
        }
    )
    return {"applied": EXIT_DONE, "queued": EXIT_TIMEOUT}.get(answer.status, EXIT_FAILED)


def send_and_wait(store: Store, run: RunRecord, inbox_id: int, timeout: float) -> int:
    """`runs send --wait`: wait for the event queued as `inbox_id` and print the answer."""
    return print_answer(wait_applied(store, run.id, inbox_id, timeout))


def wait_for_run(store: Store, run: RunRecord, timeout: float) -> int:
    """`runs wait`: print the run's end (or, timed out, its state) as JSON; the exit code."""
    try:
        ended = wait_ended(store, run.id, timeout)
    except StillRunningError as exc:
        _print(
            {"run_id": run.id, "status": exc.run.status, "state": exc.run.state, "timeout": True}
        )
        print(f"{run.id}: still {exc.run.status} after {timeout:g}s", file=sys.stderr)
        return EXIT_TIMEOUT
    _print(
        {
            "run_id": run.id,
            "status": ended.status,
            "state": ended.run.state,
            "output": ended.output,
            "error": ended.error,
        }
    )
    if ended.status in ("done", "done_partial"):
        return EXIT_DONE
    return EXIT_CANCELLED if ended.status == "cancelled" else EXIT_FAILED


def _report(report: BulkReport) -> int:
    """Print each run's outcome and the counts; 1 if any run was refused."""
    for run_id, outcome in report.runs:
        print(f"{run_id}: {outcome}")
    counts = ", ".join(f"{n} {what}" for what, n in sorted(report.outcomes.items())) or "none"
    print(
        f"{report.matched} run(s) matched{' (dry run)' if report.dry_run else ''}: {counts}",
        file=sys.stderr,
    )
    return 1 if report.outcomes.get("refused") else 0


def bulk_cancel(store: Store, args: argparse.Namespace, reason: str | None) -> int:
    """`runs cancel --where ...`: every matching active run."""
    query = where_query(args, args.workflow)
    why = reason or f"bulk cancel: --where {' '.join(args.where)}"
    report = cancel_matching(store, query, why, store.clock().now, dry_run=args.dry_run)
    return _report(report)


def bulk_resume(runtime: Runtime, args: argparse.Namespace) -> int:
    """`runs resume --where ...`: every matching failed run."""
    report = resume_matching(runtime, where_query(args, args.workflow), dry_run=args.dry_run)
    return _report(report)
