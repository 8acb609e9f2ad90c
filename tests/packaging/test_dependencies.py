"""Every dependency pyproject.toml declares has a user: the code or tool that needs it and the
test that runs that code. A dependency nobody uses (as ``graphviz`` once was: rendering runs
the ``dot`` program itself) fails here, and so does a new one added without its user."""

from __future__ import annotations

import re
import tomllib

import pytest

from .conftest import PYPROJECT, ROOT

USERS: dict[str, list[tuple[str, str]]] = {
    # requirement: [(file, text in it that uses the requirement), ...] -- all must hold
    "orjson": [
        ("statecharts/snapshot.py", "import orjson"),
        ("tests/packaging/test_clean_venv.py", '{"statecharts", "orjson", "msgspec"}'),
    ],
    "msgspec": [
        ("statecharts/snapshot.py", "class Snapshot(msgspec.Struct"),
        ("tests/packaging/test_clean_venv.py", '{"statecharts", "orjson", "msgspec"}'),
    ],
    "PyYAML": [
        ("statecharts/loading.py", "import yaml"),
        ("tests/packaging/test_clean_venv.py", "def test_yaml_extra"),
    ],
    "psycopg": [
        ("persistence/stores/postgres.py", "import psycopg"),
        ("tests/packaging/test_clean_venv.py", "psycopg.pq.__impl__"),
    ],
    "psycopg-pool": [
        ("persistence/stores/postgres.py", "import psycopg_pool"),
        ("tests/packaging/test_clean_venv.py", "def test_postgres_extra"),
    ],
    "hypothesis": [
        ("statecharts/testing/hypothesis_api.py", "from hypothesis import"),
        ("tests/packaging/test_clean_venv.py", "def test_testing_extra"),
    ],
    "python-statemachine": [
        ("tests/testing/test_interop.py", "from statemachine import"),
        ("tests/packaging/in_venv/interop_machine.py", "from statemachine import"),
    ],
    "fastapi": [
        ("persistence/ui/app.py", "from fastapi import"),
        ("tests/packaging/test_clean_venv.py", "def test_ui_extra"),
    ],
    "uvicorn": [
        ("persistence/serving.py", "import uvicorn"),
        (
            "tests/packaging/test_clean_venv.py",
            'str(env.script("statecharts")),\n            "ui",',
        ),
    ],
    "jinja2": [
        ("persistence/ui/site.py", "from jinja2 import"),
        ("tests/packaging/test_clean_venv.py", '"GET", f"/runs/{run_id}"'),
    ],
    "httpx": [
        ("docs/tutorial.md", "from fastapi.testclient import TestClient"),
        ("tests/packaging/test_clean_venv.py", "def test_the_tutorial_runs_with_exactly"),
    ],
    "httpx2": [  # Starlette 1.2+'s TestClient; with only httpx there, it warns
        ("docs/tutorial.md", "from fastapi.testclient import TestClient"),
        ("tests/packaging/test_clean_venv.py", 'assert ran["warnings"] == []'),
    ],
    "python-multipart": [
        ("persistence/ui/actions.py", "Form()"),
        ("tests/packaging/test_clean_venv.py", "application/x-www-form"),
    ],
    "opentelemetry-api": [
        ("statecharts/tracing.py", "from opentelemetry import trace as"),
        ("tests/telemetry/test_inspector.py", "tracing_inspector(provider"),
    ],
    "prometheus-client": [
        ("persistence/telemetry/metrics.py", "import prometheus_client"),
        ("tests/telemetry/test_metrics_scrape.py", "text_string_to_metric"),
    ],
    "opentelemetry-sdk": [
        ("persistence/telemetry/otlp.py", "from opentelemetry.sdk.trace"),
        ("tests/telemetry/test_durable_trace.py", "InMemorySpanExporter"),
    ],
    "opentelemetry-exporter-otlp-proto-http": [
        ("persistence/telemetry/otlp.py", "from opentelemetry.exporter.otlp.proto.http"),
        ("tests/telemetry/test_durable_trace.py", '"--otlp"'),
    ],
    "cryptography": [
        ("persistence/stores/codec.py", "from cryptography.hazmat.primitives"),
        ("tests/packaging/test_clean_venv.py", "def test_crypto_extra"),
    ],
    # dev: the checkout's own tools, installed by `make` and used by the suite itself
    "playwright": [("tests/ui/browser.py", "from playwright.sync_api import")],
    "pytest": [("tests/test_quality.py", "import pytest")],
    "pytest-timeout": [
        ("pyproject.toml", "\ntimeout = "),
        ("tests/packaging/test_clean_venv.py", "pytest.mark.timeout("),
    ],
    "pytest-xdist": [
        ("Makefile", "-n auto --maxprocesses 4 --dist loadfile"),
        ("tests/conftest.py", "from xdist.scheduler import LoadFileScheduling"),
    ],
    "ruff": [("tests/test_quality.py", '_tool("ruff")')],
    "mypy": [
        ("tests/test_quality.py", '_tool("mypy")'),
        ("tests/test_typed_config.py", '"--strict"'),
    ],
    "types-PyYAML": [("statecharts/loading.py", "import yaml")],  # mypy reads the stubs
    "build": [("tests/packaging/conftest.py", '"-m", "build"')],
    "mkdocs": [("tests/docs/test_site.py", '"build", "--strict"')],
    "mkdocs-material": [
        ("mkdocs.yml", "name: material"),
        ("tests/docs/test_site.py", 'importlib.import_module("material")'),
    ],
    "mkdocstrings": [
        ("mkdocs.yml", "- mkdocstrings:"),
        ("tests/docs/test_site.py", "mkdocstrings_handlers.python"),
    ],
}


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None
    return match.group(0)


def declared() -> set[str]:
    names = {_name(r) for r in PYPROJECT["dependencies"]}
    for requirements in PYPROJECT["optional-dependencies"].values():
        names |= {_name(r) for r in requirements if not r.startswith("statecharts[")}
    return names


def test_every_declared_dependency_has_a_user_listed() -> None:
    assert set(USERS) == declared()


@pytest.mark.parametrize("requirement", sorted(USERS))
def test_the_listed_user_uses_it(requirement: str) -> None:
    for path, text in USERS[requirement]:
        assert text in (ROOT / path).read_text(), f"{requirement}: {path} no longer has {text!r}"


def test_mypy_reads_the_yaml_stubs_instead_of_ignoring_yaml() -> None:
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    ignored = {m for o in overrides if o.get("ignore_missing_imports") for m in o["module"]}
    assert not {"yaml", "yaml.*"} & ignored
