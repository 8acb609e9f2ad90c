"""XState v5 on Node.js as a benchmark subject (only where ``node`` and ``npm`` exist).

XState is npm-installed into a scratch folder (``benchmarks/.cache/node``, git-ignored, never
committed) on first use; ``xstate_bench.mjs`` is copied beside its ``node_modules`` (ES modules
resolve packages from the script's own folder) and fed the same configs, events and event counts
as the Python subjects on stdin. One Node process lives through a benchmark run and runs a case
when asked, so that each XState run is timed right beside the Python run it is compared with.
"""

from __future__ import annotations

import json
import selectors
import shutil
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.charts import COUNTER_LIMIT, INVOICE_ATTEMPTS, SHOP_LIMIT

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache" / "node"
SCRIPT = HERE / "xstate_bench.mjs"


class XStateUnavailable(RuntimeError):
    """Node.js or npm is missing, or XState could not be installed."""


def ensure_xstate() -> str:
    """Install ``xstate@5`` into the scratch folder if needed; return its version."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise XStateUnavailable("node/npm not on PATH")
    pkg = CACHE / "node_modules" / "xstate" / "package.json"
    if not pkg.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        (CACHE / "package.json").write_text('{"private": true, "type": "module"}\n')
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", "xstate@5"],
            cwd=CACHE,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0 or not pkg.exists():
            raise XStateUnavailable(f"npm install xstate@5 failed: {done.stderr.strip()[-300:]}")
    return str(json.loads(pkg.read_text())["version"])


def node_version() -> str:
    """``node --version`` output, e.g. ``v20.20.2``."""
    return subprocess.run(
        ["node", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()


REPLY_TIMEOUT = 600.0  # seconds for one warm-up or one run: a stuck Node process fails the run


class XStateProcess:
    """A Node process holding every case built and warmed up (``xstate_bench.mjs``): ``rate``
    runs one case once and returns its events/s. Use as a context manager."""

    def __init__(self, cases: list[dict[str, Any]], warmup: int) -> None:
        ensure_xstate()
        script = CACHE / SCRIPT.name
        shutil.copyfile(SCRIPT, script)
        spec = {
            "warmup": warmup,
            "cases": cases,
            "limits": {"counter": COUNTER_LIMIT, "shop": SHOP_LIMIT, "invoice": INVOICE_ATTEMPTS},
        }
        self._node = subprocess.Popen(
            ["node", str(script)],
            cwd=CACHE,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            self._request(spec)
        except BaseException:  # (a failed warm-up: no context manager will close it)
            self.close()
            raise

    def rate(self, case: str) -> float:
        """Run ``case`` once (its ``n`` events, final state checked); events/s."""
        return float(self._request({"run": case})["rate"])

    def close(self) -> None:
        """End the Node process (its stdin closed; killed if it does not exit), its pipes
        closed."""
        if self._node.stdin:
            self._node.stdin.close()
        try:
            self._node.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._node.kill()
            self._node.wait()
        for pipe in (self._node.stdout, self._node.stderr):
            if pipe:
                pipe.close()

    def __enter__(self) -> XStateProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self._node.stdin is not None and self._node.stdout is not None
        self._node.stdin.write(json.dumps(message) + "\n")
        self._node.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(self._node.stdout, selectors.EVENT_READ)
            if not selector.select(REPLY_TIMEOUT):
                self._node.kill()
                raise XStateUnavailable(f"xstate benchmark: no answer in {REPLY_TIMEOUT:.0f}s")
        line = self._node.stdout.readline()
        if not line:
            self._node.wait()
            stderr = self._node.stderr.read() if self._node.stderr else ""
            raise XStateUnavailable(f"xstate benchmark failed: {stderr.strip()[-500:]}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise XStateUnavailable(f"xstate benchmark failed: {reply['error']}")
        return reply
