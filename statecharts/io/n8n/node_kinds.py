"""What n8n does with each kind of node, read from the node's settings and parameters.

Every rule here follows n8n's own code, because the point of the import is to make the silent
parts visible exactly as n8n runs them:

- Retry on Fail (``WorkflowExecute``): ``tries = min(5, max(2, maxTries || 3))`` and
  ``wait = min(5000, max(0, waitBetweenTries || 1000))`` ms, fixed, only when
  ``retryOnFail`` is true (so 0 tries means 3 and a wait of 0 means 1000 ms; a leftover
  ``maxTries`` without ``retryOnFail`` is no retry).
- ``onError`` wins over the legacy ``continueOnFail`` (which means ``continueRegularOutput``).
- Wait: v1 defaults to 1 hour, v1.1+ to 5 seconds; webhook and form modes wait without limit
  unless ``limitWaitTime`` (default limit: 1 hour).
- Loop Over Items (``splitInBatches``): v1 has one output (loop), v2 ``loop`` (0) and ``done``
  (1), both a default batch of 10; v3 has ``done`` (0) and ``loop`` (1) and a batch of 1.
- Outputs per node type and version are in ``outputs``.
- Execute Workflow waits for the sub-workflow unless ``options.waitForSubWorkflow`` is false.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .workflow import N8nFormatError, Node

BASE = "n8n-nodes-base."
UNIT_MS = {"seconds": 1000, "minutes": 60_000, "hours": 3_600_000, "days": 86_400_000}
TRIGGER_TYPES = frozenset(
    BASE + t
    for t in (
        "webhook",
        "cron",
        "interval",
        "start",
        "emailReadImap",
        "rssFeedReadTrigger",
    )
)
AI_SUBNODE_PREFIXES = (
    "lmChat",
    "lm",
    "embeddings",
    "memory",
    "textSplitter",
    "document",
    "outputParser",
    "retriever",
    "tool",
    "vectorStore",
    "reranker",
)


class Kind(Enum):
    """How a node becomes part of the statechart."""

    STICKY_NOTE = "sticky note"
    TRIGGER = "trigger"
    ERROR_TRIGGER = "error trigger"
    AI_SUBNODE = "AI sub-node"
    IF = "if"
    SWITCH = "switch"
    FILTER = "filter"
    WAIT = "wait"
    FORM_PAGE = "form page"
    LOOP = "loop over items"
    EXECUTE_WORKFLOW = "execute workflow"
    STOP_AND_ERROR = "stop and error"
    NO_OP = "no operation"
    WORK = "work"


SPECIAL_TYPES = {
    BASE + "stickyNote": Kind.STICKY_NOTE,
    BASE + "errorTrigger": Kind.ERROR_TRIGGER,
    BASE + "if": Kind.IF,
    BASE + "switch": Kind.SWITCH,
    BASE + "filter": Kind.FILTER,
    BASE + "wait": Kind.WAIT,
    BASE + "splitInBatches": Kind.LOOP,
    BASE + "executeWorkflow": Kind.EXECUTE_WORKFLOW,
    BASE + "stopAndError": Kind.STOP_AND_ERROR,
    BASE + "noOp": Kind.NO_OP,
}

# Node types whose behaviour the importer knows beyond "do the work, then go on".
KNOWN_WORK_TYPES = frozenset(
    BASE + t
    for t in (
        "merge",
        "set",
        "code",
        "function",
        "functionItem",
        "httpRequest",
        "respondToWebhook",
        "form",
        "splitOut",
        "aggregate",
        "summarize",
        "itemLists",
        "removeDuplicates",
    )
)


def kind_of(node: Node) -> Kind:
    """The kind of ``node`` from its type alone (AI sub-nodes are told apart by their wires)."""
    special = SPECIAL_TYPES.get(node.type)
    if special is not None:
        return special
    if node.type == BASE + "form" and node.parameters.get("operation", "page") == "page":
        return Kind.FORM_PAGE
    if node.type in TRIGGER_TYPES or node.short_type.lower().endswith("trigger"):
        return Kind.TRIGGER
    return Kind.WORK


def looks_like_ai_subnode(node: Node) -> bool:
    """True for LangChain node types that only ever plug into another node (models, memory,
    tools, ...), used for sub-nodes left unwired."""
    return node.type.startswith("@n8n/n8n-nodes-langchain.") and node.short_type.startswith(
        AI_SUBNODE_PREFIXES
    )


def is_known_type(node: Node) -> bool:
    """False for node types mapped as a generic "doing X" state without special knowledge."""
    return (
        node.type in SPECIAL_TYPES
        or node.type in KNOWN_WORK_TYPES
        or kind_of(node) is not Kind.WORK
    )


# -- error handling and retries -----------------------------------------------------------------


def error_mode(node: Node) -> str:
    """``stopWorkflow``, ``continueRegularOutput`` or ``continueErrorOutput``."""
    if node.on_error is not None:
        return node.on_error
    return "continueRegularOutput" if node.continue_on_fail else "stopWorkflow"


def retry_policy(node: Node) -> dict[str, Any] | None:
    """The node's Retry on Fail as a ``retry`` mapping (see ENGINE_API), or None."""
    if not node.retry_on_fail:
        return None
    # n8n: ``maxTries || 3`` and ``waitBetweenTries || 1000``: 0 (falsy) means the default.
    tries = min(5.0, max(2.0, node.max_tries or 3.0))
    wait = min(5000.0, max(0.0, node.wait_between_tries or 1000.0))
    return {
        "max_attempts": math.ceil(tries),
        "initial_interval": int(wait),
        "backoff": "fixed",
        "jitter": "none",
    }


