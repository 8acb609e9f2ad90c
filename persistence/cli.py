"""Command line for durable runs: `worker`,
`runs start|send|list|show|cancel|resume|wait|versions`, `runs purge|fork|reset` (retention,
fork and reset), `schedules`, `db upgrade`, and `api` (the webhook ingress); the run-lifecycle
options (`--wait`, `--where`) are in `persistence.lifecycle_cli`.

`register(subparsers)` adds these commands to the `statecharts` CLI; `python -m persistence.cli`
runs them on their own. The store URL comes from `--store` or the STATECHARTS_STORE variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
from msgspec import structs

from persistence import lifecycle_cli
from persistence.columns import error_is_current
from persistence.lifecycle import NotRestorableError, duration_ms, purge
from persistence.runtime import (
    KeyReuse,
    NotResumableError,
    Runtime,
    UnknownWorkflowError,
    machines_from,
)
from persistence.scheduling import ScheduledStart, iso
from persistence.signatures import Signature
from persistence.stacks import show_stacks_on
from persistence.stores import (
    RunQuery,
    RunRecord,
    Store,
    StoreEncodingError,
    StoreError,
    open_store,
    split_postgres_url,
)
from persistence.stores.codec import (
    KEYS_ENV,
    KEYS_FILE_ENV,
    KeyConfigError,
    keys_from_env,
    new_key,
    parse_keys,
)
from persistence.telemetry import Telemetry, logformat, otlp
from persistence.telemetry.metrics import OtelMetrics, PrometheusMetrics, StoreGauges
from persistence.ui.views import relative_time
from persistence.web.access import check_bind
from persistence.web.runs import calls_of, failure_traceback
from persistence.worker import Worker, WorkerCrashed
from statecharts import Machine
from statecharts.errors import ContextError, StatechartError
from statecharts.events import normalize_event
from statecharts.frozen import storable_text, thaw
from statecharts.subcommands import run_one_tool
from statecharts.tracing import check_traceparent, valid_traceparent

STORE_ENV = "STATECHARTS_STORE"
API_TOKEN_ENV = "STATECHARTS_API_TOKEN"
DEFAULT_API_PORT = 8322
EXTRAS = {
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "hypothesis": "testing",
    "fastapi": "ui",
    "starlette": "ui",
    "uvicorn": "ui",
    "jinja2": "ui",
    "multipart": "ui",
    "pydantic": "ui",
    "yaml": "yaml",
}
"""Top-level modules of the optional dependencies, and the extra that installs each."""


def missing_extra(exc: ModuleNotFoundError, needed_for: str) -> SystemExit | None:
    """The one-line error for a missing optional dependency (with the `pip install` line that
    adds it), or None when the missing module is not one of the extras'."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return SystemExit(
        f"{needed_for} needs the '{extra}' extra ({top} is not installed): "
        f"pip install 'statecharts[{extra}]'"
    )


def _imported(option: str, spec: str) -> tuple[Any, str]:
    """(module, attribute or "") named by `module[:attribute]`, or exit naming the option."""
    module_name, _, attribute = spec.partition(":")
    try:
        return importlib.import_module(module_name), attribute
    except ModuleNotFoundError as exc:
        raise (
            missing_extra(exc, f"{option} {spec}")
            or SystemExit(f"{option} {spec}: cannot import {module_name!r}: {exc}")
        ) from exc
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
            raise SystemExit(
                f"--schedules {spec}: expected ScheduledStart objects (or a "
                "function of the runtime returning them)"
            )
        found.extend(starts)
    return found


def load_limits(spec: str | None) -> dict[str, Any]:
    """The load-control settings of module `spec` as `Runtime` keywords: its `LIMITS` (limit
    name -> `Limit`), and optionally `WORKFLOW_LIMITS` (workflow -> limit name) and
    `PRIORITIES` (workflow -> default priority)."""
    if spec is None:
        return {}
    module, _ = _imported("--limits", spec)
    if not isinstance(getattr(module, "LIMITS", None), Mapping):
        raise SystemExit(
            f"--limits {spec}: {module.__name__} has no LIMITS mapping (limit name -> Limit)"
        )
    found = {"limits": module.LIMITS}
    for attribute, keyword in (
        ("WORKFLOW_LIMITS", "workflow_limits"),
        ("PRIORITIES", "priorities"),
    ):
        if hasattr(module, attribute):
            found[keyword] = getattr(module, attribute)
    return found


def _store(
    args: argparse.Namespace,
    *,
    check: bool = True,
    connections: int = 4,
    create: bool = False,
    show_sealed: bool = False,
) -> Store:
    """The store of `--store`/$STATECHARTS_STORE. Unless `create`, a SQLite file that does not
    exist is an error (reading never creates a database); an unreachable PostgreSQL is one
    line with the cause, after at most a few seconds. Its payloads are sealed and opened with
    the keys of `--keys-file`/$STATECHARTS_KEYS_FILE/$STATECHARTS_KEYS, if any; with
    `show_sealed` (commands that only show runs), one whose key is missing shows as such."""
    try:
        ring = keys_from_env(getattr(args, "keys_file", None))
    except KeyConfigError as exc:
        raise SystemExit(f"keys: {exc}") from exc
    url = args.store or os.environ.get(STORE_ENV)
    if not url:
        raise SystemExit(f"give --store URL or set {STORE_ENV}")
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite" and not create:
        path = url.split("://", 1)[1].split("?", 1)[0]
        path = path[1:] if path.startswith("/") else path
        if path and not Path(path).exists():
            raise SystemExit(
                f"store: no database at {path}; create it with "
                f"`statecharts db upgrade --store {url}`"
            )
    try:
        if scheme in ("postgresql", "postgres"):
            _reach_postgres(url)
        store = open_store(url, check=check, max_connections=connections)
    except ModuleNotFoundError as exc:
        raise (missing_extra(exc, "a PostgreSQL store") or exc) from exc
    except StoreError as exc:
        raise SystemExit(f"store: {exc}") from exc
    vars(args).setdefault(_OPENED, []).append(store)
    store.use_codec(ring, show_sealed=show_sealed)
    return store


