"""The operator's web UI over a run store: runs list, run pages with the diagram, workflow heat
maps, actions (send, retry now, cancel) and a JSON API. Needs the `ui` extra (FastAPI, uvicorn,
Jinja2); `statecharts ui --store URL` serves it (see `persistence.ui.cli`)."""

from __future__ import annotations

from persistence.ui.app import create_app

__all__ = ["create_app"]