# -- durations ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Duration:
    """A wait n8n computes: ``ms`` when known from the export, else ``expression`` (an n8n
    expression or a date) that the user's named delay must compute at run time."""

    ms: int | None
    expression: str | None
    text: str


def _duration(
    node: Node,
    amount_key: str,
    unit_key: str,
    amount_default: float,
    unit_default: str,
    source: Mapping[str, Any],
    *prefix: str,
) -> Duration:
    amount = source.get(amount_key, amount_default)
    unit = source.get(unit_key, unit_default)
    if not isinstance(unit, str) or unit not in UNIT_MS:
        raise N8nFormatError(
            node.param_path(*prefix, unit_key),
            f"expected one of {', '.join(UNIT_MS)}, got {unit!r}",
        )
    if _is_expression(amount):
        return Duration(None, str(amount), f"{amount} {unit}")
    number = _number(amount)
    if number is None or number < 0:
        raise N8nFormatError(
            node.param_path(*prefix, amount_key),
            f"expected a number of {unit} or an n8n expression, got {amount!r}",
        )
    said = unit[:-1] if number == 1 else unit  # "1 hour", "2 hours"
    return Duration(int(number * UNIT_MS[unit]), None, f"{_plain(number)} {said}")


def _until(node: Node, key: str, source: Mapping[str, Any], *prefix: str) -> Duration:
    when = source.get(key, "")
    if not isinstance(when, str):
        raise N8nFormatError(
            node.param_path(*prefix, key),
            f"expected a date and time or an n8n expression, got {when!r}",
        )
    return Duration(None, when, f"until {when or '(no date set)'}")


# -- Wait, Form and "send and wait" -------------------------------------------------------------


@dataclass(frozen=True)
class WaitSpec:
    """How a node waits: a timer (``delay``) or an outside event with an optional ``timeout``."""

    mode: str
    delay: Duration | None = None
    timeout: Duration | None = None


WAIT_MODES = ("timeInterval", "specificTime", "webhook", "form")


def wait_spec(node: Node) -> WaitSpec:
    """The Wait node's resume mode and its timer or time limit."""
    params = node.parameters
    mode = params.get("resume", "timeInterval")
    if mode not in WAIT_MODES:
        raise N8nFormatError(
            node.param_path("resume"), f"expected one of {', '.join(WAIT_MODES)}, got {mode!r}"
        )
    if mode == "timeInterval":
        v1 = node.type_version < 1.1
        return WaitSpec(
            mode,
            delay=_duration(
                node, "amount", "unit", 1 if v1 else 5, "hours" if v1 else "seconds", params
            ),
        )
    if mode == "specificTime":
        return WaitSpec(mode, delay=_until(node, "dateTime", params))
    return WaitSpec(mode, timeout=_time_limit(node, params))


def form_page_spec(node: Node) -> WaitSpec:
    """A Form page waits for its submission, with the same optional time limit."""
    return WaitSpec("form", timeout=_time_limit(node, node.parameters))


def is_send_and_wait(node: Node) -> bool:
    """Slack, Gmail, Telegram, Discord ... "send and wait for response" operations."""
    return node.parameters.get("operation") == "sendAndWait"


def reply_timeout(node: Node) -> Duration | None:
    """The time limit of a "send and wait" node (``options.limitWaitTime.values``)."""
    options = node.parameters.get("options") or {}
    if not isinstance(options, Mapping):
        raise N8nFormatError(node.param_path("options"), "expected an object")
    limit = options.get("limitWaitTime")
    if limit is None:
        return None
    values = limit.get("values") if isinstance(limit, Mapping) else None
    if not isinstance(values, Mapping):
        raise N8nFormatError(
            node.param_path("options", "limitWaitTime"), "expected {'values': {...}}"
        )
    return _limit(node, values, "options", "limitWaitTime", "values")


def _time_limit(node: Node, params: Mapping[str, Any]) -> Duration | None:
    limited = params.get("limitWaitTime", False)
    if not isinstance(limited, bool):
        raise N8nFormatError(
            node.param_path("limitWaitTime"), f"expected true or false, got {limited!r}"
        )
    return _limit(node, params) if limited else None


def _limit(node: Node, values: Mapping[str, Any], *prefix: str) -> Duration:
    kind = values.get("limitType", "afterTimeInterval")
    if kind == "afterTimeInterval":
        return _duration(node, "resumeAmount", "resumeUnit", 1, "hours", values, *prefix)
    if kind == "atSpecifiedTime":
        return _until(node, "maxDateAndTime", values, *prefix)
    raise N8nFormatError(
        node.param_path(*prefix, "limitType"),
        f"expected afterTimeInterval or atSpecifiedTime, got {kind!r}",
    )