_OPENED = "opened_stores"


def _closing_stores(
    handler: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """`handler`, closing every store it opened (`_store`) when it returns or raises: a command
    run in-process (`main([...])`, the tests) leaves no connection pool behind, whose worker
    threads would otherwise be joined by the garbage collector from one of their own."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        finally:
            for store in vars(args).pop(_OPENED, ()):
                store.close()

    return run


def _reach_postgres(url: str, timeout_s: int = 5) -> None:
    """Connect once, directly, so that an unreachable server is reported with its cause at
    once (a connection pool would retry quietly until its timeout)."""
    import psycopg

    parts = urlsplit(url)
    dsn = split_postgres_url(url)[0]
    try:
        psycopg.connect(dsn, connect_timeout=timeout_s).close()
    except psycopg.Error as exc:
        cause = " ".join(str(exc).split())
        where = parts.hostname or "localhost"
        raise SystemExit(
            f"store: cannot reach PostgreSQL at {where}:{parts.port or 5432}: {cause}"
        ) from None


def resolve_run(store: Store, given: str) -> RunRecord:
    """The run whose id is `given` or starts with it (a unique prefix, as git takes)."""
    try:
        return store.get_run(given)
    except StoreError:
        pass
    if not re.fullmatch(r"[0-9a-fA-F-]{4,}", given):
        raise SystemExit(f"no run with id {given!r} (a prefix needs at least 4 hex digits)")
    found = store.search_runs(RunQuery(id_prefix=given.lower()), limit=2)
    if not found:
        raise SystemExit(f"no run with id {given!r} or an id starting with it")
    if len(found) > 1:
        raise SystemExit(
            f"run id prefix {given!r} is ambiguous ({found[0].id}, {found[1].id}, "
            "...): give more of it"
        )
    return found[0]


def _json_arg(option: str, text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise SystemExit(f"{option}: not JSON ({exc}): {text[:60]!r}") from exc


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        help=f"store URL (default: ${STORE_ENV}), e.g. sqlite:///runs.db or postgresql://host/db",
    )
    add_keys_file(parser)


def add_keys_file(parser: argparse.ArgumentParser) -> None:
    """The `--keys-file` option of a command that opens a store."""
    parser.add_argument(
        "--keys-file",
        metavar="PATH",
        help=f"payload encryption keys, one id:base64key per line, the first "
        f"current (default: ${KEYS_FILE_ENV}, else ${KEYS_ENV}); without "
        "keys payloads are written in clear",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `worker`, `runs`, `schedules`, `db` and `api` to a CLI's subcommands."""
    _register_worker(subparsers)
    _register_runs(subparsers)
    _register_schedules(subparsers)
    _register_db(subparsers)
    _register_api(subparsers)


def _register_worker(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`worker`: step the runs of the given machines."""
    worker = subparsers.add_parser(
        "worker",
        help="run durable workflows until SIGTERM",
        description="Step the runs of the given machines: claim runs with work due, call the "
        "invoked functions, fire durable timers, apply retry policies and circuit "
        "breakers, start error workflows. Run as many workers as you like against "
        "one store; SIGTERM or Ctrl-C finishes the steps in progress and exits.",
    )
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
    worker.add_argument(
        "--limits",
        default=None,
        metavar="MODULE",
        help="named limits of the invokes' `limit` keys: MODULE's LIMITS "
        "(name -> Limit), and its WORKFLOW_LIMITS and PRIORITIES if "
        "present; every worker of a fleet should load the same",
    )
    worker.add_argument(
        "--concurrency", type=int, default=1, help="threads stepping runs at once (default 1)"
    )
    worker.add_argument(
        "--batch",
        type=int,
        default=16,
        help="runs each thread steps together: their calls run at once and their "
        "steps commit in one transaction per round (default 16)",
    )
    worker.add_argument(
        "--lease-ms",
        type=int,
        default=30_000,
        help="how long a claimed run stays this worker's without a heartbeat; "
        "after a crash another worker takes it over then (default 30000)",
    )
    worker.add_argument(
        "--poll-ms",
        type=int,
        default=200,
        help="how often an idle worker looks for due work (default 200)",
    )
    worker.add_argument(
        "--stuck-after-ms",
        type=int,
        default=3_600_000,
        help="log active runs that have not changed for this long and have "
        "nothing due (default 3600000, one hour)",
    )
    worker.add_argument(
        "--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)"
    )
    worker.add_argument(
        "--log-format",
        choices=logformat.FORMATS,
        default="text",
        help="text (default) or json: one JSON object per line, operator events "
        "with run_id, workflow, key, state and trace_id fields",
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics "
        "(needs prometheus-client: the `metrics` extra)",
    )
    worker.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the metrics server listens on (default 127.0.0.1)",
    )
    worker.add_argument(
        "--metrics-refresh-s",
        type=float,
        default=15.0,
        help="read the store's gauges (runs by status, stuck runs, breakers) "
        "at most this often (default 15)",
    )
    _add_otlp(worker)
    worker.add_argument(
        "--dry-run",
        action="store_true",
        help="record external effects as skipped ('dry-run') instead of "
        "running them; every store write happens as in production",
    )
    _add_retention_options(worker)
    worker.set_defaults(handler=_closing_stores(_worker))


def _register_runs(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs` and its subcommands."""
    runs = subparsers.add_parser(
        "runs",
        help="inspect and cancel runs",
        description="List runs, show one run with its journal and "
        "effects, cancel a run, or find runs the loaded "
        "definitions can no longer step.",
    )
    actions = runs.add_subparsers(dest="runs_command", required=True)
    _register_start(actions)
    _register_send(actions)
    _register_list(actions)
    _register_show(actions)
    _register_cancel(actions)
    _register_resume(actions)
    _register_wait(actions)
    _register_versions(actions)
    _register_purge(actions)
    _register_fork(actions)
    _register_reset(actions)


def _register_start(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs start`: start a run, idempotent by key."""
    start = actions.add_parser(
        "start",
        help="start a run (idempotent by --key)",
        description="Start a run of workflow NAME. With --key the key is the run's handle: if a "
        "run of NAME with that key exists (active or ended) it is printed and "
        "nothing is started, unless --reuse says otherwise.",
    )
    _add_store(start)
    start.add_argument("name", metavar="NAME", help="the workflow (machine id)")
    start.add_argument(
        "--machines",
        action="append",
        required=True,
        metavar="MODULE",
        help="module (or module:attr) defining the machines; repeatable",
    )
    start.add_argument("--key", help="the run's business key (order id, charge id, ...)")
    start.add_argument("--input", default=None, metavar="JSON", help="the run's input, as JSON")
    start.add_argument(
        "--reuse",
        default="use_existing",
        choices=("use_existing", "allow_duplicate", "reject_active"),
        help="when the key's run exists: return it (default), start anew once it "
        "has ended (allow_duplicate), or refuse while it is active "
        "(reject_active)",
    )
    _add_otlp(start)
    start.add_argument(
        "--traceparent",
        default=None,
        metavar="HEADER",
        help="the W3C traceparent the run's trace continues (default: "
        "$TRACEPARENT when it holds a valid one), as the HTTP API takes "
        "the request's traceparent header",
    )
    start.set_defaults(handler=_closing_stores(_runs_start))


def _register_send(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs send`: queue an event for a run."""
    send = actions.add_parser(
        "send",
        help="queue an event for a run, by id (or prefix) or by workflow and key",
        description="Queue an event for a run; a worker applies it. Address the run by its id "
        "(a unique prefix will do) or by --workflow and --key. An event no state "
        "of the run's machine (from --machines) accepts is refused, as the HTTP "
        "ingress refuses it.",
    )
    _add_store(send)
    send.add_argument(
        "--machines",
        action="append",
        required=True,
        metavar="MODULE",
        help="module (or module:attr) defining the machines; repeatable",
    )
    send.add_argument("run_id", nargs="?", metavar="RUN", help="the run's id or a unique prefix")
    send.add_argument("--workflow", metavar="NAME", help="with --key: the run's workflow")
    send.add_argument("--key", help="with --workflow: the run's key")
    send.add_argument(
        "--event",
        required=True,
        metavar="JSON",
        help='the event, e.g. \'{"type": "APPROVE", "by": "ann"}\' or APPROVE',
    )
    lifecycle_cli.add_wait_option(send)
    send.set_defaults(handler=_closing_stores(_runs_send))


def _register_list(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs list`: runs, newest first."""
    listing = actions.add_parser(
        "list",
        help="runs, newest first",
        description="Runs, newest first, with their state and status.",
    )
    _add_store(listing)
    listing.add_argument(
        "--status", help="only runs with this status (active, done, done_partial, error, cancelled)"
    )
    listing.add_argument(
        "--name", "--workflow", dest="name", help="only runs of this workflow (machine id)"
    )
    listing.add_argument("--key", help="only runs started with this key")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.add_argument(
        "--stuck-after-ms",
        type=int,
        default=None,
        help="only active runs not updated for this long",
    )
    listing.add_argument("--json", action="store_true", help="the runs as one JSON array")
    lifecycle_cli.add_where(listing)
    listing.set_defaults(handler=_closing_stores(_runs_list))


def _register_show(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs show`: one run with its effects and journal."""
    show = actions.add_parser(
        "show",
        help="one run with its effects and journal",
        description="One run: status, state, context, pending timers, "
        "its effects (outbox) and its journal of events.",
    )
    _add_store(show)
    show.add_argument("run_id", help="the run's id or a unique prefix (as runs list prints)")
    show.add_argument(
        "--last",
        type=int,
        default=None,
        metavar="N",
        help="only the newest N journal entries and outbox records "
        "(events_total says how many the journal has)",
    )
    show.set_defaults(handler=_closing_stores(_runs_show))


def _register_cancel(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs cancel`: cancel a run, or every run `--where` matches."""
    cancel = actions.add_parser(
        "cancel",
        help="cancel a run, or every run --where matches",
        description="Cancel a run: at once if no worker holds it, "
        "else at the worker's next step. With --where, "
        "every active run matching it, each journaled; "
        "prints each outcome and the counts.",
    )
    _add_store(cancel)
    cancel.add_argument("run_id", nargs="?", help="the run's id or a unique prefix")
    cancel.add_argument("--reason", help="recorded as the run's last error and in its journal")
    lifecycle_cli.add_bulk(cancel, "cancelled")
    cancel.set_defaults(handler=_closing_stores(_runs_cancel))


def _register_resume(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs resume`: a failed run active again where it failed."""
    resume = actions.add_parser(
        "resume",
        help="resume a failed run from the state it failed in (journaled)",
        description="Make a failed run (status error) active again in the state it failed "
        "in: the failed calls of its last step run again, with their idempotency "
        "keys, at a worker's next round. The resume is journaled.",
    )
    _add_store(resume)
    resume.add_argument("run_id", nargs="?", help="the failed run's id or a unique prefix")
    resume.add_argument(
        "--machines",
        action="append",
        required=True,
        metavar="MODULE",
        help="module (or module:attr) defining the machines; repeatable",
    )
    lifecycle_cli.add_bulk(resume, "resumed")
    resume.set_defaults(handler=_closing_stores(_runs_resume))


def _register_wait(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs wait`: wait for a run to end."""
    wait = lifecycle_cli.add_wait_command(actions)
    _add_store(wait)
    wait.set_defaults(handler=_closing_stores(_runs_wait))


def _register_versions(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs versions`: active runs the given machines cannot step."""
    versions = actions.add_parser(
        "versions",
        help="active runs that the given machines cannot step (definition changed)",
        description="Active runs whose definition fingerprint none of the given machines has: "
        "a worker with these machines would leave them alone.",
    )
    _add_store(versions)
    versions.add_argument(
        "--machines",
        action="append",
        required=True,
        metavar="MODULE",
        help="module (or module:attr) defining the machines; repeatable",
    )
    versions.set_defaults(handler=_closing_stores(_runs_versions))


def _register_schedules(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`schedules`: the scheduled starts the store knows."""
    listed = subparsers.add_parser(
        "schedules",
        help="scheduled starts: slots decided, last run, skipped slots",
        description="Every scheduled start the store knows (workers fire them with "
        "--schedules): up to which slot it decided, the run it started last, a "
        "slot held by the overlap policy buffer_one, and its skipped slots (how "
        "many in all, the latest with their reason).",
    )
    _add_store(listed)
    listed.add_argument("--json", action="store_true", help="print JSON instead of text")
    listed.set_defaults(handler=_closing_stores(_schedules))


def _register_db(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`db` and its subcommands."""
    db = subparsers.add_parser(
        "db", help="database schema", description="Manage the run store's schema."
    )
    db_actions = db.add_subparsers(dest="db_command", required=True)
    _register_upgrade(db_actions)
    _register_reencrypt(db_actions)
    _register_new_key(db_actions)


def _register_upgrade(db_actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`db upgrade`: apply missing schema migrations."""
    upgrade = db_actions.add_parser(
        "upgrade",
        help="apply missing schema migrations",
        description="Apply the schema migrations the store does not have yet (safe to run again).",
    )
    _add_store(upgrade)
    upgrade.set_defaults(handler=_closing_stores(_db_upgrade))


def _register_reencrypt(db_actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`db reencrypt`: payloads under the current key."""
    reencrypt = db_actions.add_parser(
        "reencrypt",
        help="rewrite stored payloads under the current encryption key",
        description="Rewrite every payload sealed with an older key of the ring (or written in "
        "clear) under the current key (the first), BATCH rows per transaction; "
        "afterwards the older keys can be removed. Safe while workers run.",
    )
    _add_store(reencrypt)
    reencrypt.add_argument(
        "--batch", type=int, default=500, help="rows per transaction (default 500)"
    )
    reencrypt.set_defaults(handler=_closing_stores(_db_reencrypt))


def _register_new_key(db_actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`db new-key`: print a new encryption key."""
    keygen = db_actions.add_parser(
        "new-key",
        help="print a new random encryption key as ID:BASE64KEY",
        description="Print a new random AES-256 key as one line ID:BASE64KEY, for the keys "
        f"file or ${KEYS_ENV} (put it first to make it current).",
    )
    keygen.add_argument("--id", default="k1", help="the key's id (default k1)")
    keygen.set_defaults(handler=_db_new_key)


def _register_api(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`api`: serve the webhook ingress."""
    api = subparsers.add_parser(
        "api",
        help="serve the webhook ingress: start runs and send events over HTTP",
        description="Serve the webhook ingress (persistence.ingress): POST starts runs "
        "idempotently by key and queues events by key or run id; workers apply "
        f"them. Beyond 127.0.0.1 set {API_TOKEN_ENV}; every request must then "
        "carry it as a bearer token. OpenAPI document at /docs and /openapi.json.",
    )
    _add_store(api)
    api.add_argument(
        "--machines",
        action="append",
        required=True,
        metavar="MODULE",
        help="module (or module:attr) defining the workflows; repeatable",
    )
    api.add_argument(
        "--host",
        default="127.0.0.1",
        help=f"address to listen on (default 127.0.0.1; others need {API_TOKEN_ENV})",
    )
    api.add_argument(
        "--port",
        type=int,
        default=DEFAULT_API_PORT,
        help=f"port to listen on (default {DEFAULT_API_PORT})",
    )
    api.add_argument(
        "--signature",
        action="append",
        default=[],
        metavar="WORKFLOW=[PROVIDER:]ENV_VAR[@HEADER]",
        help="require WORKFLOW's requests to be signed with the secret in ENV_VAR: "
        "as PROVIDER signs them (github, stripe, slack or standard: Standard "
        "Webhooks; with a replay window of 300 s and events deduplicated by "
        "the provider's delivery id), or else as sha256=<hex HMAC of the "
        "body> in HEADER (default X-Signature-256). Once one is given, "
        "unsigned requests and reads need "
        f"{API_TOKEN_ENV} unless --allow-unsigned; repeatable",
    )
    api.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="with --signature, still take unsigned starts, events and reads of "
        "the other workflows without the token (not behind a public "
        "address)",
    )
    api.add_argument(
        "--max-body",
        type=int,
        default=1_048_576,
        help="largest request body in bytes (default 1048576)",
    )
    api.add_argument(
        "--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)"
    )
    _add_otlp(api)
    api.set_defaults(handler=_closing_stores(_api))


def _add_otlp(parser: argparse.ArgumentParser) -> None:
    """`--otlp`: the worker's, the API's and `runs start`'s way to export their spans."""
    parser.add_argument(
        "--otlp",
        action="store_true",
        help="export traces and metrics over OTLP/HTTP as the standard "
        "OTEL_EXPORTER_OTLP_* variables say (needs opentelemetry-sdk and "
        "opentelemetry-exporter-otlp-proto-http)",
    )


def _worker(args: argparse.Namespace) -> int:
    logformat.configure(args.log_level, args.log_format)
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1`: every thread's stack on stderr (a stuck worker)
        show_stacks_on(signal.SIGUSR1)
    shutdown_otlp = otlp.configure() if args.otlp else None
    store = _store(args, connections=args.concurrency + 3)
    try:
        runtime = Runtime(
            store,
            load_machines(args.machines),
            dry_run=args.dry_run,
            **load_limits(args.limits),
            **_retention(args),
        )
    except ValueError as exc:  # a retention naming no workflow here, or no duration
        raise SystemExit(f"worker: {exc}") from exc
    server = _serve_metrics(args, runtime)
    try:
        Worker(
            runtime,
            args.concurrency,
            batch=args.batch,
            lease_ms=args.lease_ms,
            poll_ms=args.poll_ms,
            stuck_after_ms=args.stuck_after_ms,
            schedules=load_schedules(args.schedules, runtime),
        ).run()
    except WorkerCrashed as exc:
        logging.getLogger("statecharts.worker").critical("%s; exiting with status 70", exc)
        return 70  # EX_SOFTWARE: a supervisor restarts the worker
    finally:
        if server is not None:
            server.shutdown()
        if shutdown_otlp is not None:
            shutdown_otlp()  # flush the spans and metrics still queued
    return 0


def _serve_metrics(args: argparse.Namespace, runtime: Runtime) -> Any:
    """The runtime's telemetry with the metrics asked for; the Prometheus server, if any."""
    sinks: list[Any] = []
    gauges = StoreGauges(
        runtime, every_s=args.metrics_refresh_s, stuck_after_ms=args.stuck_after_ms
    )
    server = None
    if args.metrics_port is not None:
        try:
            prometheus = PrometheusMetrics(gauges=gauges)
        except ImportError as exc:
            raise SystemExit(f"--metrics-port: {exc}") from exc
        server, _ = prometheus.serve(args.metrics_port, args.metrics_host)
        logging.getLogger("statecharts.worker").info(
            "metrics on http://%s:%d/metrics", args.metrics_host, server.server_port
        )
        sinks.append(prometheus)
    if args.otlp:
        sinks.append(OtelMetrics(gauges=gauges))
    if sinks:
        runtime.telemetry = Telemetry(metrics=sinks)
    return server


def _row(run: RunRecord) -> dict[str, Any]:
    data = structs.asdict(run)
    del data["snapshot"], data["previous_owner"], data["due_at"]
    return data


def _error_note(run: RunRecord) -> str:
    """`last_error=` for an error that is what is wrong with the run now; `earlier_error=` for
    one it went on after (a finished or healthy run keeps the column)."""
    if not run.last_error:
        return ""
    current = error_is_current(run.status, run.state)
    return f"  {'last_error' if current else 'earlier_error'}={run.last_error}"


def _runs_list(args: argparse.Namespace) -> int:
    store = _store(args, show_sealed=True)
    now = store.clock().now()
    if args.stuck_after_ms is not None:
        runs = store.stuck_runs(now, args.stuck_after_ms, args.limit)
    elif args.where:
        query = dataclasses.replace(
            lifecycle_cli.where_query(args, args.name, args.status), key=args.key
        )
        runs = store.search_runs(query, limit=args.limit)
    elif args.key is not None:
        query = RunQuery(workflow_name=args.name, status=args.status, key=args.key)
        runs = store.search_runs(query, limit=args.limit)
    else:
        runs = store.list_runs(status=args.status, workflow_name=args.name, limit=args.limit)
    if args.json:
        sys.stdout.write(orjson.dumps([_row(r) for r in runs]).decode() + "\n")
        return 0
    table = [("ID", "WORKFLOW", "KEY", "STATUS", "STATE", "STARTED", "UPDATED")] + [
        (
            r.id,
            r.workflow_name,
            r.key or "",
            r.status,
            r.state,
            relative_time(r.created_at, now),
            relative_time(r.updated_at, now),
        )
        for r in runs
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row, run in zip(table, [None, *runs], strict=True):
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
        notes = (
            ""
            if run is None
            else (
                _error_note(run)
                + (f"  problem={run.problem}" if run.problem else "")
                + (
                    f"  waiting_for={run.waiting_for}"
                    if run.waiting_for and not run.terminal
                    else ""
                )
            )
        )
        print(f"{line}  {row[-1]}{notes}")
    if not runs:
        print("(no runs)", file=sys.stderr)
    return 0


def _runs_start(args: argparse.Namespace) -> int:
    runtime = Runtime(_store(args), load_machines(args.machines))
    given = None if args.input is None else _json_arg("--input", args.input)
    reuse: KeyReuse = args.reuse
    try:
        traceparent = (
            check_traceparent(args.traceparent, "--traceparent")
            if args.traceparent is not None
            else valid_traceparent(os.environ.get("TRACEPARENT"))
        )
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    shutdown_otlp = otlp.configure() if args.otlp else None
    try:
        run, created = runtime.start_run(
            args.name, given, args.key, reuse=reuse, traceparent=traceparent
        )
    except (UnknownWorkflowError, StatechartError, StoreEncodingError, ValueError) as exc:
        # the input, key or name is at fault: one line saying what, not a traceback
        raise SystemExit(f"runs start {args.name}: {str(exc).strip(chr(34))}") from exc
    finally:
        if shutdown_otlp is not None:
            shutdown_otlp()  # the start span, exported before the command exits
    print(f"{run.id}  {'started' if created else 'existing'}  {run.status}  {run.state}")
    return 0


def _runs_send(args: argparse.Namespace) -> int:
    by_key = args.workflow is not None or args.key is not None
    if by_key == (args.run_id is not None) or (by_key and None in (args.workflow, args.key)):
        raise SystemExit("runs send: give RUN, or both --workflow NAME and --key K")
    text = args.event.strip()
    given = text if re.fullmatch(r"[A-Za-z_][\w.-]*", text) else _json_arg("--event", text)
    store = _store(args)
    if by_key:
        found = store.search_runs(RunQuery(workflow_name=args.workflow, key=args.key), limit=1)
        if not found:
            raise SystemExit(f"no run of {args.workflow!r} with key {args.key!r}")
        run = found[0]
    else:
        run = resolve_run(store, args.run_id)
    try:
        event = thaw(normalize_event(given))
        refusal = Runtime(store, load_machines(args.machines)).refuses_event(run, event["type"])
        if refusal is not None:
            raise SystemExit(f"{run.id}: {refusal}; nothing queued")
        inbox_id = store.send_event(run.id, event, store.clock().now())
    except (StoreError, ContextError, TypeError, ValueError) as exc:
        raise SystemExit(f"{run.id}: {exc}") from exc
    if args.wait is not None:
        return lifecycle_cli.send_and_wait(store, run, inbox_id, args.wait)
    print(f"{run.id}  queued (inbox {inbox_id})")
    return 0


def _runs_show(args: argparse.Namespace) -> int:
    store = _store(args, show_sealed=True)
    run = resolve_run(store, args.run_id)
    if args.last is not None and args.last < 0:
        raise SystemExit(f"--last must be at least 0, got {args.last}")
    calls = calls_of(store, run.id)
    failure = failure_traceback(store, run, calls)
    data = {
        **_row(run),
        "error_traceback": None if failure is None else failure.text,
        "snapshot": run.snapshot,
        "search": store.search_attributes(run.id),
        "effects": [asdict(e) for e in store.list_effects(run.id, last=args.last)],
        "calls": [
            {**structs.asdict(c.call), "attempts": [asdict(a) for a in c.attempts]} for c in calls
        ],
        "events": [asdict(e) for e in store.list_events(run.id, last=args.last)],
        "events_total": store.count_events(run.id),
        "forked_from": asdict(fork) if (fork := store.fork_of(run.id)) is not None else None,
        "inbox": [structs.asdict(e) for e in store.pending_events(run.id)],
        "dead_letters": [asdict(d) for d in store.dead_letters(run.id)],
        "children": [
            {
                "id": c.id,
                "workflow_name": c.workflow_name,
                "invoke": c.parent_invoke_id,
                "key": c.key,
                "status": c.status,
                "state": c.state,
            }
            for c in store.search_runs(RunQuery(parent_run_id=run.id), limit=1000)
        ],
    }
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _one_or_where(args: argparse.Namespace, command: str) -> bool:
    """Whether `runs cancel|resume` acts on --where's matches (else on RUN); exits when it is
    given both or neither, or bulk options without --where."""
    if (args.run_id is None) == (not args.where):
        raise SystemExit(f"runs {command}: give RUN, or --where NAME=VALUE (not both)")
    if not args.where and (args.dry_run or args.workflow):
        raise SystemExit(f"runs {command}: --dry-run and --workflow go with --where")
    return bool(args.where)


def _runs_cancel(args: argparse.Namespace) -> int:
    store = _store(args)
    reason = None if args.reason is None else storable_text(args.reason)  # argv need not be UTF-8
    if _one_or_where(args, "cancel"):
        return lifecycle_cli.bulk_cancel(store, args, reason)
    run_id = resolve_run(store, args.run_id).id
    try:
        outcome = store.cancel_run(run_id, store.clock().now(), reason)
    except StoreError as exc:
        raise SystemExit(str(exc)) from exc
    print(f"{run_id}: {outcome}")
    return 0


def _runs_resume(args: argparse.Namespace) -> int:
    bulk = _one_or_where(args, "resume")
    runtime = Runtime(_store(args), load_machines(args.machines))
    if bulk:
        return lifecycle_cli.bulk_resume(runtime, args)
    try:
        run = runtime.resume(resolve_run(runtime.store, args.run_id).id)
    except (StoreError, NotResumableError) as exc:
        raise SystemExit(str(exc)) from exc
    print(f"{run.id}: resumed in state {run.state} (step {run.version})")
    return 0


def _runs_wait(args: argparse.Namespace) -> int:
    store = _store(args)
    return lifecycle_cli.wait_for_run(store, resolve_run(store, args.run_id), args.timeout)


def _runs_versions(args: argparse.Namespace) -> int:
    runtime = Runtime(_store(args), load_machines(args.machines))
    unknown = runtime.unknown_versions()
    for v in unknown:
        print(
            f"{v.workflow_name}  version {v.workflow_version}  label {v.label}  {v.runs} "
            "active run(s): no definition or migration in the given machines"
        )
    if not unknown:
        print("every active run has a definition or a migration here")
    return 1 if unknown else 0


def _add_retention_options(worker: argparse.ArgumentParser) -> None:
    """The worker's `--retention` and `--key-window` (docs/persistence.md, Run lifecycle)."""
    worker.add_argument(
        "--retention",
        action="append",
        default=[],
        metavar="WORKFLOW=AGE",
        help="purge WORKFLOW's runs that ended more than AGE ago (30d, 12h), a "
        "bounded batch every minute; overrides the definition's "
        "meta.retention; repeatable",
    )
    worker.add_argument(
        "--key-window",
        default=None,
        metavar="AGE",
        help="how long a purged run's key still answers 'already started' (default 7d)",
    )


def _retention(args: argparse.Namespace) -> dict[str, Any]:
    """`--retention` and `--key-window` as `Runtime` keywords."""
    found: dict[str, Any] = {}
    periods: dict[str, str] = {}
    for spec in args.retention:
        workflow, sep, age = spec.partition("=")
        if not sep or not workflow or not age:
            raise SystemExit(f"--retention {spec}: expected WORKFLOW=AGE, e.g. invoice=30d")
        periods[workflow] = age
    if periods:
        found["retention"] = periods
    if args.key_window is not None:
        found["key_window"] = args.key_window
    return found


def _register_purge(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs purge`: retention on demand."""
    purge = actions.add_parser(
        "purge",
        help="delete ended runs older than a duration (retention on demand)",
        description="Delete the runs that ended before the given age, with their journal, "
        "effects, inbox and dead letters, calls and deliveries, in batches of short "
        "transactions (safe while workers run). Never a run with a live parent or "
        "child, nor one with work left. A purged run's key keeps answering starts "
        "with the purged run's id for --keep-keys.",
    )
    _add_store(purge)
    purge.add_argument(
        "--ended-before",
        required=True,
        metavar="AGE",
        help="purge runs that ended more than AGE ago: 30d, 12h, 15m, 45s",
    )
    purge.add_argument("--workflow", metavar="NAME", help="only runs of this workflow")
    purge.add_argument(
        "--keep-keys",
        default="7d",
        metavar="AGE",
        help="how long a purged run's key still answers 'already started' "
        "(default 7d; 0s forgets keys with their runs)",
    )
    purge.add_argument(
        "--dry-run", action="store_true", help="count the runs it would purge; delete nothing"
    )
    purge.set_defaults(handler=_closing_stores(_runs_purge))


def _runs_purge(args: argparse.Namespace) -> int:
    try:
        age = duration_ms(args.ended_before, "--ended-before")
        window = duration_ms(args.keep_keys, "--keep-keys")
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    store = _store(args)
    now = store.clock().now()
    try:
        report = purge(
            store,
            now - age,
            now,
            workflow=args.workflow,
            key_window_ms=window or None,
            dry_run=args.dry_run,
        )
    except StoreError as exc:
        raise SystemExit(f"runs purge: {exc}") from exc
    scope = f" of {args.workflow}" if args.workflow else ""
    if report.dry_run:
        print(
            f"would purge {report.purged} run(s){scope} that ended over "
            f"{args.ended_before} ago (dry run: nothing deleted)"
        )
        return 0
    keys = sum(1 for r in report.runs if r.key is not None and r.parent_run_id is None)
    print(
        f"purged {report.purged} run(s){scope} that ended over {args.ended_before} ago"
        + (
            f"; {keys} key(s) answer 'already started' for {args.keep_keys}"
            if window and keys
            else ""
        )
        + ("; more are left: run it again" if report.more else "")
    )
    return 0


def _register_fork(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs fork`: a new run from a journal step of another."""
    fork = actions.add_parser(
        "fork",
        help="start a new run from the snapshot after a journal step of a run",
        description="Start a new run of the same workflow from RUN's snapshot after journal "
        "step N (as `runs show` lists the journal), linked to RUN: its calls in "
        "flight at that step run again and every later effect is recorded with the "
        "new run's idempotency keys. RUN is untouched. Refused when no definition "
        "in --machines restores that step.",
    )
    _add_step_arguments(fork, "the run's id or a unique prefix")


def _register_reset(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`runs reset`: a failed run back to an earlier journal step, in place."""
    reset = actions.add_parser(
        "reset",
        help="put a failed run back to the snapshot after an earlier journal step",
        description="Make a failed run (status error) active again from its snapshot after "
        "journal step N, in place: the journal is kept and the reset journaled, "
        "its open calls are stopped and those in flight at step N run again with "
        "new idempotency keys. Refused when no definition in --machines restores "
        "that step.",
    )
    _add_step_arguments(reset, "the failed run's id or a unique prefix")


def _add_step_arguments(parser: argparse.ArgumentParser, run_help: str) -> None:
    """What `runs fork` and `runs reset` take: a run, a journal step, the definitions."""
    _add_store(parser)
    parser.add_argument("run_id", metavar="RUN", help=run_help)
    parser.add_argument("--step", type=int, required=True, metavar="N", help="the journal step")
    parser.add_argument(
        "--machines",
        action="append",
        required=True,
        metavar="MODULE",
        help="module (or module:attr) defining the machines; repeatable",
    )
    parser.set_defaults(handler=_closing_stores(_runs_from_step))


def _runs_from_step(args: argparse.Namespace) -> int:
    """`runs fork` or `runs reset` (`args.runs_command`)."""
    runtime = Runtime(_store(args), load_machines(args.machines))
    source = resolve_run(runtime.store, args.run_id)
    try:
        if args.runs_command == "fork":
            run = runtime.fork(source.id, args.step)
            done = f"forked from {source.id} at step {args.step}"
        else:
            run = runtime.reset(source.id, args.step)
            done = f"reset to step {args.step} (now step {run.version})"
    except (StoreError, NotRestorableError) as exc:
        raise SystemExit(str(exc)) from exc
    print(f"{run.id}: {done}, in state {run.state}")
    return 0


def _schedules(args: argparse.Namespace) -> int:
    records = _store(args).list_schedules(limit=1000)
    if args.json:
        print(orjson.dumps([asdict(r) for r in records]).decode())
        return 0
    for r in records:
        buffered = f", slot {iso(r.buffered_at)} buffered" if r.buffered_at is not None else ""
        print(
            f"{r.name}: decided up to {iso(r.last_fire_at) if r.last_fire_at else '-'}, last "
            f"run {r.last_run_id or '-'}{buffered}, {r.skipped_count} slot(s) skipped"
        )
        for skip in r.skipped[-5:]:
            slots = (
                iso(skip["first"])
                if skip["count"] == 1
                else f"{iso(skip['first'])} .. {iso(skip['last'])}"
            )
            print(f"  skipped {skip['count']} slot(s) {slots}: {skip['reason']}")
    if not records:
        print("no schedule has decided a slot yet")
    return 0


def _db_upgrade(args: argparse.Namespace) -> int:
    store = _store(args, check=False, create=True)
    try:
        applied = store.migrate()
    except StoreError as exc:
        raise SystemExit(f"db upgrade: {exc}") from exc
    version = store.schema_version()
    print(
        f"applied migrations {applied}; schema at version {version}"
        if applied
        else f"schema already at version {version}"
    )
    return 0


def _db_reencrypt(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        report = store.reencrypt_payloads(args.batch)
    except (StoreError, KeyConfigError, ValueError) as exc:
        raise SystemExit(f"db reencrypt: {exc}") from exc
    print(
        f"rewritten {report.rewritten} payload(s) under the current key; "
        f"{report.changed} changed meanwhile (written by their run's step)"
    )
    for key_id, n in sorted(report.unreadable.items()):
        print(f"{n} payload(s) sealed with key {key_id!r} did not open; left as they are")
    for problem in report.problems:
        print(f"  {problem}")
    return 1 if report.unreadable or report.problems else 0


def _db_new_key(args: argparse.Namespace) -> int:
    line = f"{args.id}:{new_key()}"
    try:
        parse_keys(line, "--id")  # (the id checked as a ring checks it)
    except KeyConfigError as exc:
        raise SystemExit(f"db new-key: {exc}") from exc
    print(line)
    return 0


def _api(args: argparse.Namespace) -> int:
    try:
        from persistence.ingress import create_api
        from persistence.serving import serve
    except ModuleNotFoundError as exc:
        raise (missing_extra(exc, "statecharts api") or exc) from exc
    token = os.environ.get(API_TOKEN_ENV) or None
    check_bind(args.host, token, API_TOKEN_ENV)
    signatures = {spec.partition("=")[0]: _signature(spec) for spec in args.signature}
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    runtime = Runtime(_store(args), load_machines(args.machines))
    unknown = sorted(set(signatures) - set(runtime.machines))
    if unknown:
        raise SystemExit(f"--signature names workflows not among --machines: {unknown}")
    app = create_api(
        runtime,
        token=token,
        signatures=signatures,
        max_body=args.max_body,
        allow_unsigned=args.allow_unsigned,
    )
    logging.getLogger("statecharts.api").info(
        "serving http://%s:%d/api (%s%s%s)",
        args.host,
        args.port,
        ", ".join(runtime.machines),
        ", token required" if token else "",
        ", unsigned requests refused without the token"
        if signatures and not args.allow_unsigned
        else "",
    )
    shutdown_otlp = otlp.configure() if args.otlp else None
    try:
        serve(app, args.host, args.port, log_level=args.log_level.lower())
    finally:
        if shutdown_otlp is not None:
            shutdown_otlp()
    return 0


SIGNATURE_PROVIDERS = ("github", "stripe", "slack", "standard")


def _signature(spec: str) -> Signature:
    """`--signature WORKFLOW=[PROVIDER:]ENV_VAR[@HEADER]` as a `Signature`."""
    workflow, _, rest = spec.partition("=")
    provider, _, rest = rest.rpartition(":")
    variable, _, header = rest.partition("@")
    if (
        not workflow
        or not variable
        or (provider and provider not in SIGNATURE_PROVIDERS)
        or (provider and header)
    ):
        raise SystemExit(
            f"--signature {spec}: expected WORKFLOW=ENV_VAR[@HEADER] or "
            f"WORKFLOW=PROVIDER:ENV_VAR with PROVIDER one of "
            f"{', '.join(SIGNATURE_PROVIDERS)}"
        )
    secret = os.environ.get(variable)
    if not secret:
        raise SystemExit(f"--signature {spec}: ${variable} is not set")
    try:
        if provider:
            made: Signature = getattr(Signature, provider)(secret)
            return made
        return Signature(secret, header or "X-Signature-256")
    except ValueError as exc:
        raise SystemExit(f"--signature {spec}: {exc}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m persistence.cli ...`"""
    return run_one_tool(register, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
