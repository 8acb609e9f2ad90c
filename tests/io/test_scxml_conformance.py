"""The W3C SCXML conformance suite (mandatory tests) must pass, except the tests listed with
their reasons in statecharts/io/scxml/expected_failures.py, and that list must be exact.

The suite is fetched with pip into .cache/scxml (outside git) on first use. Without PyPI this
test is skipped loudly, except under CI (``CI`` set), where it fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statecharts.io.scxml.conformance import (
    DEFAULT_CACHE,
    SuiteUnavailable,
    ensure_suite,
    run_suite,
)
from statecharts.io.scxml.conformance import test_files as suite_files
from statecharts.io.scxml.expected_failures import EXPECTED_FAILURES

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite() -> Path:
    try:
        return ensure_suite(REPO / DEFAULT_CACHE)
    except SuiteUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"W3C SCXML SUITE NOT AVAILABLE, CONFORMANCE NOT CHECKED: {exc}")


def test_every_mandatory_test_passes_except_the_listed_ones(suite: Path) -> None:
    results = run_suite(suite, ("mandatory",))
    assert len(results) == 160
    # test240's second child document targets a state it does not have: recorded, not raised
    assert {r.name: len(r.warnings) for r in results if r.warnings} == {"mandatory/test240": 1}
    failed = {r.name: r.detail for r in results if not r.passed}
    expected = {name for name in EXPECTED_FAILURES if name.startswith("mandatory/")}
    unexpected = {name: detail for name, detail in failed.items() if name not in expected}
    now_passing = expected - set(failed)
    assert not unexpected, f"unexpected failures: {unexpected}"
    assert not now_passing, f"listed as expected failures but pass: {sorted(now_passing)}"


def test_the_expected_failure_list_names_real_tests(suite: Path) -> None:
    names = {f"{p.parent.name}/{p.stem}" for p in suite_files(suite)}
    assert set(EXPECTED_FAILURES) <= names
