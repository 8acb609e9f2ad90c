"""``statecharts validate``: a file that names code is valid on its own (the names are what it
expects the code to provide); ``--machines`` checks those names against the code for real."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from statecharts.cli import main

ROOT = Path(__file__).resolve().parents[2]

ORDER_YAML = """\
id: order
initial: charging
context:
  order_id: null
states:
  charging:
    invoke:
      src: chargeCard
      input: {amount_cents: 1200}
      onDone: {target: mailing, actions: rememberCharge}
      onError: failed
  mailing:
    invoke:
      src: sendEmail
      onFinalFailure: skip
      onDone: shipped
      onError: shipped
  shipped:
    type: final
  failed:
    type: final
"""

ORDER_MODULE = """\
from statecharts import assign, create_machine, from_callable
from statecharts.loading import read_config

order = create_machine(
    {config},
    actions={{"rememberCharge": assign(lambda c, e: {{"order_id": "o-1"}})}},
    actors={{"chargeCard": from_callable(lambda input: "ch_1", "chargeCard")}})
"""


@pytest.mark.parametrize(
    "path", ["machines/invoice/invoice.json", "machines/followup/evaluate.json"]
)
def test_validate_accepts_the_repository_workflow_files(
    path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(ROOT / path)]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert "ok (" in out.out and "the code must provide" in out.out


def test_validate_lists_a_yaml_file_s_implementations_as_expected_not_as_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    order = tmp_path / "order.yaml"
    order.write_text(ORDER_YAML)
    assert main(["validate", str(order)]) == 0
    out = capsys.readouterr().out
    assert "ok (5 states); the code must provide (3, check with --machines MODULE)" in out
    assert "actor 'chargeCard' at states.charging.invoke.src" in out
    assert "action 'rememberCharge' at states.charging.invoke.onDone[0].actions[0]" in out
    assert "actor 'sendEmail' at states.mailing.invoke.src" in out


def test_validate_still_fails_on_a_structural_problem_next_to_a_missing_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "order.yaml"
    broken.write_text(ORDER_YAML.replace("onError: failed", "onError: faild"))
    assert main(["validate", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "states.charging.invoke.onError[0].target: no state 'faild'" in err
    assert "sendEmail" not in err  # a name the code provides is not a problem of the file


def test_validate_with_machines_checks_the_names_against_the_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    order = tmp_path / "order.yaml"
    order.write_text(ORDER_YAML)
    older = tmp_path / "order_before_mail.yaml"  # what the code was written against
    older.write_text(ORDER_YAML.replace("src: sendEmail", "src: chargeCard"))
    (tmp_path / "order_code.py").write_text(
        ORDER_MODULE.format(config=f"read_config({str(older)!r})")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "order_code", raising=False)
    assert main(["validate", str(order), "--machines", "order_code"]) == 1
    err = capsys.readouterr().err
    assert "states.mailing.invoke.src: no actor 'sendEmail'" in err
    assert "chargeCard" not in err


def test_validate_with_machines_passes_the_invoice_machine_and_names_a_missing_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INVOICE_FAKES", str(tmp_path / "fakes.db"))
    invoice = str(ROOT / "machines/invoice/invoice.json")
    assert main(["validate", invoice, "--machines", "machines.invoice"]) == 0
    assert "ok (12 states, implementations from --machines" in capsys.readouterr().out
    order = tmp_path / "order.yaml"
    order.write_text(ORDER_YAML)
    assert main(["validate", str(order), "--machines", "machines.invoice"]) == 1
    assert "--machines has no machine with id 'order' (it has: invoice)" in capsys.readouterr().err
