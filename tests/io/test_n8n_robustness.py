"""Broken exports fail with N8nFormatError (naming a path), never with a crash, and whatever
imports also passes the engine's validation. Real corpus files are mutated at random, seeded;
N8N_FUZZ_RUNS raises the number of mutations (default 400)."""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest

from statecharts.io.n8n import N8nFormatError, from_n8n
from statecharts.io.n8n.validation import build_machines
from tests.io.n8n_corpus import MISSING, corpus_data, corpus_files

RUNS = int(os.environ.get("N8N_FUZZ_RUNS", "400"))
ODD_VALUES: list[Any] = [
    None,
    0,
    -1,
    1.5,
    "",
    "x",
    "=",
    "={{ $json.x }}",
    [],
    {},
    [None],
    {"a": 1},
    {"values": 3},
    True,
    10**9,
    float("inf"),
    "none",
    "extra",
    "5",
]
SETTING_KEYS = [
    "limitWaitTime",
    "resume",
    "fallbackOutput",
    "mode",
    "batchSize",
    "options",
    "operation",
    "rules",
    "errorType",
    "numberOutputs",
    "retryOnFail",
    "maxTries",
    "onError",
    "disabled",
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _mutate(data: Any, rng: random.Random) -> None:
    paths = [p for p in _paths(data) if p and p[0] in ("nodes", "connections", "settings")]
    path = rng.choice(paths)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    odd = copy.deepcopy(rng.choice(ODD_VALUES))
    roll = rng.random()
    if roll < 0.15 and isinstance(parent, dict):
        del parent[path[-1]]
    elif roll < 0.3 and isinstance(parent, dict):
        parent[rng.choice(SETTING_KEYS)] = odd
    else:
        parent[path[-1]] = odd


@pytest.mark.skipif(not corpus_files(), reason=MISSING)
def test_mutated_corpus_exports_fail_cleanly_or_import_validly() -> None:
    originals = [corpus_data(p.name[:-5]) for p in corpus_files()]
    rng = random.Random(20261130)
    outcomes = {"imported": 0, "rejected": 0}
    for _ in range(RUNS):
        data = copy.deepcopy(rng.choice(originals))
        for _ in range(rng.randint(1, 3)):
            _mutate(data, rng)
        try:
            result = from_n8n(data, "w")
        except N8nFormatError as exc:
            assert exc.path is not None and str(exc).startswith(f"{exc.path or '<root>'}: ")
            outcomes["rejected"] += 1
            continue
        build_machines(result)  # raises MachineDefinitionError if the config were invalid
        outcomes["imported"] += 1
    assert outcomes["imported"] > 0 and outcomes["rejected"] > 0


def test_a_wait_unit_of_the_wrong_type_is_a_warning_naming_its_path() -> None:
    # found by the mutation test above: a list as the unit crashed with TypeError
    data = corpus_data("zie619__N8ntrainingcustomermessenger_0230")
    index, node = next(
        (i, n) for i, n in enumerate(data["nodes"]) if n["name"] == "Wait for time interval"
    )
    node["parameters"]["unit"] = ["seconds"]
    result = from_n8n(data, "w")
    assert any(w.startswith(f"nodes[{index}].parameters.unit: ") for w in result.warnings)
