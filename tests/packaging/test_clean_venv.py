"""The wheel in a fresh venv: the core with only its declared dependency, then each extra with
only what it declares, each doing what that extra is for."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.test_readme import readme_example
from tests.test_typed_config import FIXTURES, assert_names_each_mistake, mypy_strict

from .conftest import IN_VENV, STEP_TIMEOUT_S, USER_EXTRAS, Venv, clean_env, make_venv

pytestmark = pytest.mark.timeout(600)
MakeVenv = Callable[[str], Venv]


@pytest.fixture
def core(fresh_venv: MakeVenv) -> Venv:
    return fresh_venv("")


def test_the_core_installs_with_orjson_and_msgspec_alone(core: Venv) -> None:
    assert core.distributions() == {"statecharts", "orjson", "msgspec"}
    shown = core.pip("show", "statecharts")
    assert "License-Expression: MIT" in shown
    assert "Requires: msgspec, orjson" in shown
    missing = core.python_code("import machines")
    assert "ModuleNotFoundError: No module named 'machines'" in missing.stderr


def open_and_run(name: str) -> str:
    return f"import runpy; runpy.run_path({name!r}, run_name='__main__')"


def test_the_readme_example_runs_from_the_wheel(core: Venv) -> None:
    code, expected = readme_example()
    (core.workdir / "readme_example.py").write_text(code)
    result = core.python_code(open_and_run("readme_example.py"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == expected


def test_a_durable_run_on_sqlite_from_the_wheel(core: Venv) -> None:
    url = f"sqlite:///{core.workdir / 'runs.db'}"
    run_id = core.run("durable_run.py", url).strip()
    read_back = json.loads(core.run("durable_run.py", url, "--read", run_id))  # a new process
    assert read_back == {"status": "done", "output": {"charged": 42}}


def test_the_cli_validates_and_draws_without_any_extra(core: Venv) -> None:
    machine = core.workdir / "door.json"
    machine.write_text(
        json.dumps(
            {
                "id": "door",
                "initial": "closed",
                "states": {"closed": {"on": {"OPEN": "open"}}, "open": {"on": {"CLOSE": "closed"}}},
            }
        )
    )
    statecharts = str(core.script("statecharts"))
    ok = subprocess.run(
        [statecharts, "validate", str(machine)],
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        env=clean_env(),
        cwd=core.workdir,
    )
    assert ok.returncode == 0, ok.stderr
    mermaid = subprocess.run(
        [statecharts, "render", str(machine), "--format", "mermaid"],
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        env=clean_env(),
        cwd=core.workdir,
    )
    assert mermaid.returncode == 0 and "stateDiagram-v2" in mermaid.stdout, mermaid.stderr
    if shutil.which("dot") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("Graphviz's dot is missing (CI=true requires it)")
        pytest.skip("Graphviz's dot is not installed: SVG not checked")
    svg = subprocess.run(
        [statecharts, "render", str(machine), "--format", "svg"],
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
        env=clean_env(),
        cwd=core.workdir,
    )
    assert svg.returncode == 0 and "<svg" in svg.stdout, svg.stderr


def test_mypy_follows_the_wheel_and_names_the_typo(core: Venv) -> None:
    """The wheel's ``py.typed`` and config types, as a user's type checker sees them."""
    result, _ = mypy_strict(FIXTURES / "machine_ok.py", core.workdir, core.python)
    assert result.returncode == 0, result.stdout
    assert_names_each_mistake(
        *mypy_strict(FIXTURES / "machine_typos.py", core.workdir, core.python)
    )


# -- one test per extra --------------------------------------------------------------------


def test_yaml_extra(fresh_venv: MakeVenv) -> None:
    env = fresh_venv("yaml")
    assert env.distributions() == {"statecharts", "orjson", "msgspec", "pyyaml"}
    machine = env.workdir / "order.yaml"
    machine.write_text(
        "id: order\ninitial: cart\ncontext: {items: 0}\nstates:\n"
        "  cart:\n    on:\n      ADD:\n        actions: count\n"
        "      CHECKOUT: {guard: has_items, target: paid}\n"
        "  paid: {type: final}\n"
    )
    result = json.loads(env.run("yaml_machine.py", machine))
    assert result == {"value": "paid", "status": "done", "context": {"items": 1}}


def test_postgres_extra(fresh_venv: MakeVenv, pg_dsn: str, pg_schema: str) -> None:
    env = fresh_venv("postgres")
    assert {"psycopg", "psycopg-binary", "psycopg-pool"} <= env.distributions()
    separator = "&" if "?" in pg_dsn else "?"
    url = f"{pg_dsn}{separator}schema={pg_schema}"
    run_id = env.run("durable_run.py", url).strip()
    read_back = json.loads(env.run("durable_run.py", url, "--read", run_id))
    assert read_back == {"status": "done", "output": {"charged": 42}}
    impl = env.python_code("import psycopg; print(psycopg.pq.__impl__)")
    assert impl.stdout.strip() == "binary", impl.stderr  # psycopg[binary]: no libpq needed


def test_testing_extra(fresh_venv: MakeVenv) -> None:
    env = fresh_venv("testing")
    assert "hypothesis" in env.distributions()
    result = json.loads(env.run("testing_kit.py"))
    assert result == {"caught": True, "pytest_installed": False}


def test_the_tutorial_runs_with_exactly_the_extras_it_names(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """Issue 44: docs/tutorial.md's Python blocks, in a fresh venv holding the wheel with the
    extras the page tells a reader to install and nothing else (they missed httpx), print what
    the page shows and no warning (Starlette 1.2+ warns when its TestClient finds httpx
    without httpx2)."""
    from tests.docs.test_tutorial import TUTORIAL, python_steps

    text = TUTORIAL.read_text(encoding="utf-8")
    named = re.search(r"You need Python 3\.11\+ and `pip install 'statecharts\[([a-z,]+)\]'`", text)
    assert named is not None, "the tutorial says which extras to install"
    env = make_venv(tmp_path, f"statecharts[{named.group(1)}]", wheelhouse)
    steps = python_steps(text)
    (env.workdir / "blocks.json").write_text(json.dumps([code for code, _ in steps]))
    ran = json.loads(env.run("tutorial_blocks.py", env.workdir / "blocks.json"))
    for number, ((_, expected), got) in enumerate(zip(steps, ran["printed"], strict=True), 1):
        if expected is not None:
            assert got == expected, f"block {number} printed:\n{got}"
    assert ran["warnings"] == []


def test_interop_extra(fresh_venv: MakeVenv) -> None:
    env = fresh_venv("interop")
    assert "python-statemachine" in env.distributions()
    result = json.loads(env.run("interop_machine.py"))
    assert result == {"visited": [[["yellow"], "yellow"], [["red"], "red"]], "status": "done"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(
    port: int, method: str, path: str, body: str = "", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body or None, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


def _wait_until_serving(port: int, server: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"statecharts ui exited {server.returncode}: {server.communicate()}")
        try:
            _request(port, "GET", "/api/runs")
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail("statecharts ui did not answer within 60 s")


def test_ui_extra(fresh_venv: MakeVenv) -> None:
    """uvicorn serves the FastAPI app; a Jinja2 page; a form (python-multipart) acts."""
    env = fresh_venv("ui")
    assert {"fastapi", "uvicorn", "jinja2", "python-multipart"} <= env.distributions()
    url = f"sqlite:///{env.workdir / 'ui.db'}"
    run_id = env.run("ui_store.py", url).strip()
    port = _free_port()
    server = subprocess.Popen(
        [
            str(env.script("statecharts")),
            "ui",
            "--store",
            url,
            "--port",
            str(port),
            "--machines",
            "ui_store",
            "--log-level",
            "warning",
        ],
        cwd=env.workdir,
        env={**clean_env(), "PYTHONPATH": str(IN_VENV)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_until_serving(port, server)
        status, headers, page = _request(port, "GET", f"/runs/{run_id}")
        assert status == 200 and "Waiting" in page, page[:500]
        csrf = re.search(r"statecharts_csrf=([^;]+)", headers.get("set-cookie", ""))
        assert csrf is not None, headers
        form = urlencode({"csrf_token": csrf.group(1), "reason": "from the packaging test"})
        status, headers, _ = _request(
            port,
            "POST",
            f"/runs/{run_id}/cancel",
            form,
            {
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": f"statecharts_csrf={csrf.group(1)}",
            },
        )
        assert status == 303, headers
        status, _, body = _request(port, "GET", f"/api/runs/{run_id}")
        assert status == 200 and json.loads(body)["status"] == "cancelled", body
    finally:
        server.terminate()
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_otel_extra(fresh_venv: MakeVenv) -> None:
    env = fresh_venv("otel")
    assert "opentelemetry-api" in env.distributions()
    result = json.loads(env.run("otel_run.py", env.workdir / "runs.db", TRACEPARENT))
    # the API alone: spans are no-ops, the caller's trace context is still stored with the run
    assert result == {
        "available": True,
        "imported": True,
        "status": "done",
        "traceparent": TRACEPARENT,
    }


def test_without_otel_nothing_imports_it(core: Venv) -> None:
    result = json.loads(core.run("otel_run.py", core.workdir / "runs.db", TRACEPARENT))
    assert result == {
        "available": False,
        "imported": False,
        "status": "done",
        "traceparent": TRACEPARENT,
    }


def test_metrics_extra(fresh_venv: MakeVenv) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    env = fresh_venv("metrics")
    assert "prometheus-client" in env.distributions()
    text = env.run("metrics_text.py", env.workdir / "runs.db")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert (
        samples[("statecharts_runs_finished_total", (("outcome", "done"), ("workflow", "hello")))]
        == 1
    )
    assert samples[("statecharts_runs", (("status", "done"), ("workflow", "hello")))] == 1


def test_crypto_extra(fresh_venv: MakeVenv) -> None:
    env = fresh_venv("crypto")
    assert "cryptography" in env.distributions()
    result = json.loads(env.run("crypto_run.py", env.workdir / "runs.db"))
    assert result == {
        "status": "done",
        "output": {"last4": "1111"},
        "secret_stored": False,
        "in_clear_found": True,
    }


EXTRA_TESTS = {
    "yaml": test_yaml_extra,
    "postgres": test_postgres_extra,
    "testing": test_testing_extra,
    "interop": test_interop_extra,
    "ui": test_ui_extra,
    "otel": test_otel_extra,
    "metrics": test_metrics_extra,
    "crypto": test_crypto_extra,
}


def test_every_extra_has_its_test() -> None:
    assert sorted(EXTRA_TESTS) == USER_EXTRAS
