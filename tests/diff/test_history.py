"""Real pairs from this repository's history, read with ``git:REV:PATH``: commit e069121
("Follow-up workflows use the runtime's error workflows ...") added two states to the Evaluate
workflow and changed the invoice's e-mail retry policy. The diff must show exactly that, the
same bytes every time. Needs the commit in the clone (a shallow clone skips, loudly; under
CI=true that is a failure)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from statecharts.cli import main
from statecharts.diff import diff_machines
from statecharts.diff.report import text_report
from statecharts.diff.sources import load_machine_for_diff
from statecharts.render.source import SourceError

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "e069121f1b091389d22ef433d70762149597e5eb"
EVALUATE = "machines/followup/evaluate.json"
INVOICE = "machines/invoice/invoice.json"


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{COMMIT}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        timeout=30,
        check=False,
    )
    if found.returncode != 0:
        message = f"commit {COMMIT[:7]} is not in this clone (shallow?): history tests skipped"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    monkeypatch.chdir(ROOT)


def fingerprints(path: str) -> str:
    """ "old → new" fingerprints of the file before and in COMMIT (the engine's fingerprint
    function may change; the diff only reports it)."""
    old = load_machine_for_diff(f"git:{COMMIT}^:{path}").fingerprint[:12]
    return f"{old} → {load_machine_for_diff(f'git:{COMMIT}:{path}').fingerprint[:12]}"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    status = main(["diff", *args])
    return status, capsys.readouterr().out


def test_the_commit_that_added_the_failure_states_to_evaluate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out = run(capsys, f"git:{COMMIT}^:{EVALUATE}", f"git:{COMMIT}:{EVALUATE}")
    assert status == 0
    assert out == (
        f"followup_evaluate: 6 added, 0 removed, 2 changed (fingerprint "
        f"{fingerprints(EVALUATE)})\n"
        '  + (workflow): error workflow none → "followup_alerts"\n'
        "  + (workflow): context key failure added (starts as null)\n"
        "  ~ reconciling.checking_stage_filter: when it still fails: the run fails → onError "
        "handles it\n"
        "  + reconciling.checking_stage_filter: new: if check stage filter fails → "
        "releasing_after_failure\n"
        "  ~ sending_notification: when it still fails: the run fails → onError handles it\n"
        "  + sending_notification: new: if send notification fails → releasing_after_failure\n"
        "  + releasing_after_failure: new state “Releasing after failure”\n"
        "  + failing: new state “Failing”\n"
    )


def test_the_commit_that_changed_the_invoice_retry_policy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out = run(capsys, f"git:{COMMIT}^:{INVOICE}", f"git:{COMMIT}:{INVOICE}")
    assert status == 0
    assert out == (
        f"invoice: 0 added, 0 removed, 1 changed (fingerprint "
        f"{fingerprints(INVOICE)})\n"
        "  ~ sending_email: never retries CircuitOpen → retries every error\n"
    )


@pytest.mark.parametrize("fmt", ["text", "markdown", "dot", "mermaid"])
def test_the_same_pair_gives_the_same_bytes(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    args = (f"git:{COMMIT}^:{EVALUATE}", f"git:{COMMIT}:{EVALUATE}", "--format", fmt)
    first, second = run(capsys, *args), run(capsys, *args)
    assert first == second and first[1]


def test_every_change_to_a_machine_file_in_history_is_seen() -> None:
    """For each commit that modified a JSON machine under machines/, the diff with its parent
    is not empty whenever the definition's fingerprint changed."""
    log = subprocess.run(
        ["git", "log", "--format=%H", "--diff-filter=M", "--name-only", COMMIT, "--", "machines/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\n")
    pairs, commit = [], None
    for line in filter(None, log):
        if len(line) == 40 and " " not in line and "/" not in line:
            commit = line
        elif line.endswith(".json") and commit is not None:
            pairs.append((commit, line))
    assert (COMMIT, EVALUATE) in pairs and (COMMIT, INVOICE) in pairs
    for commit, path in pairs:
        old = load_machine_for_diff(f"git:{commit}^:{path}")
        new = load_machine_for_diff(f"git:{commit}:{path}")
        diff = diff_machines(old, new)
        if old.fingerprint != new.fingerprint:
            assert not diff.empty, f"{commit[:7]} {path}: fingerprint changed, no change found"
        assert text_report(diff) == text_report(diff_machines(old, new))


def test_a_revision_or_path_git_does_not_know_is_named() -> None:
    with pytest.raises(SourceError, match=r"git:no-such-rev:machines/x\.json"):
        load_machine_for_diff("git:no-such-rev:machines/x.json")
    with pytest.raises(SourceError, match="only JSON/YAML"):
        load_machine_for_diff(f"git:{COMMIT}:machines/invoice/workflow.py")
    with pytest.raises(SourceError, match="write git:REV:PATH"):
        load_machine_for_diff("git:HEAD")


def test_diagrams_check_emits_the_diff_of_each_machine_changed_since_a_revision(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`diagrams --check --diff-base REV`: the check as before, plus the diff of every machine
    that differs from REV. Against the parent of e069121 that is the retry policy of the
    invoice, Evaluate's new failure states, the error workflow of four machines (their
    contexts are functions of the input, compared only as such) and the run id in Alerts'
    call inputs. The working tree is compared, so later commits add changes of their own (the
    invoice's `transient` ledger calls, say): only what e069121 changed is asserted, each of it
    exactly."""
    status = main(["diagrams", "--check", "--diff-base", f"{COMMIT}^", "--diff-out", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0  # the committed diagrams are current
    assert re.search(r"^invoice: \d+ added, \d+ removed, \d+ changed", out, re.M)
    assert "  ~ sending_email: never retries CircuitOpen → retries every error" in out
    assert "  + releasing_after_failure: new state “Releasing after failure”" in out
    assert out.count('error workflow none → "followup_alerts"') == 4
    assert '  ~ marking: input: "pick(workflow, run_key, now)" → ' in out  # Alerts' input grew
    assert sorted(p.name for p in tmp_path.glob("*.md")) == [
        "followup.followup_alerts.md",
        "followup.followup_enrich.md",
        "followup.followup_evaluate.md",
        "followup.followup_register.md",
        "followup.followup_report.md",
        "invoice.md",
    ]
    invoice = (tmp_path / "invoice.md").read_text(encoding="utf-8")
    assert (
        "| 🟠 changed | `sending_email` | never retries CircuitOpen → retries every error |"
        in invoice
    )
    assert "```mermaid" in invoice and "(changed)<br/>retries up to 2 times" in invoice
    assert status == main(["diagrams", "--check"])


def test_a_base_revision_git_does_not_know_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagrams", "--check", "--diff-base", "no-such-rev"]) == 2
    assert "no-such-rev" in capsys.readouterr().err
