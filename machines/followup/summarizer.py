"""Summarising a deal's recent e-mails into two lines: the prompt and the parser (pure).

The model behind ``Summarizer.complete`` is pluggable; whatever it is, its answer goes through
``parse_summary``, which accepts exactly two non-empty lines (bullets and numbering removed) and
rejects anything else, so a chatty or truncated answer never reaches a report.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

MAX_EMAILS = 10
MAX_BODY = 600
MAX_LINE = 160
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)]|line\s*\d+\s*:)\s*", re.IGNORECASE)


class SummaryFormatError(ValueError):
    """The summarizer's answer is not two usable lines."""


def build_prompt(deal_name: str, emails: Sequence[Mapping[str, Any]]) -> str:
    """The prompt: the newest ``MAX_EMAILS`` e-mails (oldest first, bodies trimmed) and the
    exact answer format."""
    recent = sorted(emails, key=lambda e: int(e["sent_at"]))[-MAX_EMAILS:]
    parts = [
        f"Summarise the recent e-mails about the deal {deal_name!r} in exactly two lines.",
        "Line 1: where the deal stands. Line 2: the next step and who owns it.",
        f"Each line at most {MAX_LINE} characters. No bullets, no preamble, nothing else.",
        "",
    ]
    for n, email in enumerate(recent, 1):
        body = " ".join(str(email["body"]).split())
        if len(body) > MAX_BODY:
            body = body[: MAX_BODY - 1] + "\u2026"
        parts.append(f"E-mail {n} from {email['sender']}: {email['subject']}")
        parts.append(body)
    return "\n".join(parts)


def parse_summary(answer: str) -> str:
    """The two lines of ``answer`` joined by a newline, or ``SummaryFormatError``."""
    lines = [_BULLET.sub("", line).strip() for line in answer.strip().splitlines()]
    lines = [line for line in lines if line]
    if len(lines) != 2:
        raise SummaryFormatError(f"expected two lines, got {len(lines)}: {answer[:200]!r}")
    for line in lines:
        if len(line) > MAX_LINE:
            raise SummaryFormatError(
                f"a line is longer than {MAX_LINE} characters: {line[:80]!r}..."
            )
    return "\n".join(lines)
