"""`statecharts diff` from the command line: sources, formats, renames and errors."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from statecharts.cli import main
from tests.diff.pairs import BASE, edited, reviewed_change

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[str, str]:
    """BASE and the reviewed change as JSON files (their names get placeholders)."""
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_bytes(orjson.dumps(BASE))
    new.write_bytes(orjson.dumps(edited(reviewed_change)))
    return str(old), str(new)


def test_text_by_default_markdown_and_pictures_by_suffix(
    pair: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diff", *pair]) == 0
    text = capsys.readouterr().out
    assert text.startswith("order: 3 added, 1 removed, 3 changed")
    assert "  - shipping.labelling: state “Labelling” removed\n" in text
    for suffix, starts in (
        (".md", "### `order`"),
        (".mmd", "---\ntitle: Order: what changed"),
        (".dot", 'digraph "order"'),
    ):
        out = tmp_path / f"change{suffix}"
        assert main(["diff", *pair, "-o", str(out)]) == 0
        assert out.read_text(encoding="utf-8").startswith(starts)


def test_png_needs_graphviz(pair: tuple[str, str], tmp_path: Path, dot_installed: str) -> None:
    out = tmp_path / "change.png"
    assert main(["diff", *pair, "-o", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")


def test_a_rename_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    renamed = edited(lambda c: c["states"].__setitem__("aborted", c["states"].pop("failed")))
    renamed["states"]["charging"]["invoke"]["onError"] = "aborted"
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_bytes(orjson.dumps(BASE))
    new.write_bytes(orjson.dumps(renamed))
    assert main(["diff", str(old), str(new), "--rename", "failed=aborted"]) == 0
    assert capsys.readouterr().out.endswith("  ~ aborted: renamed from failed (hint)\n")
    assert main(["diff", str(old), str(new), "--rename", "failed"]) == 2
    assert "write OLD_PATH=NEW_PATH" in capsys.readouterr().err
    assert main(["diff", str(old), str(new), "--rename", "nope=aborted"]) == 2
    assert "the old machine has no state 'nope'" in capsys.readouterr().err


def test_module_and_file_sources_compare_by_names(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The invoice module's machine (real implementations) against its own JSON file
    (placeholders): the same states, transitions and calls; only the module computes its
    context from the input, and the diff says so."""
    monkeypatch.chdir(ROOT)
    assert main(["diff", "machines/invoice/invoice.json", "machines.invoice:invoice"]) == 0
    headline, *changes = capsys.readouterr().out.splitlines()
    assert headline.startswith("invoice: 0 added, 0 removed, 1 changed")
    assert changes == ["  ~ (workflow): initial context given → computed from the input"]


def test_bad_sources_exit_2_and_name_them(
    pair: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diff", pair[0], "missing.json"]) == 2
    assert "missing.json: no such machine file" in capsys.readouterr().err
    assert main(["diff", pair[0], "machines.nowhere:machine"]) == 2
    assert "cannot import module 'machines.nowhere'" in capsys.readouterr().err
    assert main(["diff", pair[0], pair[1], "--store", "nosuch://x"]) == 2
    assert "--store" in capsys.readouterr().err
