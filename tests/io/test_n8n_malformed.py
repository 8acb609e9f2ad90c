"""Malformed exports fail with an error naming the JSON path of what is wrong."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from statecharts.io.n8n import N8nFormatError, from_n8n
from statecharts.io.n8n.validation import build_machines
from tests.io.n8n_corpus import corpus_data


def _node(data: Any, name: str) -> tuple[int, dict[str, Any]]:
    return next((i, n) for i, n in enumerate(data["nodes"]) if n["name"] == name)


def _error(data: Any) -> N8nFormatError:
    with pytest.raises(N8nFormatError) as caught:
        from_n8n(data, "w")
    return caught.value


def test_not_an_object_or_without_nodes() -> None:
    assert str(_error([1, 2])).startswith("<root>: an n8n workflow export is a JSON object")
    assert _error({"connections": {}}).path == "nodes"
    assert _error({"nodes": {"a": 1}}).path == "nodes"


@pytest.mark.parametrize(
    "change, path, words",
    [
        (lambda d, i, n: n.pop("name"), "nodes[{i}].name", "missing"),
        (lambda d, i, n: n.update(type=7), "nodes[{i}].type", "non-empty string"),
    ],
)
def test_a_node_without_a_usable_name_or_type_is_refused(
    change: Callable[..., Any], path: str, words: str
) -> None:
    # wires name nodes and the type says what a node is: without them nothing can be built
    data = corpus_data("zie619__N8ntrainingcustomermessenger_0230")
    index, node = _node(data, "Wait for time interval")
    change(data, index, node)
    error = _error(data)
    assert error.path == path.format(i=index)
    assert words in str(error)
    assert str(error).startswith(error.path + ": ")


@pytest.mark.parametrize(
    "change, path, words",
    [
        (lambda d, i, n: n.update(parameters=[]), "nodes[{i}].parameters", "expected an object"),
        (lambda d, i, n: n.update(onError="ignore"), "nodes[{i}].onError", "continueErrorOutput"),
        (lambda d, i, n: n.update(retryOnFail="yes"), "nodes[{i}].retryOnFail", "true or false"),
        (lambda d, i, n: n.update(maxTries="three"), "nodes[{i}].maxTries", "a number"),
        (lambda d, i, n: n.update(position=[1]), "nodes[{i}].position", "[x, y]"),
        (
            lambda d, i, n: n["parameters"].update(amount="soon"),
            "nodes[{i}].parameters.amount",
            "a number of seconds or an n8n expression",
        ),
        (
            lambda d, i, n: n["parameters"].update(unit="weeks"),
            "nodes[{i}].parameters.unit",
            "seconds, minutes, hours, days",
        ),
        (
            lambda d, i, n: n["parameters"].update(resume="later"),
            "nodes[{i}].parameters.resume",
            "timeInterval",
        ),
    ],
)
def test_a_malformed_node_degrades_to_a_named_state_with_a_warning(
    change: Callable[..., Any], path: str, words: str
) -> None:
    # a real Wait node (0230's 'Wait for time interval') with one field broken: the rest of
    # the workflow imports, the node keeps its state, the warning names the path
    data = corpus_data("zie619__N8ntrainingcustomermessenger_0230")
    index, node = _node(data, "Wait for time interval")
    change(data, index, node)
    result = from_n8n(data, "w")
    build_machines(result)
    [warning] = [w for w in result.warnings if w.startswith(path.format(i=index) + ": ")]
    assert words in warning
    assert "wait_for_time_interval" in result.config["states"]
    assert len([m for m in result.nodes if m.state]) == len(
        [
            m
            for m in from_n8n(corpus_data("zie619__N8ntrainingcustomermessenger_0230"), "w").nodes
            if m.state
        ]
    )


def test_duplicate_node_names_name_both_nodes() -> None:
    data = corpus_data("enescingoz__devops")
    data["nodes"][3]["name"] = data["nodes"][1]["name"]
    error = _error(data)
    assert error.path == "nodes[3].name" and "also nodes[1]" in str(error)


def test_bad_connections_name_their_path() -> None:
    data = corpus_data("enescingoz__devops")
    broken = copy.deepcopy(data)
    broken["connections"]["Any alerts?"]["main"][0][0]["index"] = "first"
    assert _error(broken).path == 'connections["Any alerts?"].main[0][0].index'
    broken = copy.deepcopy(data)
    broken["connections"]["Any alerts?"]["main"] = {"0": []}
    assert _error(broken).path == 'connections["Any alerts?"].main'
    broken = copy.deepcopy(data)
    broken["connections"]["Parse & Evaluate"]["main"][0][0] = "Any alerts?"
    assert _error(broken).path == 'connections["Parse & Evaluate"].main[0][0]'


def test_bad_switch_and_loop_parameters_degrade_with_a_warning() -> None:
    # the issue: a Switch with mode "json" refused all 35 nodes of its workflow
    data = corpus_data("zie619__Webhook_0619")
    index, node = _node(data, "Route Message")
    node["parameters"]["mode"] = "json"
    result = from_n8n(data, "w")
    build_machines(result)
    assert "route_message" in result.config["states"]
    assert any("Route Message" in d and "not in the table" in d for d in result.primary.decisions)
    data = corpus_data("zie619__Wait_0498")
    index, node = _node(data, "Loop Over Items2")
    node["parameters"]["batchSize"] = 0
    result = from_n8n(data, "w")
    build_machines(result)
    [warning] = [w for w in result.warnings if "Loop Over Items2" in w]
    assert f"nodes[{index}].parameters.batchSize" in warning and "generic node" in warning


def test_bad_settings_name_their_path() -> None:
    data = corpus_data("zie619__Http_0350")
    data["settings"]["errorWorkflow"] = 2
    assert _error(data).path == "settings.errorWorkflow"
    data["settings"] = "v1"
    assert _error(data).path == "settings"
