"""The ``render`` and ``diagrams`` commands, run as real subprocesses on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ORDERS = """
from statecharts import create_machine

machine = create_machine({
    "id": "orders", "initial": "open",
    "states": {"open": {"on": {"CLOSE": "closed"}}, "closed": {"type": "final"}},
})
"""

BILLING = """
from statecharts import create_machine

def _charge(*_):
    return None

MACHINES = {
    "billing": create_machine({
        "id": "billing", "initial": "charging",
        "states": {"charging": {"invoke": {"src": "charge", "onDone": "paid",
                                           "retry": {"max_attempts": 3}}},
                   "paid": {"type": "final"}},
    }, actors={"charge": _charge}),
    "refunds": create_machine({"id": "refunds", "initial": "idle",
                               "states": {"idle": {}}}),
}
"""

JSON_MACHINE = {
    "id": "ticket",
    "initial": "new",
    "states": {
        "new": {
            "on": {
                "ASSIGN": {"target": "working", "guard": "has_owner", "actions": ["notify_owner"]}
            },
            "after": {"SLA": "escalated"},
        },
        "working": {"invoke": {"src": "fix_issue", "onDone": "solved", "onError": "failed"}},
        "escalated": {},
        "solved": {"type": "final"},
        "failed": {"type": "final"},
    },
}


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "statecharts.render.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder with a machines package (module-level ``machine`` and ``MACHINES``)."""
    package = tmp_path / "machines"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "orders.py").write_text(ORDERS)
    (package / "billing.py").write_text(BILLING)
    (package / "_helpers.py").write_text("raise RuntimeError('private modules are skipped')")
    (package / "notes.py").write_text("TEXT = 'modules without machines are ignored'\n")
    return tmp_path


def test_render_module_attribute_in_every_format(project: Path, dot_installed: str) -> None:
    for fmt, name in (("dot", "o.dot"), ("mermaid", "o.mmd"), ("svg", "o.svg"), ("png", "o.png")):
        result = run("render", "machines.orders:machine", "--format", fmt, "-o", name, cwd=project)
        assert result.returncode == 0, result.stderr
    assert (project / "o.dot").read_text().startswith('digraph "orders"')
    assert "stateDiagram-v2" in (project / "o.mmd").read_text()
    assert "Open" in (project / "o.svg").read_text()
    assert (project / "o.png").read_bytes().startswith(b"\x89PNG")


def test_render_format_follows_the_output_suffix_and_machines_entries(project: Path) -> None:
    result = run("render", "machines.billing:refunds", "-o", "r.mmd", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "title: Refunds" in (project / "r.mmd").read_text()
    to_stdout = run("render", "machines.billing:billing", "--format", "dot", cwd=project)
    assert b"retries up to 2 times" in to_stdout.stdout


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_render_a_machine_file_without_its_code(project: Path, suffix: str) -> None:
    import yaml

    path = project / f"ticket{suffix}"
    text = json.dumps(JSON_MACHINE) if suffix == ".json" else yaml.safe_dump(JSON_MACHINE)
    path.write_text(text)
    result = run("render", path.name, "--format", "mermaid", cwd=project)
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert "assign<br/>if it has owner<br/>then: notify owner" in out
    assert "after the sla" in out
    assert "doing: fix issue" in out


def test_render_highlights_a_persisted_snapshot(project: Path) -> None:
    code = (
        "import json, sys\nfrom machines.orders import machine\n"
        "snap, _ = machine.initial_transition()\nsnap, _ = machine.transition(snap, 'CLOSE')\n"
        "print(json.dumps(machine.persist(snap)))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)])}
    persisted = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(persisted)["value"] == "closed"
    (project / "snap.json").write_text(persisted)
    result = run(
        "render",
        "machines.orders:machine",
        "--format",
        "mermaid",
        "--snapshot",
        "snap.json",
        cwd=project,
    )
    assert result.returncode == 0, result.stderr
    assert "class s_closed active" in result.stdout.decode()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("machines.orders:nothing", "has no attribute or MACHINES entry 'nothing'"),
        ("machines.absent:machine", "cannot import module 'machines.absent'"),
        ("missing.json", "missing.json: no such machine file"),
        ("just-a-name", "give MODULE:NAME"),
        ("machines.notes:TEXT", "'TEXT' is a str, not a Machine"),
    ],
)
def test_render_bad_input_names_what_is_wrong(project: Path, target: str, message: str) -> None:
    result = run("render", target, cwd=project)
    assert result.returncode == 2
    assert message in result.stderr.decode()


def test_render_without_dot_says_how_to_install(project: Path, tmp_path: Path) -> None:
    env = {
        "PATH": str(tmp_path / "empty"),
        "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)]),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "statecharts.render.cli",
            "render",
            "machines.orders:machine",
            "--format",
            "svg",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        check=False,
    )
    assert result.returncode == 2
    assert b"apt-get install graphviz" in result.stderr


def test_diagrams_generates_checks_and_detects_staleness(project: Path, dot_installed: str) -> None:
    result = run("diagrams", cwd=project)
    assert result.returncode == 0, result.stderr
    out = project / "diagrams"
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "billing.mmd",
        "billing.refunds.mmd",
        "billing.refunds.svg",
        "billing.svg",
        "orders.mmd",
        "orders.svg",
    ]
    index = (out / "README.md").read_text()
    assert "![Billing](billing.svg)" in index and "```mermaid" in index
    assert (out / "orders.mmd").read_text() in index
    assert run("diagrams", "--check", cwd=project).returncode == 0
    again = run("diagrams", cwd=project)
    assert b"is up to date" in again.stdout

    # the definition changes: the committed diagrams are now stale
    orders = project / "machines" / "orders.py"
    orders.write_text(ORDERS.replace('"CLOSE": "closed"', '"FINISH": "closed"'))
    (out / "leftover.svg").write_text("<svg/>")
    check = run("diagrams", "--check", cwd=project)
    assert check.returncode == 1
    listed = check.stdout.decode()
    for line in (
        "orders.mmd: out of date",
        "orders.svg: out of date",
        "README.md: out of date",
        "leftover.svg: not generated by any machine",
    ):
        assert line in listed
    assert "billing.svg" not in listed
    assert run("diagrams", cwd=project).returncode == 0
    assert run("diagrams", "--check", cwd=project).returncode == 0
    assert not (out / "leftover.svg").exists()
    assert "finish" in (out / "orders.mmd").read_text()


def test_diagrams_reports_a_broken_machines_module(project: Path) -> None:
    (project / "machines" / "broken.py").write_text("import no_such_module_here\n")
    result = run("diagrams", "--check", cwd=project)
    assert result.returncode == 2
    assert b"machines.broken: import failed" in result.stderr
