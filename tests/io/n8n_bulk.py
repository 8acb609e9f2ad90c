"""The faithfulness check over whole collections of n8n exports, kept outside the repository.

    python -m tests.io.n8n_bulk DIR [DIR ...] [--seeds N]     (or: make n8n-faithful DIRS=...)

Every ``*.json`` under the folders is imported and, when it imports, run against the n8n
execution model (``n8n_oracle``) with stubs from ``N`` seeds. Prints the refusals (with their
reasons), each disagreement (warned: a warning or decision of the import names the node
where the runs part; silent: nothing does), then the counts. Exit status 1 when any
disagreement is silent.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from statecharts.io.n8n import N8nFormatError, from_n8n
from tests.io.n8n_oracle import compare


def check(paths: list[Path], seeds: int) -> tuple[int, list[str], list[str], list[str]]:
    """(imported, refused, warned disagreements, silent disagreements) over ``paths``."""
    imported, refused, warned, silent = 0, [], [], []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            result = from_n8n(data, "w")
        except (N8nFormatError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            refused.append(f"{path}: {exc}")
            continue
        imported += 1
        problems = [p for seed in range(seeds) for p in compare(data, result, seed)]
        if not problems:
            continue
        nodes = re.findall(r"'([^']+)'", problems[0])
        said = " ".join((*result.warnings, *result.decisions))
        line = f"{path}: {problems[0]}"
        (warned if any(f"'{n}'" in said for n in nodes) else silent).append(line)
    return imported, refused, warned, silent


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check and print the counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="folders of n8n exports")
    parser.add_argument("--seeds", type=int, default=2, help="stub seeds per workflow")
    args = parser.parse_args(argv)
    paths = sorted(p for folder in args.folders for p in folder.rglob("*.json"))
    if not paths:
        print("error: no *.json files under " + ", ".join(map(str, args.folders)),
              file=sys.stderr)
        return 2
    imported, refused, warned, silent = check(paths, args.seeds)
    for title, lines in (("refused", refused), ("disagreeing (warned)", warned),
                         ("disagreeing (SILENT)", silent)):
        if lines:
            print(f"{title}:")
            print("\n".join(f"  {line}" for line in lines))
    print(f"{len(paths)} exports: {imported} imported, {len(refused)} refused, "
          f"{len(warned) + len(silent)} disagreeing ({len(silent)} silent) "
          f"over {args.seeds} seed(s) each")
    return 1 if silent else 0


if __name__ == "__main__":
    sys.exit(main())
