"""XState v5 on Node.js as a benchmark subject (only where ``node`` and ``npm`` exist).

XState is npm-installed into a scratch folder (``benchmarks/.cache/node``, git-ignored, never
committed) on first use; ``xstate_bench.mjs`` is copied beside its ``node_modules`` (ES modules
resolve packages from the script's own folder) and fed the same configs, events and event counts
as the Python subjects on stdin.
"""

from __future__ import annotations

import json
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
            cwd=CACHE, capture_output=True, text=True, timeout=300, check=False,
        )
        if done.returncode != 0 or not pkg.exists():
            raise XStateUnavailable(f"npm install xstate@5 failed: {done.stderr.strip()[-300:]}")
    return str(json.loads(pkg.read_text())["version"])


def node_version() -> str:
    """``node --version`` output, e.g. ``v20.20.2``."""
    return subprocess.run(["node", "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()


def run_xstate(cases: list[dict[str, Any]], repeat: int, warmup: int) -> dict[str, dict[str, Any]]:
    """Run ``cases`` (see ``xstate_bench.mjs`` for the shape) in Node; results by case name."""
    ensure_xstate()
    script = CACHE / SCRIPT.name
    shutil.copyfile(SCRIPT, script)
    spec = {"repeat": repeat, "warmup": warmup, "cases": cases,
            "limits": {"counter": COUNTER_LIMIT, "shop": SHOP_LIMIT, "invoice": INVOICE_ATTEMPTS}}
    done = subprocess.run(["node", str(script)], input=json.dumps(spec), capture_output=True,
                          text=True, cwd=CACHE, timeout=1800, check=False)
    if done.returncode != 0:
        raise XStateUnavailable(f"xstate benchmark failed: {done.stderr.strip()[-500:]}")
    results = {}
    for line in done.stdout.splitlines():
        if line.strip():
            row = json.loads(line)
            results[row["name"]] = row
    return results
