"""MkDocs hooks (``hooks:`` in mkdocs.yml): the command-line reference page is generated from
``statecharts.cli.build_parser()``, so it cannot drift from the real options."""

from __future__ import annotations

import argparse
from typing import Any

MARKER = "<!-- statecharts-cli-reference -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace the marker on the CLI page with every command's usage and options."""
    if MARKER not in markdown:
        return markdown
    from statecharts.cli import build_parser

    return markdown.replace(MARKER, cli_reference(build_parser()))


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown for ``parser`` and each of its subcommands, nested."""
    return "\n".join(_command(parser, parser.prog, 2))


def _command(parser: argparse.ArgumentParser, name: str, level: int) -> list[str]:
    out = [f"{'#' * level} `{name}`", ""]
    if parser.description:
        out += [parser.description.strip(), ""]
    out += ["```text", parser.format_usage().strip().removeprefix("usage: "), "```", ""]
    rows = [
        action
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
    ]
    if rows:
        out += ["| argument | meaning |", "|---|---|"]
        for action in rows:
            out.append(f"| {_names(action)} | {_help(action)} |")
        out.append("")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                out += _command(sub, f"{name} {sub_name}", min(level + 1, 4))
    return out


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    return ", ".join(f"`{option}{metavar}`" for option in action.option_strings)


def _help(action: argparse.Action) -> str:
    text = (action.help or "").replace("%(default)s", str(action.default))
    text = text.replace("%%", "%").replace("|", "\\|").replace("\n", " ")
    if action.choices and not isinstance(action.choices, dict):
        text += f" (one of: {', '.join(map(str, action.choices))})"
    return text
