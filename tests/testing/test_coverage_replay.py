"""States entered within a macrostep, found by replaying the traced microsteps, are exactly
the states whose entry actions the engine ran (checked on random machines)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statecharts.effects import RunAction
from statecharts.errors import StatechartError
from statecharts.testing.coverage import entered_states, state_name
from statecharts.testing.strategies import EVENTS, GeneratedMachine, machines

MARK = "mark:"


def _marked(config: dict[str, Any], path: tuple[str, ...] = ()) -> list[str]:
    """Give every state an entry action naming its path; return the action names."""
    names = []
    for key, child in (config.get("states") or {}).items():
        if child.get("type") == "history":
            continue
        name = MARK + ".".join((*path, key))
        entry = child.get("entry") or []
        child["entry"] = [*(entry if isinstance(entry, list) else [entry]), name]
        names.append(name)
        names += _marked(child, (*path, key))
    return names


@settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(machines(), st.lists(st.sampled_from(EVENTS), max_size=8))
def test_entered_states_are_those_whose_entry_ran(
    generated: GeneratedMachine, sequence: list[str]
) -> None:
    config = copy.deepcopy(dict(generated.config))
    names = _marked(config)
    machine = GeneratedMachine(config).build({n: (lambda ctx, ev: None) for n in names})

    def entered_by_effects(effects: Any) -> set[str]:
        return {
            e.type[len(MARK) :]
            for e in effects
            if isinstance(e, RunAction) and e.type.startswith(MARK)
        }

    try:
        trace: list[Any] = []
        snapshot, effects = machine.start(None, lambda: 0, trace)
        replayed = {
            state_name(n) for n in entered_states(machine, None, trace) if n.parent is not None
        }
        assert replayed == entered_by_effects(effects)
        for kind in sequence:
            trace = []
            before = snapshot
            snapshot, effects = machine.step(before, machine.event(kind), lambda: 0, trace)
            replayed = {
                state_name(n)
                for n in entered_states(machine, before, trace)
                if n.parent is not None
            }
            assert replayed == entered_by_effects(effects), (kind, trace)
    except StatechartError:
        return  # a rare generated eventless loop: the engine reports it; nothing to compare
