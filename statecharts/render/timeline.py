"""Engine events in words, for a run's timeline: ``xstate.after.retry:invoice.creating_invoice
.invoice.creating_invoice.waiting_to_retry`` is "retry wait over: Creating invoice",
``xstate.done.actor.create_invoice`` "create invoice succeeded". The words come from the same
labels as the diagram's arrows; events sent from outside keep their own names.
"""

from __future__ import annotations

from ..machine import Machine
from ..nodes import StateNode
from ..retrying import retried_state_of_timer
from .labels import delay_phrase, humanize, invoke_phrase, sentence, state_title

_AFTER = "xstate.after."
_DONE_ACTOR, _ERROR_ACTOR = "xstate.done.actor.", "xstate.error.actor."
_DONE_STATE = "xstate.done.state."
_FIXED = {"xstate.init": "started", "xstate.stop": "stopped", "statecharts.cancel": "cancelled"}


def engine_event_phrase(event_type: str, machine: Machine | None = None) -> str | None:
    """Words for an engine event (``xstate.*``, ``statecharts.*``), or None for an event
    sent from outside. ``machine`` (the run's definition) gives the states' and calls' own
    words; without it the ids are humanized."""
    if event_type in _FIXED:
        return _FIXED[event_type]
    if event_type.startswith(_AFTER):
        return _after_phrase(event_type[len(_AFTER) :], machine)
    for prefix, verb in ((_DONE_ACTOR, "succeeded"), (_ERROR_ACTOR, "failed")):
        if event_type.startswith(prefix):
            return f"{_work(event_type[len(prefix) :], machine)} {verb}"
    if event_type.startswith(_DONE_STATE):
        return f"{_state(event_type[len(_DONE_STATE) :], machine)} finished"
    if event_type.startswith("xstate.") or event_type.startswith("statecharts."):
        return humanize(event_type.split(".", 1)[1])
    return None


def _after_phrase(rest: str, machine: Machine | None) -> str:
    """``<delay>.<state id>``: a retry's wait, or a delayed transition's timer."""
    retried = retried_state_of_timer(f"xstate.after.{rest}")
    if retried is not None:
        node = next((n for n in _nodes(machine) if n.id == retried), None)
        name = state_title(node) if node is not None else _last_words(retried.split(".")[-1])
        return f"retry wait over: {name}"
    node = _longest_suffix_node(rest, machine)
    delay_text = rest[: -len(node.id) - 1] if node is not None else rest.split(".", 1)[0]
    delay: int | str = int(delay_text) if delay_text.isdigit() else delay_text
    delays = machine.implementations.delays if machine is not None else {}
    where = f" in {state_title(node)}" if node is not None else ""
    return f"timer: {delay_phrase(delay, delays)}{where}"


def _nodes(machine: Machine | None) -> tuple[StateNode, ...]:
    return machine.definition.nodes if machine is not None else ()


def _longest_suffix_node(text: str, machine: Machine | None) -> StateNode | None:
    found = [n for n in _nodes(machine) if text.endswith("." + n.id)]
    return max(found, key=lambda n: len(n.id), default=None)


def _work(invoke_id: str, machine: Machine | None) -> str:
    for node in _nodes(machine):
        for invoke in node.invoke:
            if invoke.id == invoke_id:
                return invoke_phrase(invoke, invoke.description)
    state, _, index = invoke_id.partition(":invocation[")
    if index:  # an unnamed invoke: named by its state
        return f"the call in {_last_words(state.split('.')[-1])}"
    return humanize(invoke_id)


def _state(state_id: str, machine: Machine | None) -> str:
    node = next((n for n in _nodes(machine) if n.id == state_id), None)
    return state_title(node) if node is not None else _last_words(state_id.split(".")[-1])


def _last_words(name: str) -> str:
    return sentence(humanize(name))
