"""The W3C SCXML conformance suite, run against this reader (and python-statemachine's own
SCXML processor, in the same run, for comparison).

    python -m statecharts.io.scxml.conformance [--cache DIR] [--group mandatory|optional]

The suite, instantiated for a Python datamodel, ships in python-statemachine's source
distribution; it is fetched with ``pip download`` into a cache folder (``.cache/scxml`` by
default, never committed) and read from there. A test passes when the machine reaches the
state ``pass``. Documents are loaded untrusted (restricted evaluator) unless they contain
``<script>``, which needs ``trusted=True``. The exit status is non-zero when a result differs
from ``expected_failures.py`` (an unexpected failure, or a listed test that now passes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tarfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...actor import create_actor, wait_for
from ...clock import SimulatedClock
from .errors import ScxmlWarning
from .expected_failures import EXPECTED_FAILURES
from .loader import load_scxml

PACKAGE = "python-statemachine"
VERSION = "3.2.2"
GROUPS = ("mandatory", "optional")
SUITE_PATH = f"python_statemachine-{VERSION}/tests/scxml/w3c"
DEFAULT_CACHE = Path(".cache") / "scxml"
SIMULATED_LIMIT_MS = 600_000
"""Simulated time a test may take (the suite's longest timer is a few seconds)."""


@dataclass(frozen=True)
class Result:
    """One test: ``name`` is ``group/testNNN``; ``detail`` says why it failed."""

    name: str
    passed: bool
    detail: str = ""
    trusted: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        """``mandatory`` or ``optional``."""
        return self.name.split("/")[0]


class SuiteUnavailable(RuntimeError):
    """pip could not fetch the suite (no network, no PyPI)."""


def ensure_suite(cache: Path = DEFAULT_CACHE) -> Path:
    """The suite folder (``.../tests/scxml/w3c``), downloading it with pip if not cached."""
    suite = cache / SUITE_PATH
    if suite.is_dir():
        return suite
    cache.mkdir(parents=True, exist_ok=True)
    (cache / ".gitignore").write_text("*\n")
    archive = cache / f"python_statemachine-{VERSION}.tar.gz"
    if not archive.is_file():
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-binary",  # (the package alone: `:all:` would build its build tools from source
            PACKAGE,  # too, minutes on a machine without pip's cache)
            "--no-deps",
            f"{PACKAGE}=={VERSION}",
            "-d",
            str(cache),
            "-q",
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not archive.is_file():
            raise SuiteUnavailable(
                f"pip download {PACKAGE}=={VERSION} failed: "
                f"{(done.stderr or done.stdout).strip()[-500:]}"
            )
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(SUITE_PATH + "/")]
        tar.extractall(cache, members=members, filter="data")
    return suite


def test_files(suite: Path, groups: tuple[str, ...] = GROUPS) -> list[Path]:
    """The test documents of ``groups`` (helper documents ``*sub*`` excluded), sorted."""
    return [
        path
        for group in groups
        for path in sorted((suite / group).glob("*.scxml"))
        if "sub" not in path.name
    ]


def run_test(path: Path) -> Result:
    """Load and run one test on a simulated clock until it stops or time runs out."""
    name = f"{path.parent.name}/{path.stem}"
    trusted = "<script" in path.read_text(encoding="utf-8")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ScxmlWarning)
            machine = load_scxml(path, trusted=trusted)
        said = tuple(str(w.message) for w in caught if issubclass(w.category, ScxmlWarning))
        actor = create_actor(machine, clock=SimulatedClock())
        actor.start()
        with contextlib.suppress(TimeoutError):
            wait_for(actor, lambda s: s.status != "active", timeout=SIMULATED_LIMIT_MS)
        snapshot = actor.get_snapshot()
    except Exception as exc:  # a test that cannot even run is a failure with its reason
        return Result(name, False, f"{type(exc).__name__}: {exc}", trusted)
    if "pass" in snapshot.configuration.ids:
        return Result(name, True, "", trusted, said)
    return Result(name, False, f"ended in {snapshot.value} ({snapshot.status})", trusted, said)


def run_suite(suite: Path, groups: tuple[str, ...] = GROUPS) -> list[Result]:
    """Every test of ``groups``."""
    logging.getLogger("statecharts").setLevel(logging.ERROR)
    return [run_test(path) for path in test_files(suite, groups)]


# -- python-statemachine's own processor ----------------------------------------------------