# -- Loop Over Items ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopSpec:
    """A Loop Over Items node: its batch size, which output means "done", and its option
    ``reset`` (start again from the items that come in, on every visit): ``True``/``False``,
    or the n8n expression that decides it at run time."""

    batch_size: int
    batch_expression: str | None
    done_output: int | None
    loop_output: int
    reset: bool = False
    reset_expression: str | None = None


def loop_spec(node: Node) -> LoopSpec:
    """n8n's SplitInBatches outputs: v3 ``['done', 'loop']`` (batch 1), v2 ``['loop',
    'done']`` (batch 10), v1 only ``loop`` (batch 10)."""
    version = node.type_version
    default = 1 if version >= 3 else 10
    done, loop = (0, 1) if version >= 3 else (1, 0) if version >= 2 else (None, 0)
    size = node.parameters.get("batchSize", default)
    options = node.parameters.get("options")
    reset = options.get("reset", False) if isinstance(options, Mapping) else False
    # SplitInBatches V1-V3 execute: `options.reset === true` (a literal, or what the
    # expression gives at run time)
    expression = str(reset) if _is_expression(reset) else None
    if _is_expression(size):
        return LoopSpec(default, str(size), done, loop, reset is True, expression)
    number = _number(size)
    if number is None or number < 1:
        raise N8nFormatError(
            node.param_path("batchSize"), f"expected a batch size of at least 1, got {size!r}"
        )
    return LoopSpec(int(number), None, done, loop, reset is True, expression)


_NO_ITEMS_LEFT = re.compile(
    r"""\$(?:node\[\s*["'](?P<a>[^"']+)["']\s*\]|\(\s*["'](?P<b>[^"']+)["']\s*\))"""
    r"""\.context(?:\[\s*["']noItemsLeft["']\s*\]|\.noItemsLeft)"""
)


def no_items_left_loop(node: Node) -> str | None:
    """For an If node that only asks "has Loop X no items left?" (the v1/v2 way to end a
    loop), the name of loop X; otherwise None."""
    conditions = node.parameters.get("conditions")
    if not isinstance(conditions, Mapping):
        return None
    if node.type_version < 2:
        booleans = conditions.get("boolean")
        others = [k for k, v in conditions.items() if k != "boolean" and v]
        if others or not isinstance(booleans, list) or len(booleans) != 1:
            return None
        rule = booleans[0]
        if (
            not isinstance(rule, Mapping)
            or rule.get("value2") is not True
            or rule.get("operation", "equal") != "equal"
        ):
            return None
        return _loop_name(rule.get("value1"))
    rules = conditions.get("conditions")
    if not isinstance(rules, list) or len(rules) != 1 or not isinstance(rules[0], Mapping):
        return None
    operator = rules[0].get("operator")
    if not isinstance(operator, Mapping) or operator.get("operation") != "true":
        return None
    return _loop_name(rules[0].get("leftValue"))


def _loop_name(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    match = _NO_ITEMS_LEFT.search(value)
    return (match.group("a") or match.group("b")) if match else None


# -- Execute Workflow and Stop and Error --------------------------------------------------------


@dataclass(frozen=True)
class SubWorkflowSpec:
    """An Execute Workflow node: which workflow, whether the parent waits, once or per item."""

    workflow: str | None
    waits: bool
    mode: str


def sub_workflow_spec(node: Node) -> SubWorkflowSpec:
    """Read an Execute Workflow node (``options.waitForSubWorkflow`` defaults to true)."""
    params = node.parameters
    options = params.get("options") or {}
    waits = options.get("waitForSubWorkflow", True) if isinstance(options, Mapping) else True
    if not isinstance(waits, bool):
        raise N8nFormatError(
            node.param_path("options", "waitForSubWorkflow"),
            f"expected true or false, got {waits!r}",
        )
    workflow = params.get("workflowId")
    if isinstance(workflow, Mapping):  # resource locator: {"__rl": true, "value": ...}
        workflow = workflow.get("value")
    if params.get("source", "database") != "database":
        workflow = f"({params.get('source')})"
    mode = params.get("mode", "once")
    return SubWorkflowSpec(
        workflow if isinstance(workflow, str) and workflow else None,
        waits,
        mode if isinstance(mode, str) else "once",
    )


def stop_and_error_message(node: Node) -> str:
    """The error a Stop and Error node raises."""
    params = node.parameters
    if params.get("errorType", "errorMessage") == "errorObject":
        value = params.get("errorObject", "")
    else:
        value = params.get("errorMessage", "")
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def describe_type(node: Node) -> str:
    """``"httpRequest v4.2 (POST)"``-style summary used in docstrings and the report;
    only structural parameters (resource, operation, method), never values."""
    parts = [f"{node.short_type} v{_plain(node.type_version)}"]
    details = [
        str(node.parameters[k])
        for k in ("resource", "operation", "method")
        if isinstance(node.parameters.get(k), str)
    ]
    if details:
        parts.append(f"({', '.join(details)})")
    return " ".join(parts)


def _is_expression(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("=")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)
