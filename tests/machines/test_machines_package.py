"""The workflow packages as tools see them: ``MACHINES`` in each, nine machines in all, loaded
without touching any file or server; config files with clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statecharts import Machine, MachineDefinitionError

ROOT = Path(__file__).resolve().parents[2]


def test_each_package_exposes_its_machines() -> None:
    from machines import followup, invoice, orders

    machines = {**followup.MACHINES, **invoice.MACHINES, **orders.MACHINES}
    assert sorted(machines) == [
        "followup_alerts",
        "followup_enrich",
        "followup_evaluate",
        "followup_register",
        "followup_report",
        "fraud_check",
        "invoice",
        "order",
        "payment",
    ]
    assert all(isinstance(m, Machine) and m.id == name for name, m in machines.items())


def test_retried_calls_are_visible_states() -> None:
    from machines import followup, invoice

    creating = invoice.MACHINES["invoice"].get_state_node("invoice.creating_invoice")
    assert [c.key for c in creating.children] == ["attempting", "waiting_to_retry"]
    evaluate = followup.MACHINES["followup_evaluate"]
    task = evaluate.get_state_node("followup_evaluate.processing.creating_task")
    assert task.retry is not None and task.retry.max_attempts == 3


def test_importing_creates_no_files(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-c", "import machines.followup, machines.invoice, machines.orders"],
        cwd=tmp_path,
        env=env,
        check=True,
    )
    assert list(tmp_path.iterdir()) == []


def test_a_bad_context_reference_names_its_path(tmp_path: Path) -> None:
    from machines.config import load_config

    config = {
        "id": "x",
        "initial": "a",
        "states": {"a": {"invoke": {"src": "f", "input": {"$context": "order_id"}}}},
    }
    path = tmp_path / "x.json"
    path.write_text(json.dumps(config))
    with pytest.raises(MachineDefinitionError, match=r"states\.a\.invoke\.input: \$context is"):
        load_config(path)


def test_a_missing_context_field_is_named_when_the_call_starts(tmp_path: Path) -> None:
    from machines.config import load_config
    from statecharts import SimulatedClock, create_actor, create_machine, from_callable

    path = tmp_path / "x.json"
    path.write_text(
        json.dumps(
            {
                "id": "x",
                "initial": "a",
                "context": {"a": 1},
                "states": {"a": {"invoke": {"src": "f", "input": {"$context": ["a", "b"]}}}},
            }
        )
    )
    machine = create_machine(load_config(path), actors={"f": from_callable(lambda i: i)})
    with pytest.raises(Exception, match="context has no field"):
        create_actor(machine, clock=SimulatedClock()).start()


def test_the_migrate_command_creates_then_reports_up_to_date(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    url = f"sqlite:///{tmp_path / 'f.db'}"
    command = [sys.executable, "-m", "machines.followup", "migrate", "--database", url]
    first = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    second = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert first.stdout.strip() == f"{url}: applied migration(s) [1]"
    assert second.stdout.strip() == f"{url}: already up to date"
    bad = subprocess.run([*command[:-1], "mysql://x"], env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "use sqlite:///path.db or postgresql://" in bad.stderr
