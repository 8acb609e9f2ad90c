"""`statecharts ui --store URL [--host 127.0.0.1] [--port 8321] [--read-only] [--machines M]`:
serve the operator's web UI with uvicorn.

It listens on 127.0.0.1 unless told otherwise; any other address needs an access token in
STATECHARTS_UI_TOKEN, which every request must then carry. `register(subparsers)` adds the
command to the `statecharts` CLI; `python -m persistence.ui.cli` runs it on its own.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from persistence.cli import STORE_ENV, add_keys_file, load_machines
from persistence.stores import StoreError, open_store
from persistence.stores.codec import KeyConfigError, keys_from_env
from persistence.web.access import check_bind
from statecharts.subcommands import run_one_tool

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8321
TOKEN_ENV = "STATECHARTS_UI_TOKEN"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `ui` to a CLI's subcommands."""
    ui = subparsers.add_parser(
        "ui",
        help="serve the operator's web UI (runs, diagrams, actions)",
        description=f"Serve the operator's web UI. Beyond 127.0.0.1 set {TOKEN_ENV}.",
    )
    ui.add_argument("--store", help=f"store URL (default: ${STORE_ENV}), e.g. sqlite:///runs.db")
    add_keys_file(ui)
    ui.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; others need {TOKEN_ENV})",
    )
    ui.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})"
    )
    ui.add_argument("--read-only", action="store_true", help="show runs, offer no actions")
    ui.add_argument(
        "--machines",
        action="append",
        default=[],
        metavar="MODULE",
        help="module (or module:attr) defining the workflows, for diagrams and actions; repeatable",
    )
    ui.add_argument(
        "--stuck-after-ms",
        type=int,
        default=3_600_000,
        help="an active run not updated for this long is shown as stuck",
    )
    ui.add_argument(
        "--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)"
    )
    ui.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        from persistence.serving import serve
        from persistence.ui.app import create_app
    except ImportError as exc:
        raise SystemExit(
            f"the web UI needs the 'ui' extra ({exc.name} is missing): "
            "pip install 'statecharts[ui]'"
        ) from exc
    token = os.environ.get(TOKEN_ENV) or None
    check_bind(args.host, token, TOKEN_ENV)
    url = args.store or os.environ.get(STORE_ENV)
    if not url:
        raise SystemExit(f"give --store URL or set {STORE_ENV}")
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        ring = keys_from_env(args.keys_file)
        store = open_store(url)
    except KeyConfigError as exc:
        raise SystemExit(f"keys: {exc}") from exc
    except StoreError as exc:
        raise SystemExit(f"store: {exc}") from exc
    store.use_codec(ring, show_sealed=True)  # (a payload without its key shows as encrypted)
    machines = load_machines(args.machines) if args.machines else []
    app = create_app(
        store, machines, read_only=args.read_only, token=token, stuck_after_ms=args.stuck_after_ms
    )
    logging.getLogger("statecharts.ui").info(
        "serving http://%s:%d/ (%s%s)",
        args.host,
        args.port,
        "read-only" if args.read_only else "actions on",
        ", token required" if token else "",
    )
    try:
        serve(app, args.host, args.port, log_level=args.log_level.lower())
    finally:
        store.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m persistence.ui.cli ...` (the `ui` command on its own)."""
    return run_one_tool(register, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
