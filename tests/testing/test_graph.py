"""Graph tools: paths, context-aware identity, timers, coverage."""

from __future__ import annotations

import warnings

import pytest

from statecharts.testing.coverage import all_transitions
from statecharts.testing.graph import (
    coverage,
    explore,
    paths_from_events,
    shortest_paths,
    simple_paths,
)
from statecharts.testing.outcomes import ExplorationCutOff, ExplorationWarning

from .example_machines import counter_machine, door_machine, player_machine


def _by_value(paths):  # type: ignore[no-untyped-def]
    return {str(p.state.value): p for p in paths}


def test_shortest_paths_reach_every_state_by_fewest_events() -> None:
    paths = _by_value(shortest_paths(door_machine()))
    assert set(paths) == {"closed", "opened", "locked"}
    assert paths["closed"].event_types == []
    assert paths["opened"].event_types == ["OPEN"]
    assert paths["locked"].event_types == ["LOCK"]


def test_context_is_part_of_a_states_identity() -> None:
    paths = shortest_paths(counter_machine(limit=3))
    counting = sorted(p.state.context["count"] for p in paths if p.state.value == "counting")
    assert counting == [0, 1, 2]  # three distinct "counting" nodes, by context
    full = next(p for p in paths if p.state.value == "full")
    assert full.event_types == ["INC", "INC", "INC"]  # the guard reads the context
    finished = next(p for p in paths if p.state.value == "finished")
    assert finished.event_types == ["INC", "INC", "INC", "DONE"]
    assert finished.state.status == "done"


def test_timers_are_fired_as_steps() -> None:
    graph = explore(door_machine())
    edges = [e for e in graph.edges if e.segment.timer is not None]
    assert len(edges) == 1
    edge = edges[0]
    assert graph.states[edge.source].value == "opened"
    assert graph.states[edge.target].value == "closed"
    assert edge.transitions == ("states.opened.after.5000[0]",)
    assert edge.segment.describe() == "(timer) xstate.after.5000.door.opened"


def test_bounds_are_reported() -> None:
    with pytest.warns(
        ExplorationWarning,
        match=r"max_states=10 reached: state 'counting' "
        r"after \(initial\)( -> INC){9} -> INC not explored",
    ):
        graph = explore(counter_machine(limit=50), max_states=10)
    assert graph.truncated
    assert len(graph.states) == 10
    assert graph.cutoffs and graph.cutoffs[0].startswith("max_states=10 reached")
    assert not explore(counter_machine(limit=3)).truncated


def test_a_cut_off_can_fail_instead_of_warning() -> None:
    with pytest.raises(
        ExplorationCutOff,
        match=r"max_depth=2 reached in state 'counting' "
        r"after \(initial\) -> INC -> INC",
    ):
        explore(counter_machine(limit=50), max_depth=2, on_cutoff="error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        explore(counter_machine(limit=50), max_depth=2, on_cutoff="ignore")
    with pytest.raises(ValueError, match="on_cutoff='loud'"):
        explore(counter_machine(), on_cutoff="loud")


def test_simple_paths_never_repeat_a_state() -> None:
    paths = simple_paths(door_machine())
    described = sorted(p.describe() for p in paths)
    assert described == sorted(
        [
            "(initial)",
            "(initial) -> OPEN",
            "(initial) -> LOCK",
        ]
    )
    player = simple_paths(player_machine(), max_paths=50)
    assert len(player) == 50
    for path in player:
        values = [str(s.state.value) + str(s.state.history) for s in path.steps]
        assert len(values) == len(set(values))


def test_paths_from_events_follow_the_given_events() -> None:
    paths = paths_from_events(door_machine(), ["OPEN", "CLOSE", "LOCK", "UNLOCK", "OPEN"])
    assert [p.event_types for p in paths] == [[], ["OPEN"], ["OPEN", "CLOSE", "LOCK"]]


def test_coverage_report_of_an_exploration() -> None:
    report = explore(door_machine()).coverage()
    assert report.unreached_states == ("broken",)
    assert report.untaken_transitions == ("states.broken.on.REPAIR[0]",)
    assert report.format().splitlines() == [
        "machine 'door': states 3/4, transitions 5/6",
        "  never active: broken",
        "  never taken:  states.broken.on.REPAIR[0]",
    ]


def test_coverage_of_a_test_suite_style_replay() -> None:
    machine = player_machine()
    report = coverage(machine, event_lists=[["PLAY", "POWER", "POWER"]])
    assert "on.playback.paused" in report.states_reached
    assert "on.volume.muted" in report.unreached_states
    assert "off" in report.states_reached
    assert "ejected" in report.unreached_states
    taken = set(report.transitions_taken)
    assert taken == {
        "states.on.states.playback.states.paused.on.PLAY[0]",
        "states.on.on.POWER[0]",
        "states.off.on.POWER[0]",
    }
    assert set(all_transitions(machine)) > taken
    # the shortest paths to every (value, context, history) node cover the whole machine
    full = coverage(machine, shortest_paths(machine))
    assert full.complete
    assert full.format() == "machine 'player': states 9/9, transitions 7/7"
