"""How many outputs and inputs each node has, by node type and version, as n8n's node
definitions declare them (``packages/nodes-base/nodes/**/<Node>.node.ts`` and
``@n8n/nodes-langchain``: ``outputs``, ``outputNames``, ``requiredInputs``).

The export's wires are not enough: an output with nothing attached has no wire, and a node
set to ``onError: continueErrorOutput`` has one more output (the error output, last) whatever
its type. ``OUTPUT_TABLE`` is the reference docs/n8n.md prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .workflow import Node

BASE = "n8n-nodes-base."
LANGCHAIN = "@n8n/n8n-nodes-langchain."

# (node type, versions, outputs, source in n8n) -- printed in docs/n8n.md
OUTPUT_TABLE: tuple[tuple[str, str, str, str], ...] = (
    (
        "if",
        "all",
        "true, false",
        "nodes/If/V1, V2: outputs [main, main], outputNames ['true', 'false']",
    ),
    (
        "filter",
        "all",
        "kept (discarded items are dropped: no wire)",
        "nodes/Filter/V1, V2: outputs [main]; 'Discarded' shows in the run panel only",
    ),
    ("switch", "1", "0, 1, 2, 3", "nodes/Switch/V1: four outputs; a rule names its output"),
    (
        "switch",
        "2",
        "one per rule (rules) or outputsAmount (expression), + fallback 'extra'",
        "nodes/Switch/V2: configuredOutputs",
    ),
    (
        "switch",
        "3+",
        "one per rule (rules.values) or numberOutputs (expression), + one when "
        "options.fallbackOutput is 'extra'",
        "nodes/Switch/V3: configuredOutputs",
    ),
    ("splitInBatches (Loop Over Items)", "1", "loop", "SplitInBatchesV1: outputs [main]"),
    (
        "splitInBatches (Loop Over Items)",
        "2",
        "loop, done",
        "SplitInBatchesV2: outputNames ['loop', 'done']",
    ),
    (
        "splitInBatches (Loop Over Items)",
        "3",
        "done, loop",
        "SplitInBatchesV3: outputNames ['done', 'loop']",
    ),
    (
        "textClassifier",
        "all",
        "one per category, + 'other' when options.fallback is 'other'",
        "nodes-langchain TextClassifier: configuredOutputs",
    ),
    (
        "sentimentAnalysis",
        "all",
        "one per category (default Positive, Neutral, Negative)",
        "nodes-langchain SentimentAnalysis: configuredOutputs",
    ),
    (
        "compareDatasets",
        "all",
        "In A only, Same, Different, In B only",
        "nodes/CompareDatasets: outputNames",
    ),
    ("merge", "1, 2", "one; 2 inputs", "nodes/Merge/v1, v2: inputs [main, main]"),
    (
        "merge",
        "3+",
        "one; numberInputs inputs (default 2)",
        "nodes/Merge/v3: inputs from parameter numberInputs",
    ),
    (
        "any node, onError: continueErrorOutput",
        "all",
        "its outputs + 'error' (last)",
        "NodeHelpers.getNodeOutputs adds the error output",
    ),
    ("any other node", "all", "one (or as many as its wires use)", "outputs [main]"),
)


@dataclass(frozen=True)
class Outputs:
    """A node's regular outputs (names in n8n's order) and whether the table knew them
    (``known`` False: counted from the export's wires)."""

    names: tuple[str, ...]
    known: bool = True


def regular_outputs(node: Node, wired: int) -> Outputs:
    """The regular (non-error) outputs of ``node``; ``wired`` is how many output slots the
    export uses, the fallback for types the table does not know."""
    short = node.type.rsplit(".", 1)[-1]
    params = node.parameters
    version = node.type_version
    if node.type == BASE + "if":
        return Outputs(("true", "false"))
    if node.type == BASE + "filter":
        return Outputs(("kept",))
    if node.type == BASE + "splitInBatches":
        if version >= 3:
            return Outputs(("done", "loop"))
        return Outputs(("loop", "done")) if version >= 2 else Outputs(("loop",))
    if node.type == BASE + "switch":
        return _switch(node, wired)
    if node.type == BASE + "compareDatasets":
        return Outputs(("In A only", "Same", "Different", "In B only"))
    if node.type == LANGCHAIN + "textClassifier":
        names = _categories(params)
        options = params.get("options")
        if isinstance(options, Mapping) and options.get("fallback") == "other":
            names.append("other")
        return Outputs(tuple(names) or ("output 0",), bool(names))
    if node.type == LANGCHAIN + "sentimentAnalysis":
        options = params.get("options")
        text = options.get("categories") if isinstance(options, Mapping) else None
        if not isinstance(text, str) or not text.strip():
            text = "Positive, Neutral, Negative"
        return Outputs(tuple(c.strip() for c in text.split(",") if c.strip()))
    if short == "merge" or wired <= 1:
        return Outputs(("output 0",))
    return Outputs(tuple(f"output {i}" for i in range(wired)), False)


def _switch(node: Node, wired: int) -> Outputs:
    params = node.parameters
    version = node.type_version
    mode = params.get("mode", "rules")
    if version < 2:
        return (
            Outputs(("0", "1", "2", "3"))
            if mode in ("rules", "expression")
            else Outputs(tuple(str(i) for i in range(max(1, wired))), False)
        )
    if mode == "expression":
        count = params.get("numberOutputs" if version >= 3 else "outputsAmount", 4)
        if isinstance(count, int | float) and not isinstance(count, bool) and count >= 1:
            return Outputs(tuple(str(i) for i in range(int(count))))
        return Outputs(tuple(str(i) for i in range(max(1, wired))), False)
    if mode != "rules":
        return Outputs(tuple(str(i) for i in range(max(1, wired))), False)
    box = params.get("rules")
    rules = box.get("values" if version >= 3 else "rules") if isinstance(box, Mapping) else []
    rules = rules if isinstance(rules, list) else []
    names = [_rule_name(rule, i) for i, rule in enumerate(rules)]
    options = params.get("options") if version >= 3 else params
    fallback = options.get("fallbackOutput") if isinstance(options, Mapping) else None
    if fallback == "extra":
        renamed = options.get("renameFallbackOutput") if isinstance(options, Mapping) else None
        names.append(renamed if isinstance(renamed, str) and renamed else "Fallback")
    return Outputs(tuple(names) or ("0",))


def _rule_name(rule: Any, index: int) -> str:
    if isinstance(rule, Mapping):
        key = rule.get("outputKey")
        if isinstance(key, str) and key and not key.startswith("="):
            return key
    return str(index)


def _categories(params: Mapping[str, Any]) -> list[str]:
    box = params.get("categories")
    items = box.get("categories") if isinstance(box, Mapping) else None
    if not isinstance(items, list):
        return []
    return [str(c["category"]) for c in items if isinstance(c, Mapping) and c.get("category")]


def input_count(node: Node, wired: int) -> int:
    """The input slots n8n gives ``node``'s data: Merge v3's ``numberInputs`` (default 2),
    two for the other Merge versions, else as many as its wires use."""
    if node.type == BASE + "merge":
        if node.type_version >= 3:
            number = node.parameters.get("numberInputs", 2)
            declared = (
                int(number)
                if isinstance(number, int | float) and not isinstance(number, bool)
                else 2
            )
            return max(declared, wired)
        return max(2, wired)
    return max(1, wired)


def required_inputs(node: Node) -> Any:
    """n8n's ``requiredInputs`` for a node waiting with some inputs missing when the stack runs
    dry (v1 order): Merge v2+ ``chooseBranch`` needs inputs 0 and 1, the other modes any one;
    None (any node type without the setting, Merge v1) runs with whatever arrived. ``"all"``
    when that is every input of the node's type (Merge v2 ``chooseBranch``: its ``inputs``
    are two), which n8n then never releases with an input missing; Merge v3 declares its
    inputs as an expression, so ``WorkflowExecute`` never finds all of them required."""
    if node.type == BASE + "merge" and node.type_version >= 2:
        if node.parameters.get("mode") != "chooseBranch":
            return 1
        return "all" if node.type_version < 3 else [0, 1]
    return None
