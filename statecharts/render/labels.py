"""Readable words for diagrams: state, event, guard, delay and invoke names as a
non-engineer would say them.

``is_payment_valid`` becomes "if the payment is valid", ``creating_invoice`` "Creating invoice",
``PAYMENT_RECEIVED`` "payment received", a 300000 ms delay "after 5 minutes". A state keeps its
name as its title (its ``description`` goes below it); for transitions, guards and invokes a
``description`` written by the author wins over the humanized name.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from ..actions import ActionSpec
from ..guards import GuardSpec
from ..nodes import InvokeDef, StateNode

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_ERROR_EVENT = "xstate.error.actor."
_DONE_ACTOR_EVENT = "xstate.done.actor."
_DONE_STATE_EVENT = "xstate.done.state."
# Verbs that open a yes/no guard name: has_items -> "if it has items".
_SUBJECT_VERBS = ("has", "can", "should", "needs", "must", "was", "were", "did")
# is_within_limit is about "it", not about a "within": "if it is within limit".
_PREPOSITIONS = frozenset(
    {
        "about",
        "above",
        "after",
        "at",
        "before",
        "below",
        "by",
        "for",
        "from",
        "in",
        "into",
        "of",
        "off",
        "on",
        "out",
        "over",
        "past",
        "to",
        "under",
        "up",
        "with",
        "within",
        "without",
    }
)


def words(name: str) -> list[str]:
    """The words in a snake_case, kebab-case, camelCase or SCREAMING_CASE name.

    Acronyms inside mixed-case names keep their capitals (``sendHTTPRequest`` -> send, HTTP,
    request); everything else is lower case.
    """
    shouting = name.upper() == name
    found = _WORD.findall(name)
    return [w.lower() if shouting or not (w.isupper() and len(w) > 1) else w for w in found]


def humanize(name: str) -> str:
    """``PAYMENT_RECEIVED`` -> "payment received"; empty or symbol-only names stay as given."""
    return " ".join(words(name)) or name


def sentence(text: str) -> str:
    """The text with its first letter capitalized ("creating invoice" -> "Creating invoice")."""
    return text[:1].upper() + text[1:]


def state_title(node: StateNode) -> str:
    """The title of a state box: its key as words ("fetching_customer" -> "Fetching
    customer"); the description, if any, is shown below it. A description that is only the
    name in the author's spelling ("Fetch API Records" for ``fetch_api_records``, as the n8n
    import writes) is the title instead, so the name is not shown twice."""
    if node.type == "history":
        return "H*" if node.history == "deep" else "H"
    first = (node.description or "").split("\n", 1)[0]
    if first and _same_words(first, node.key):
        return first
    return sentence(humanize(node.key))


def state_description(node: StateNode) -> str | None:
    """The description shown below a state's title (None when it is the title). When its
    first line is the title (the name in the author's spelling), the lines after it."""
    if not node.description:
        return None
    first, _, rest = node.description.partition("\n")
    if _same_words(first, node.key):
        return rest or None
    return node.description


def _same_words(a: str, b: str) -> bool:
    return [w.lower() for w in words(a)] == [w.lower() for w in words(b)] or _keyed(a, b)


_CUT_WORDS = 4  # a key cut short keeps at least this many words of the name


def _keyed(name: str, key: str) -> bool:
    """True when ``key`` is ``name`` made into a key: lower case, run together
    ("SplitInBatches": ``splitinbatches``), numbered to be unique (``set_2``), cut short at
    a word (``customer_messenger_send_message_to`` for "Customer Messenger - Send message to
    client") or with a leading digit guarded (``n_2nd_try``)."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    spelled = [w for w in re.split(r"[^a-z0-9]+", folded.lower()) if w]
    keyed = [w for w in key.lower().split("_") if w]
    if keyed[:1] == ["n"] and spelled[:1] != ["n"] and spelled[:1] and spelled[0][0].isdigit():
        keyed = keyed[1:]
    options = [keyed] + ([keyed[:-1]] if len(keyed) > 1 and keyed[-1].isdigit() else [])
    return any(
        option == spelled or (len(option) >= _CUT_WORDS and spelled[: len(option)] == option)
        for option in options
    )


def event_phrase(event: str) -> str:
    """A plain event name: ``PAYMENT_RECEIVED`` -> "payment received", ``*`` -> "any other
    event", ``order.*`` -> "any order event"."""
    if event == "*":
        return "any other event"
    if event.endswith(".*"):
        return f"any {humanize(event[:-2])} event"
    return humanize(event)


def duration(ms: int | float, *, short: bool = False) -> str:
    """Milliseconds in words, at most two units: 300000 -> "5 minutes", 90000 -> "1 minute 30
    seconds"; ``short`` gives "5 min", "1.5 s" with a no-break space, so a list of retry
    waits never wraps between number and unit."""
    if ms < 1000:
        return f"{_number(ms)}\u00a0ms" if short else _plural(_number(ms), "millisecond")
    units = (("day", "d", 86_400_000), ("hour", "h", 3_600_000), ("minute", "min", 60_000))
    parts: list[str] = []
    remaining = int(ms)
    for long_name, short_name, size in units:
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}\u00a0{short_name}" if short else _plural(str(count), long_name))
        if len(parts) == 2:
            return " ".join(parts)
    if remaining or not parts:
        seconds = _number(remaining / 1000)
        parts.append(f"{seconds}\u00a0s" if short else _plural(seconds, "second"))
    return " ".join(parts[:2])


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _plural(count: str, unit: str) -> str:
    return f"{count} {unit}" if count == "1" else f"{count} {unit}s"


