"""Issue 44: a YAML example that passes data to a call. docs/actors.md shows
docs/examples/mail.yaml; the file is the page's block, and the call gets its input."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from statecharts import assign, create_actor, from_callable, load_machine

ROOT = Path(__file__).resolve().parents[2]


def test_the_yaml_example_is_the_page_s_block_and_passes_its_input_to_the_call() -> None:
    page = (ROOT / "docs" / "actors.md").read_text(encoding="utf-8")
    example = ROOT / "docs" / "examples" / "mail.yaml"
    block = re.search(r"```yaml\n(id: mail\n.*?)```", page, re.S)
    assert block is not None and block.group(1) == example.read_text(encoding="utf-8")
    given: list[Any] = []

    def send_mail(mail: Any) -> str:
        given.append(mail)
        return f"queued {mail['template']}"

    machine = load_machine(
        example,
        actors={"sendMail": from_callable(send_mail)},
        actions={"rememberSent": assign({"sent": lambda c, e: e["output"]})},
    )
    snapshot = create_actor(machine).start().get_snapshot()
    assert given == [{"template": "welcome", "to": "ann@example.com", "cc": ["ops@example.com"]}]
    assert (snapshot.value, snapshot.context["sent"]) == ("sent", "queued welcome")
