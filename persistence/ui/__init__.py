"""The operator's web UI over a run store: runs list, run pages with the diagram, workflow heat
maps, actions (send, retry now, cancel) and a JSON API. Needs the `ui` extra (FastAPI, uvicorn,
Jinja2); `statecharts ui --store URL` serves it (see `persistence.ui.cli`).

`create_app` is imported on first use, so the CLI can register the `ui` command (and explain
what to install) without the extra installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from persistence.ui.app import create_app

        return create_app
    raise AttributeError(f"module 'persistence.ui' has no attribute {name!r}")