def delay_phrase(delay: int | str, delays: Mapping[str, Any]) -> str:
    """``after`` in words: "after 5 minutes", or for a named delay "after the payment timeout
    (10 minutes)" (the duration only when the name maps to a fixed number)."""
    if isinstance(delay, int):
        return f"after {duration(delay)}"
    fixed = delays.get(delay)
    if isinstance(fixed, int | float) and not isinstance(fixed, bool):
        return f"after the {humanize(delay)} ({duration(fixed)})"
    return f"after the {humanize(delay)}"


def guard_phrase(guard: GuardSpec) -> str:
    """A guard as a condition: "if the payment is valid", "unless the order is paid",
    "if the amount is over (limit 100)"; its description as written, if it has one (empty: a
    guard with nothing to say, see ``guards.described``)."""
    if guard.description is not None:
        return guard.description
    if guard.type == "not" and guard.children:
        return f"unless {_condition(guard.children[0])}"
    return f"if {_condition(guard)}"


def _condition(guard: GuardSpec) -> str:
    """A guard as a clause without the leading "if"."""
    if guard.description:
        return guard.description
    if guard.type in ("and", "or"):
        return f" {guard.type} ".join(_condition(child) for child in guard.children)
    if guard.type == "not" and guard.children:
        return f"not ({_condition(guard.children[0])})"
    if guard.type == "stateIn":
        return f"in “{humanize(str(guard.params).rsplit('.', 1)[-1])}”"
    return _named_condition(guard.type) + _params_phrase(guard.params)


def _named_condition(name: str) -> str:
    parts = words(name)
    if not parts or name == "<lambda>":
        return "a condition holds"
    if parts[0] == "is" and (len(parts) == 2 or _PREPOSITIONS & set(parts[1:])):
        return f"it {' '.join(parts)}"
    if parts[0] == "is":
        return f"the {' '.join(parts[1:-1])} is {parts[-1]}"
    if "is" in parts[1:-1] or "are" in parts[1:-1]:
        return f"the {' '.join(parts)}"
    if parts[0] in _SUBJECT_VERBS:
        return f"it {' '.join(parts)}"
    return " ".join(parts)


def _params_phrase(params: Any) -> str:
    if not isinstance(params, Mapping) or not params:
        return ""
    shown = ", ".join(f"{humanize(str(key))} {value}" for key, value in params.items())
    return f" ({shown})"


def actions_phrase(actions: tuple[ActionSpec, ...]) -> str | None:
    """The user actions in a list, humanized ("send receipt, notify team"); built-in
    bookkeeping (assign, raise, log, ...) is left out of diagrams."""
    names = [humanize(a.type) for a in actions if not a.is_builtin and a.type != "<lambda>"]
    return ", ".join(names) if names else None


def invoke_phrase(invoke: InvokeDef, description: str | None = None) -> str:
    """What an invoked actor does, without the "doing:" prefix ("create invoice")."""
    return description or humanize(invoke.src)


def done_phrase(event: str, source: StateNode, invokes: Mapping[str, str]) -> str | None:
    """Words for the engine's own completion and error events, or None for other events.

    ``invokes`` maps invoke ids to their phrases.
    """
    if event.startswith(_ERROR_EVENT):
        work = invokes.get(event[len(_ERROR_EVENT) :], "the work")
        return f"if {work} fails"
    if event.startswith(_DONE_ACTOR_EVENT):
        work = invokes.get(event[len(_DONE_ACTOR_EVENT) :], "the work")
        return f"when {work} succeeds"
    if event.startswith(_DONE_STATE_EVENT):
        return "when all parts are finished" if source.type == "parallel" else "when finished"
    return None


def is_error_event(event: str | None) -> bool:
    """True for ``xstate.error.*`` events: the failure of invoked work."""
    return event is not None and event.startswith("xstate.error.")


def wrap(text: str, width: int = 30) -> list[str]:
    """``text`` broken into lines of about ``width`` characters at spaces."""
    lines: list[str] = []
    current = ""
    for word in text.split(" "):  # not split(): no-break spaces must hold
        if not word:
            continue
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    return lines or [""]
