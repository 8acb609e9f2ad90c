"""The faithfulness check over whole collections of n8n exports, kept outside the repository.

    python -m tests.io.n8n_bulk DIR [DIR ...] [--seeds N] [--timeout S] [--jobs J]
    (or: make n8n-faithful DIRS=...)

Every ``*.json`` under the folders is checked in a process of its own (killed after
``--timeout`` seconds: a hang), in both of n8n's execution orders (the export's
``settings.executionOrder`` set to ``v1``, then removed: the legacy order): it is imported,
run against the independent n8n model (``n8n_oracle``) with stubs from ``N`` seeds, and
imported again the way ``statecharts n8n import`` does it, diagrams drawn (Graphviz, with its
fallbacks). Prints the refusals grouped by reason, each disagreement (warned: a warning or
decision of the import names the node where the runs part; silent: nothing does), each
crash (an exception other than a refusal, or a dead process), each hang and each diagram
drawn the simpler way or not at all, then the counts. Exit status 1 on any silent
disagreement, crash or hang.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr
from io import StringIO
from pathlib import Path
from typing import Any

ORDERS = ("v1", "legacy")


def with_order(data: Any, order: str) -> Any:
    """``data`` with ``settings.executionOrder`` set to ``v1`` or removed (legacy)."""
    if not isinstance(data, dict):
        return data
    settings = (
        dict(data.get("settings") or {})
        if isinstance(data.get("settings"), dict | type(None))
        else {}
    )
    settings.pop("executionOrder", None)
    if order == "v1":
        settings["executionOrder"] = "v1"
    return {**data, "settings": settings}


def check_one(path: Path, seeds: int) -> dict[str, Any]:
    """Everything about one export, in this process: per order the refusal, the first
    disagreement with the oracle and the drawing notes; a crash raises."""
    from statecharts.io.n8n import N8nFormatError, from_n8n
    from statecharts.io.n8n.cli import ImportFailed, import_file
    from tests.io.n8n_oracle import compare

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return {"refused": f"not JSON: {exc}"}
    found: dict[str, Any] = {"orders": {}}
    for order in ORDERS:
        data = with_order(raw, order)
        try:
            result = from_n8n(data, "w")
        except N8nFormatError as exc:
            found["refused"] = str(exc)
            return found
        problems = [p for seed in range(seeds) for p in compare(data, result, seed)]
        said = " ".join((*result.warnings, *result.decisions))
        entry: dict[str, Any] = {}
        if problems:
            nodes = re.findall(r"'([^']+)'", problems[0])
            entry["disagreement"] = problems[0]
            entry["warned"] = any(f"'{n}'" in said for n in nodes)
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / "workflow.json"
            source.write_text(json.dumps(data), encoding="utf-8")
            notes = StringIO()
            try:
                with redirect_stderr(notes):
                    written = import_file(source, Path(folder) / "out", "w")
            except ImportFailed as exc:
                entry["draw"] = f"import failed: {exc}"
            else:
                entry["drawn"] = sorted(p.name for p in written if p.suffix == ".svg")
                warnings = [
                    line for line in notes.getvalue().splitlines() if line.startswith("warning:")
                ]
                if warnings:
                    entry["draw"] = " | ".join(warnings)
        found["orders"][order] = entry
    return found


def _child(path: str, seeds: int) -> int:
    """``--one PATH``: print one JSON line (a crash as ``{"crash": traceback}``)."""
    try:
        found = check_one(Path(path), seeds)
    except Exception:  # a crash is what this tool counts, whatever it is
        found = {"crash": traceback.format_exc(limit=6)}
    print(json.dumps(found))
    return 0


def run_isolated(path: Path, seeds: int, timeout: float) -> dict[str, Any]:
    """``check_one`` in a process of its own: a hang past ``timeout`` seconds or a dead
    process is reported, never waited for."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.io.n8n_bulk", "--one", str(path), "--seeds", str(seeds)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"hang": f"still running after {timeout:g} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-3:]
        return {"crash": f"process exited {done.returncode}: " + " / ".join(tail)}
    return dict(json.loads(lines[-1]))


def reason(message: str) -> str:
    """A refusal's reason, without the names, paths and numbers of the one export."""
    text = (
        message.split(": ", 1)[-1]
        if message.startswith(("nodes", "connections", "settings"))
        else message
    )
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "…", text)
    return re.sub(r"\d+", "N", text)


def main(argv: Sequence[str] | None = None) -> int:
    """Check the folders and print what was found."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path, help="folders of n8n exports")
    parser.add_argument("--seeds", type=int, default=3, help="stub seeds per workflow")
    parser.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        help="seconds one export may take (both orders, drawing included)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="exports checked at once")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        return _child(args.one, args.seeds)
    paths = sorted(p for folder in args.folders for p in folder.rglob("*.json"))
    if not paths:
        print("error: no *.json files under " + ", ".join(map(str, args.folders)), file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda p: run_isolated(p, args.seeds, args.timeout), paths))
    sections: dict[str, list[str]] = {
        "refused": [],
        "disagreeing (warned)": [],
        "disagreeing (SILENT)": [],
        "crashed": [],
        "hung": [],
        "drawn the simpler way or not at all": [],
    }
    reasons: Counter[str] = Counter()
    imported: Counter[str] = Counter()
    for path, found in zip(paths, results, strict=True):
        if "crash" in found or "hang" in found:
            key = "crashed" if "crash" in found else "hung"
            sections[key].append(f"{path}: {found.get('crash') or found.get('hang')}")
            continue
        if "refused" in found:
            sections["refused"].append(f"{path}: {found['refused']}")
            reasons[reason(found["refused"])] += 1
            continue
        for order, entry in found["orders"].items():
            imported[order] += 1
            if "disagreement" in entry:
                key = "disagreeing (warned)" if entry["warned"] else "disagreeing (SILENT)"
                sections[key].append(f"{path} [{order}]: {entry['disagreement']}")
            if "draw" in entry:
                sections["drawn the simpler way or not at all"].append(
                    f"{path} [{order}]: {entry['draw']}"
                )
    for title, lines in sections.items():
        if lines:
            print(f"{title}:")
            print("\n".join(f"  {line}" for line in lines))
    if reasons:
        print("refusals by reason:")
        print("\n".join(f"  {count} x {text}" for text, count in reasons.most_common()))
    counts = {title: len(lines) for title, lines in sections.items()}
    print(
        f"{len(paths)} exports, {args.seeds} seed(s), both orders: imported "
        f"{imported['v1']} (v1) and {imported['legacy']} (legacy), {counts['refused']} "
        f"refused, {counts['disagreeing (warned)'] + counts['disagreeing (SILENT)']} "
        f"disagreeing ({counts['disagreeing (SILENT)']} silent), {counts['crashed']} "
        f"crashed, {counts['hung']} hung, "
        f"{counts['drawn the simpler way or not at all']} diagrams drawn the simpler way "
        "or not at all"
    )
    bad = counts["disagreeing (SILENT)"] + counts["crashed"] + counts["hung"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
