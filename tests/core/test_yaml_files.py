"""YAML machine files read as their authors mean them: ``on:`` is the transitions key, not the
boolean YAML 1.1 makes of it, and data stays data."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecharts import MachineDefinitionError, create_actor, load_machine
from statecharts.loading import read_config

DOOR = """\
id: door
initial: closed
context: {open: false, note: yes, count: 0}
states:
  closed:
    on:
      OPEN: {target: opened, reenter: true}
  opened:
    on: {CLOSE: closed, "off": closed}
"""


def test_on_is_the_transitions_key_and_only_true_false_are_booleans(tmp_path: Path) -> None:
    path = tmp_path / "door.yaml"
    path.write_text(DOOR)
    config = read_config(path)
    assert set(config["states"]["closed"]) == {"on"}
    assert config["context"] == {"open": False, "note": "yes", "count": 0}
    assert config["states"]["closed"]["on"]["OPEN"]["reenter"] is True
    actor = create_actor(load_machine(path)).start()
    actor.send("OPEN")
    actor.send("off")
    assert actor.get_snapshot().value == "closed"


def test_yaml_cannot_build_python_objects(tmp_path: Path) -> None:
    path = tmp_path / "evil.yml"
    path.write_text("id: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(MachineDefinitionError, match="not valid YAML"):
        read_config(path)
