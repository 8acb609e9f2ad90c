"""Real processes for the end-to-end tests: the UI served by uvicorn (`statecharts ui`, through
`python -m persistence.ui.cli`) and a worker (`python -m persistence.cli worker`), on a free
localhost port, with their output kept for failure messages."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MACHINES = "tests.ui.demo"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """A running UI server."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        """What the server wrote so far (stdout and stderr)."""
        return self.log.read_text(errors="replace")


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STATECHARTS_UI_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra or {})
    return env


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@contextmanager
def ui_server(
    store_url: str, workdir: Path, *args: str, token: str | None = None, host: str = "127.0.0.1"
) -> Iterator[Served]:
    """`statecharts ui` on a free port; yields once it answers HTTP."""
    port = free_port()
    log = workdir / f"ui-{port}.log"
    command = [
        sys.executable,
        "-m",
        "persistence.ui.cli",
        "ui",
        "--store",
        store_url,
        "--host",
        host,
        "--port",
        str(port),
        "--machines",
        MACHINES,
        "--stuck-after-ms",
        "3600000",
        *args,
    ]
    with log.open("wb") as out:
        env = _env({"STATECHARTS_UI_TOKEN": token} if token else None)
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    served = Served(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_until_up(served)
        yield served
    finally:
        _stop(process)


def _wait_until_up(served: Served, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            raise RuntimeError(
                f"the UI server exited ({served.process.returncode}):\n{served.output()}"
            )
        try:
            with urllib.request.urlopen(served.url + "/static/ui.css", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError(f"the UI server did not answer within {timeout_s}s:\n{served.output()}")


@contextmanager
def worker(store_url: str, workdir: Path, extra: Sequence[str] = ()) -> Iterator[Path]:
    """A worker process stepping runs of the demo workflows; yields its log's path."""
    log = workdir / "worker.log"
    command = [
        sys.executable,
        "-m",
        "persistence.cli",
        "worker",
        "--store",
        store_url,
        "--machines",
        MACHINES,
        "--poll-ms",
        "50",
        *extra,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=_env(None)
        )
    try:
        yield log
    finally:
        _stop(process)