def baseline(suite: Path, groups: tuple[str, ...]) -> dict[str, bool] | str:
    """python-statemachine's results on the same files ({name: passed}), run in a subprocess
    (its processor uses threads and real time), or why they are not available."""
    command = [
        sys.executable,
        "-m",
        "statecharts.io.scxml.conformance",
        "--baseline-worker",
        str(suite),
        "--group",
        *groups,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _baseline_worker(suite: Path, groups: tuple[str, ...]) -> None:
    try:
        from statemachine.io import load
    except ImportError:
        sys.exit(f"{PACKAGE} is not installed (pip install 'statecharts[interop]')")
    logging.disable(logging.CRITICAL)
    results: dict[str, bool] = {}
    for path in test_files(suite, groups):
        results[f"{path.parent.name}/{path.stem}"] = _baseline_one(load, path)
    print(json.dumps(results))


def _baseline_one(load: Any, path: Path) -> bool:
    # the same steps as python-statemachine's own harness (tests/scxml/_harness.py)
    try:
        machine = load(path, trusted=True)()
        deadline = time.monotonic() + 5.0
        while not machine.is_terminated and time.monotonic() < deadline:
            time.sleep(0.02)
            machine._engine.processing_loop()
        return "pass" in {s.id for s in machine.configuration}
    except Exception:
        return False


# -- the report -----------------------------------------------------------------------------


def unexpected(results: list[Result]) -> tuple[list[Result], list[Result]]:
    """(failures not listed in EXPECTED_FAILURES, listed tests that passed)."""
    failed = [r for r in results if not r.passed and r.name not in EXPECTED_FAILURES]
    fixed = [r for r in results if r.passed and r.name in EXPECTED_FAILURES]
    return failed, fixed


def report(results: list[Result], theirs: dict[str, bool] | str) -> str:
    """The score table by group, the expected failures with reasons, and any surprise."""
    groups = [g for g in GROUPS if any(r.group == g for r in results)]
    lines = [
        f"W3C SCXML conformance: the suite from {PACKAGE} {VERSION} (Python datamodel)",
        "",
        f"{'group':<11}{'tests':>6}{'statecharts':>13}{PACKAGE + ' ' + VERSION:>28}",
    ]
    total = [0, 0, 0]
    for group in [*groups, "total"]:
        mine = [r for r in results if group in (r.group, "total")]
        other = "-"
        if isinstance(theirs, dict):
            their_passed = sum(1 for r in mine if theirs.get(r.name))
            other = f"{their_passed}/{len(mine)}"
            if group != "total":
                total[2] += their_passed
        passed = sum(r.passed for r in mine)
        lines.append(f"{group:<11}{len(mine):>6}{f'{passed}/{len(mine)}':>13}{other:>28}")
    if not isinstance(theirs, dict):
        lines += [
            "",
            f"{PACKAGE} could not be run here ({theirs}); its published score is "
            "155/160 mandatory and 17/33 optional: the tests outside the xfail list in "
            "its tests/scxml/conftest.py",
        ]
    trusted = [r.name for r in results if r.trusted]
    lines += [
        "",
        f"Loaded trusted (they contain <script>): {', '.join(trusted) or 'none'}; "
        "every other document ran under the restricted evaluator.",
        "",
    ]
    warned = [(r.name, w) for r in results for w in r.warnings]
    if warned:
        lines.append("Loaded with warnings (invalid invoked documents, see docs/scxml.md):")
        lines += [f"  {name:<20} {text}" for name, text in warned]
        lines.append("")
    lines.append("Expected failures (statecharts/io/scxml/expected_failures.py):")
    names = {r.name for r in results}
    for name, reason in EXPECTED_FAILURES.items():
        if name in names:
            lines.append(f"  {name:<20} {reason}")
    failed, fixed = unexpected(results)
    lines.append("")
    for result in failed:
        lines.append(f"UNEXPECTED FAILURE {result.name}: {result.detail}")
    for result in fixed:
        lines.append(f"UNEXPECTED PASS {result.name}: remove it from expected_failures.py")
    if not failed and not fixed:
        lines.append("Every result is as expected.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Fetch the suite if needed, run it, print the report; 1 on any unexpected result."""
    parser = argparse.ArgumentParser(
        prog="python -m statecharts.io.scxml.conformance", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="where pip puts the suite (default .cache/scxml)",
    )
    parser.add_argument("--group", nargs="+", choices=GROUPS, default=list(GROUPS))
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help=f"do not run {PACKAGE}'s processor for comparison",
    )
    parser.add_argument("--baseline-worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    groups = tuple(args.group)
    if args.baseline_worker is not None:
        _baseline_worker(args.baseline_worker, groups)
        return 0
    try:
        suite = ensure_suite(args.cache)
    except SuiteUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    results = run_suite(suite, groups)
    theirs = "skipped (--no-baseline)" if args.no_baseline else baseline(suite, groups)
    print(report(results, theirs))
    failed, fixed = unexpected(results)
    return 1 if failed or fixed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
