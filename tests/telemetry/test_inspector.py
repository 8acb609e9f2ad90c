"""In-memory actors emit the same spans as durable runs, through their inspection hook."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from statecharts import SimulatedClock, create_actor, create_machine, from_callable, tracing
from statecharts.inspection import InspectionEvent
from statecharts.tracing import tracing_inspector


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


def test_start_step_and_effect_spans_nest_as_documented() -> None:
    provider, exporter = _provider()
    ran: list[str] = []
    machine = create_machine(
        {
            "id": "door",
            "initial": "closed",
            "states": {
                "closed": {
                    "entry": "latch",
                    "on": {"OPEN": {"target": "open", "actions": "creak"}},
                },
                "open": {"after": {"1000": "closed"}},
            },
        },
        actions={
            "latch": lambda c, e: ran.append("latch"),
            "creak": lambda c, e: ran.append("creak"),
        },
    )
    clock = SimulatedClock()
    seen: list[InspectionEvent] = []
    actor = create_actor(
        machine, clock=clock, inspect=tracing_inspector(provider, then=seen.append)
    ).start()
    actor.send("OPEN")
    clock.advance(1000)  # the delayed transition back: a step with no event of its own
    actor.stop()

    spans = _by_name(exporter.get_finished_spans())
    assert ran == ["latch", "creak", "latch"]
    assert seen, "the inspector forwards every record to `then`"
    (start,) = spans["start door"]
    assert start.parent is None and start.attributes[tracing.STATE_AFTER] == "closed"
    steps = spans["step door"]
    assert [
        (s.attributes[tracing.STATE_BEFORE], s.attributes[tracing.STATE_AFTER]) for s in steps
    ] == [("closed", "open"), ("open", "closed")]
    assert steps[0].attributes[tracing.EVENT_TYPE] == "OPEN"
    assert steps[1].attributes[tracing.EVENT_TYPE].startswith("xstate.after")
    assert all(s.parent is not None and s.parent.span_id == start.context.span_id for s in steps)
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {start.context.trace_id}
    latch_first, latch_again = spans["action latch"]
    (creak,) = spans["action creak"]
    assert latch_first.parent.span_id == start.context.span_id  # the initial macrostep
    assert creak.parent.span_id == steps[0].context.span_id
    assert latch_again.parent.span_id == steps[1].context.span_id
    assert creak.attributes[tracing.EFFECT_KIND] == "action"
    assert creak.attributes[tracing.EFFECT_NAME] == "creak"


def test_an_invoked_call_and_a_child_machine_are_effects_of_their_step() -> None:
    provider, exporter = _provider()
    child = create_machine({"id": "child", "initial": "a", "states": {"a": {"type": "final"}}})
    machine = create_machine(
        {
            "id": "parent",
            "initial": "calling",
            "states": {
                "calling": {"invoke": {"src": "lookup", "onDone": "spawning"}},
                "spawning": {"invoke": {"src": "child", "onDone": "done"}},
                "done": {"type": "final"},
            },
        },
        actors={"lookup": from_callable(lambda input: 42), "child": child},
    )
    actor = create_actor(machine, inspect=tracing_inspector(provider)).start()
    assert actor.get_snapshot().status == "done"
    actor.stop()
    spans = _by_name(exporter.get_finished_spans())
    (call,) = spans["start_child lookup"]
    assert call.attributes[tracing.EFFECT_KIND] == "start_child"
    (child_start,) = spans["start parent.spawning:invocation[0]"]  # named by its actor id
    (spawn,) = spans["start_child child"]
    assert child_start.parent.span_id == spawn.context.span_id  # a child machine's own trace part
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {
        spans["start parent"][0].context.trace_id
    }


def test_traceparent_helpers() -> None:
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert tracing.check_traceparent(good) == good
    assert tracing.trace_id_of(good) == "0af7651916cd43dd8448eb211c80319c"
    for bad in (
        "",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
    ):
        try:
            tracing.check_traceparent(bad, "start(traceparent=)")
        except ValueError as exc:
            assert "start(traceparent=)" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")
    assert tracing.trace_id_of("garbage") is None


def test_traced_effect_kinds_are_the_ones_the_outbox_records() -> None:
    from persistence.outbox import RECORDED_KINDS

    # messages between actors are no outbox effects in a durable run (they are written with
    # the step that sends them, child runs' inboxes), but in memory they reach another actor
    assert RECORDED_KINDS | {"send_to", "send_parent"} == tracing.TRACED_EFFECT_KINDS
