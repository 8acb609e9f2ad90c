"""`statecharts --help` is written for users, and every command and option says what it does."""

from __future__ import annotations

import argparse
import subprocess
import sys

from statecharts.cli import build_parser


def _commands(
    parser: argparse.ArgumentParser, name: str
) -> list[tuple[str, argparse.ArgumentParser, str | None]]:
    """(full name, parser, one-line help) of every subcommand, nested."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for sub_name, sub in action.choices.items():
                full = f"{name} {sub_name}"
                found.append((full, sub, helps.get(sub_name)))
                found += _commands(sub, full)
    return found


def test_every_command_and_option_has_a_help_text() -> None:
    parser = build_parser()
    commands = _commands(parser, "statecharts")
    assert {
        "statecharts validate",
        "statecharts render",
        "statecharts worker",
        "statecharts runs list",
        "statecharts ui",
    } <= {name for name, _, _ in commands}
    problems = []
    for name, sub, summary in commands:
        if not summary:
            problems.append(f"{name}: no one-line help in the command list")
        if not sub.description:
            problems.append(f"{name}: no description for `{name} --help`")
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            if not (action.help or "").strip():
                problems.append(
                    f"{name}: {'/'.join(action.option_strings) or action.dest} has no help text"
                )
    assert not problems, "\n".join(problems)


def test_statecharts_help_is_for_users() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "statecharts.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = result.stdout
    assert text.startswith("usage: statecharts")
    assert "check and draw workflow definitions, run them durably" in text
    assert "examples:" in text and "statecharts worker --store" in text
    for developer_word in ("register(", "handler", "subparsers"):
        assert developer_word not in text, developer_word
    worker = subprocess.run(
        [sys.executable, "-m", "statecharts.cli", "worker", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "--lease-ms LEASE_MS" in worker and "takes it over" in worker


def test_no_command_s_help_shows_markup_or_notes_for_developers() -> None:
    """Issue 44: `diff --help` showed the module docstring: ``RST`` quotes and a note on the
    layers ("only ``--store`` reads ``persistence``")."""
    problems = []
    for name, sub, _ in _commands(build_parser(), "statecharts"):
        text = sub.format_help()
        for word in ("``", "layers", ":func:", ":class:"):
            if word in text:
                problems.append(f"{name} --help shows {word!r}")
    assert not problems, "\n".join(problems)
