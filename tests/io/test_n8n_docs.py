"""docs/n8n.md stays true: its walkthrough matches what the import makes of the corpus file,
and its corpus totals match the summary."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from statecharts.io.n8n import from_n8n
from statecharts.io.n8n.validation import build_machines
from tests.io.n8n_corpus import CORPUS, MISSING, corpus_data, corpus_files, corpus_path, imported

DOC = Path(__file__).resolve().parents[2] / "docs" / "n8n.md"
WALKTHROUGH = "enescingoz__Other_Integrations"


def _section(title: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(title)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _column(table_text: str, column: int) -> list[str]:
    rows = [line for line in table_text.splitlines() if line.startswith("| ")]
    return [row.split(" | ")[column].strip("| `") for row in rows[1:]]


def test_before_lists_the_workflows_nodes() -> None:
    before = _section("### Before: the canvas")
    table = before[before.index("| # |") : before.index("\n\nWires")]
    nodes = [
        n["name"]
        for n in corpus_data(WALKTHROUGH)["nodes"]
        if n["type"] != "n8n-nodes-base.stickyNote"
    ]
    assert _column(table, 1) == nodes


def test_walkthrough_hidden_states_and_counts_match_the_import() -> None:
    result = imported(WALKTHROUGH)
    walk = _section("### The walk")
    assert (
        f"become **{result.state_count} states, {len(result.hidden_states)} of them "
        "hidden**" in walk
    )
    table = walk[walk.index("| hidden state |") :]
    assert _column(table, 0) == [h.state for h in result.hidden_states]
    assert _column(table, 1) == [h.kind for h in result.hidden_states]


@pytest.mark.skipif(not corpus_files(), reason=MISSING)
def test_corpus_totals_in_the_doc_match_the_corpus() -> None:
    results = [from_n8n(corpus_data(p.name[:-5]), "w") for p in corpus_files()]
    kinds = _section("## Hidden-state kinds")
    numbers = re.search(r"counts (\d+) nodes becoming\s+(\d+) states, (\d+) of them hidden", kinds)
    assert numbers is not None, f"no totals sentence in {DOC} (corpus at {CORPUS})"
    assert int(numbers[1]) == sum(r.node_count for r in results)
    assert int(numbers[2]) == sum(r.state_count for r in results)
    assert int(numbers[3]) == sum(len(r.hidden_states) for r in results)
    assert f"and {sum(r.error_machine is not None for r in results)} error machines" in kinds


@pytest.mark.skipif(
    importlib.util.find_spec("statecharts.render") is None,
    reason="statecharts.render (the diagram renderer) is not here",
)
def test_the_after_diagram_is_the_renderers_current_output() -> None:
    render = importlib.import_module("statecharts.render")
    result = from_n8n(corpus_data(WALKTHROUGH), "resilient_rest_api_sync")
    machine, _ = build_machines(result)
    after = _section("### After: the statechart")
    shown = after[after.index("```mermaid\n") + 11 : after.index("```\n\nThe config")]
    assert shown == render.to_mermaid(machine).rstrip("\n") + "\n", (
        "docs/n8n.md shows an old diagram: paste the .mmd written by `statecharts n8n "
        f"import {corpus_path(WALKTHROUGH)} -o OUT --name resilient_rest_api_sync`"
    )


def test_the_node_output_table_is_the_importers_table() -> None:
    from statecharts.io.n8n.outputs import OUTPUT_TABLE

    section = _section("### Node outputs")
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]
    assert rows == ["| " + " | ".join(row) + " |" for row in OUTPUT_TABLE]


def test_the_docs_warning_example_is_what_the_import_says() -> None:
    data = corpus_data("zie619__N8ntrainingcustomermessenger_0230")
    index = next(i for i, n in enumerate(data["nodes"]) if n["name"] == "Wait for time interval")
    data["nodes"][index]["parameters"]["amount"] = "soon"
    [warning] = [w for w in from_n8n(data, "w").warnings if "soon" in w]
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    assert warning.replace(f"nodes[{index}]", "nodes[9]") in text


def test_the_durable_run_recipe_runs_as_written(tmp_path: Path) -> None:
    # before: `runs send` without --machines stopped with a usage error, the nodes were left
    # to write with no word on what a run does meanwhile, and the worker's line never returned
    import json
    import os
    import shlex
    import subprocess
    import sys
    import time

    section = _section("### Running it durably")
    blocks = re.findall(r"```(\w+)\n(.*?)```\n", section, flags=re.S)
    shell = [
        shlex.split(line, comments=True)
        for kind, text in blocks
        if kind == "sh"
        for line in text.splitlines()
    ]
    [code] = [text for kind, text in blocks if kind == "python"]
    (tmp_path / "workflow.json").write_text(json.dumps(corpus_data(WALKTHROUGH)))
    env = {k: v for k, v in os.environ.items() if k != "STATECHARTS_STORE"}
    cwd, worker, listed = tmp_path, None, ""

    def statecharts(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "statecharts.cli", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    try:
        for words in shell:
            if words[:1] == ["make"]:
                continue  # this checkout's venv runs the commands
            if words[:1] == ["export"]:
                name, _, value = words[1].partition("=")
                env[name] = value.replace("$PWD", str(cwd))
            elif words[:1] == ["cd"]:
                cwd = cwd / words[1]
            elif words[:1] == ["kill"]:
                assert worker is not None
                worker.terminate()
                assert worker.wait(timeout=60) == 0
            elif words[-1] == "&":
                worker = subprocess.Popen(
                    [sys.executable, "-m", "statecharts.cli", *words[1:-1]],
                    cwd=cwd,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            elif words[1:3] == ["runs", "list"]:
                for _ in range(240):  # "after a moment": the worker's first step
                    listed = statecharts(words[1:]).stdout
                    if " done " in listed:
                        break
                    time.sleep(0.25)
            else:
                done = statecharts(words[1:])
                assert done.returncode == 0, (words, done.stderr)
                if words[1:3] == ["n8n", "import"]:  # the user writes the nodes, as shown
                    impl = cwd / "flows" / "rest_sync_impl.py"
                    text = impl.read_text()
                    for function in code.strip().split("\n\n\n"):
                        name = re.match(r"def (\w+)", function)
                        assert name is not None and f"def {name[1]}(" in text
                        text = re.sub(
                            rf"def {name[1]}\(.*?(?=\n\n\n)",
                            lambda _, f=function: f.strip(),
                            text,
                            flags=re.S,
                        )
                    assert "NotImplementedError(" not in text
                    impl.write_text(text)
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait(timeout=60)
    assert worker is not None
    row = next(line.split() for line in listed.splitlines() if "demo-1" in line)
    assert row[1:5] == ["rest_sync", "demo-1", "done", "done"], listed
