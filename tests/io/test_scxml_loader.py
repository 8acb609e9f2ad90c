"""load_scxml: documents become machines that behave as SCXML says, and bad documents fail
at load time with the line."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from statecharts.actor import Actor, create_actor, wait_for
from statecharts.clock import SimulatedClock
from statecharts.io.scxml import ScxmlError, ScxmlWarning, load_scxml

NS = 'xmlns="http://www.w3.org/2005/07/scxml" version="1.0" datamodel="python"'


def run(text: str, events: tuple[Any, ...] = (), *, trusted: bool = False) -> Actor:
    actor = create_actor(load_scxml(text, trusted=trusted), clock=SimulatedClock())
    actor.start()
    for event in events:
        actor.send(event)
    return actor


def user_context(actor: Actor) -> dict[str, Any]:
    return {k: v for k, v in actor.get_snapshot().context.items() if k != "__scxml__"}


def test_states_transitions_and_datamodel() -> None:
    actor = run(
        f"""<scxml {NS} initial="idle">
      <datamodel><data id="count" expr="0"/></datamodel>
      <state id="idle">
        <transition event="go" target="busy"><assign location="count" expr="count + 1"/>
        </transition>
      </state>
      <state id="busy"><transition event="stop" target="done"/></state>
      <final id="done"/>
    </scxml>""",
        ("go",),
    )
    assert actor.get_snapshot().value == "busy"
    assert user_context(actor) == {"count": 1}
    actor.send("stop")
    assert actor.get_snapshot().status == "done"


def test_descriptors_match_by_token_prefix_and_lists() -> None:
    text = f"""<scxml {NS} initial="a">
      <state id="a">
        <transition event="error" target="b"/>
      </state>
      <state id="b"><transition event="x y" target="c"/></state>
      <state id="c"/>
    </scxml>"""
    actor = run(text, ("errorless",))
    assert actor.get_snapshot().value == "a"  # "error" is a token, not a string prefix
    actor.send("error.send.failed")
    assert actor.get_snapshot().value == "b"
    actor.send("y")
    assert actor.get_snapshot().value == "c"


def test_document_order_wins_across_descriptors() -> None:
    # XState would try the exact "go" first; SCXML takes the first in document order
    actor = run(
        f"""<scxml {NS} initial="a">
      <state id="a">
        <transition event="*" target="star"/>
        <transition event="go" target="exact"/>
      </state>
      <state id="star"/><state id="exact"/>
    </scxml>""",
        ("go",),
    )
    assert actor.get_snapshot().value == "star"


def test_external_transitions_reenter_and_internal_ones_do_not() -> None:
    text = f"""<scxml {NS} initial="p">
      <datamodel><data id="exits" expr="0"/></datamodel>
      <state id="p" initial="c1">
        <onexit><assign location="exits" expr="exits + 1"/></onexit>
        <transition event="ext" target="c2"/>
        <transition event="int" type="internal" target="c1"/>
        <state id="c1"/><state id="c2"/>
      </state>
    </scxml>"""
    actor = run(text, ("int",))
    assert user_context(actor) == {"exits": 0}
    actor.send("ext")
    assert user_context(actor) == {"exits": 1}
    assert actor.get_snapshot().value == {"p": "c2"}


def test_delayed_send_cancel_and_in() -> None:
    text = f"""<scxml {NS} initial="wait">
      <state id="wait">
        <onentry>
          <send event="late" delay="2s" id="t1"/>
          <send event="early" delayexpr="'500ms'"/>
        </onentry>
        <transition event="early" cond="In('wait')" target="armed"><cancel sendid="t1"/>
        </transition>
      </state>
      <state id="armed"><transition event="late" target="wrong"/></state>
      <state id="wrong"/>
    </scxml>"""
    actor = run(text)
    clock = actor.clock
    assert isinstance(clock, SimulatedClock)
    clock.advance(500)
    assert actor.get_snapshot().value == "armed"
    clock.advance(5000)
    assert actor.get_snapshot().value == "armed"  # the cancelled send never arrived


def test_a_failing_expression_raises_error_execution_and_stops_its_block() -> None:
    actor = run(f"""<scxml {NS} initial="s">
      <datamodel><data id="x" expr="0"/></datamodel>
      <state id="s">
        <onentry><assign location="x" expr="undefined_name + 1"/>
          <assign location="x" expr="99"/></onentry>
        <transition event="error.execution" target="caught">
          <assign location="x" expr="_event.type"/>
        </transition>
      </state>
      <state id="caught"/>
    </scxml>""")
    assert actor.get_snapshot().value == "caught"
    assert user_context(actor) == {"x": "platform"}  # 99 never assigned: the block stopped


def test_if_foreach_raise_and_event_data() -> None:
    actor = run(f"""<scxml {NS} initial="s">
      <datamodel><data id="items" expr="[1, 2, 3]"/><data id="total" expr="0"/>
        <data id="item"/><data id="got"/></datamodel>
      <state id="s">
        <onentry>
          <foreach array="items" item="item"><assign location="total" expr="total + item"/>
          </foreach>
          <if cond="total > 100"><raise event="big"/>
          <elseif cond="total == 6"/><send event="six"><param name="n" expr="total"/></send>
          <else/><raise event="other"/></if>
        </onentry>
        <transition event="six" target="t"><assign location="got" expr="_event.data.n"/>
        </transition>
      </state>
      <state id="t"/>
    </scxml>""")
    wait_for(actor, lambda s: s.value == "t", timeout=1000)
    assert user_context(actor)["got"] == 6


def test_invoke_a_child_document_and_hear_from_it() -> None:
    actor = run(f"""<scxml {NS} initial="s">
      <datamodel><data id="who"/></datamodel>
      <state id="s">
        <invoke id="kid"><param name="greeting" expr="'hi'"/><content>
          <scxml initial="c" version="1.0">
            <datamodel><data id="greeting" expr="'none'"/></datamodel>
            <state id="c"><onentry><send target="#_parent" event="hello">
              <param name="said" expr="greeting"/></send></onentry>
              <transition target="end"/></state>
            <final id="end"/>
          </scxml></content></invoke>
        <transition event="hello"><assign location="who" expr="[_event.invokeid,
          _event.data.said]"/></transition>
        <transition event="done.invoke.kid" target="finished"/>
      </state>
      <final id="finished"/>
    </scxml>""")
    wait_for(actor, lambda s: s.status == "done", timeout=1000)
    assert user_context(actor)["who"] == ["kid", "hi"]  # the param reached the child


def invoking(child_state: str, parent_transitions: str = "") -> str:
    """A document invoking a child whose state ``c`` (line 5) is ``child_state``; the child
    tells its parent ``passed``, ``went`` or ``child.failed`` (with the error's data)."""
    return f"""<scxml {NS} initial="s">
      <datamodel><data id="why"/></datamodel>
      <state id="s">
        <invoke id="kid"><content><scxml initial="c" version="1.0">
          {child_state}
          <final id="end"/>
        </scxml></content></invoke>
        <transition event="passed" target="pass"/>
        <transition event="went" target="fail"/>
        <transition event="child.failed" target="failed">
          <assign location="why" expr="_event.data.why"/></transition>
        <transition event="poke"><send target="#_kid" event="go"/></transition>
        {parent_transitions}
      </state>
      <final id="pass"/><final id="fail"/><final id="failed"/>
    </scxml>"""


def test_a_top_level_transition_to_an_unknown_state_still_fails_to_load() -> None:
    text = invoking(
        '<state id="c"/>', '<transition event="x" target="elsewhere"/>'
    )  # line 13, the parent's
    with pytest.raises(ScxmlError, match=r"^<scxml>:13: no state with id 'elsewhere'$"):
        load_scxml(text)


@pytest.mark.parametrize(
    ("child_state", "message"),
    [
        (
            '<state id="c"><initial><transition target="nowhere"/></initial><state '
            'id="d"/></state>',
            r"^<scxml>:5: no state with id 'nowhere'$",
        ),
        (
            '<state id="c"><transition target="nowhere"><raise/></transition></state>',
            r"^<scxml>:5: <raise> needs an 'event'$",
        ),  # the lenient transition's content too
    ],
)
def test_an_invoked_document_is_otherwise_still_checked_at_load_time(
    child_state: str, message: str
) -> None:
    with (
        pytest.raises(ScxmlError, match=message),
        warnings.catch_warnings(action="ignore", category=ScxmlWarning),
    ):
        load_scxml(invoking(child_state))


def test_an_invoked_documents_unknown_target_loads_with_a_warning_and_runs() -> None:
    # W3C test 240: the child's second transition names a state only another document has;
    # it is never taken, and the child runs to completion
    text = invoking(
        '<state id="c"><transition cond="True" target="end">'
        '<send target="#_parent" event="passed"/></transition>'
        '<transition target="elsewhere"><send target="#_parent" event="went"/>'
        "</transition></state>"
    )
    with pytest.warns(ScxmlWarning) as caught:
        machine = load_scxml(text)
    assert [str(w.message) for w in caught] == [
        "<scxml>:5: <transition target='elsewhere'>: no state with id 'elsewhere' in this "
        "invoked document; the transition raises error.execution if taken"
    ]
    actor = create_actor(machine, clock=SimulatedClock()).start()
    wait_for(actor, lambda s: s.status == "done", timeout=1000)
    assert actor.get_snapshot().value == "pass"


def test_taking_an_invoked_documents_transition_to_an_unknown_state_is_error_execution() -> None:
    text = invoking(
        '<state id="c"><transition event="go" target="end elsewhere">'
        '<send target="#_parent" event="went"/></transition>'
        '<transition event="error.execution" target="end">'
        '<send target="#_parent" event="child.failed">'
        '<param name="why" expr="_event.data"/></send></transition></state>'
    )
    with pytest.warns(ScxmlWarning, match="no state with id 'elsewhere'"):
        machine = load_scxml(text)
    actor = create_actor(machine, clock=SimulatedClock()).start()
    actor.send("poke")  # the parent sends "go" to the child
    wait_for(actor, lambda s: s.status == "done", timeout=1000)
    # neither the transition's content ran ("went") nor its target was taken: the child
    # got error.execution, naming the line and the id
    assert actor.get_snapshot().value == "failed"
    assert user_context(actor)["why"] == (
        "<scxml>:5: <transition target='end elsewhere'>: no state with id 'elsewhere' in "
        "this invoked document"
    )


@pytest.mark.parametrize("attribute", ['src="file:child.scxml"', "srcexpr=\"'file:child.scxml'\""])
def test_an_invoked_file_is_named_in_its_warnings(tmp_path: Path, attribute: str) -> None:
    # with src it is compiled at load time, with srcexpr when it is invoked
    (tmp_path / "parent.scxml").write_text(f"""<scxml {NS} initial="s">
      <state id="s"><invoke {attribute}/><transition event="passed" target="pass"/></state>
      <final id="pass"/></scxml>""")
    child = tmp_path / "child.scxml"
    child.write_text(f"""<scxml {NS} initial="c">

      <state id="c"><transition cond="True" target="end">
        <send target="#_parent" event="passed"/></transition>
        <transition target="elsewhere"/></state>
      <final id="end"/></scxml>""")
    where = re.escape(str(child))
    with pytest.warns(ScxmlWarning, match=rf"^{where}:5: <transition target='elsewhere'>"):
        actor = create_actor(load_scxml(tmp_path / "parent.scxml"), clock=SimulatedClock()).start()
    wait_for(actor, lambda s: s.status == "done", timeout=1000)
    assert actor.get_snapshot().value == "pass"


def test_an_invoked_files_load_errors_name_that_file(tmp_path: Path) -> None:
    (tmp_path / "parent.scxml").write_text(
        f'<scxml {NS}><state id="s"><invoke src="file:child.scxml"/></state></scxml>'
    )
    child = tmp_path / "child.scxml"
    child.write_text(f"<scxml {NS}>\n<state id='c'><onentry><raise/></onentry></state></scxml>")
    where = re.escape(str(child))
    with pytest.raises(ScxmlError, match=rf"^{where}:2: <raise> needs an 'event'$"):
        load_scxml(tmp_path / "parent.scxml")


def test_script_runs_only_when_trusted() -> None:
    text = f"""<scxml {NS} initial="s">
      <datamodel><data id="x" expr="1"/></datamodel>
      <state id="s"><onentry><script>x = x * 10</script></onentry></state>
    </scxml>"""
    with pytest.raises(ScxmlError, match=r"<scxml>:3: <script> needs a trusted document"):
        load_scxml(text)
    assert user_context(run(text, trusted=True)) == {"x": 10}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"<scxml {NS}>\n<state id='a'>\n</scxml>", r"<scxml>:3: malformed XML: mismatched tag"),
        (
            f"<scxml {NS}>\n<state id='a'>\n<onentyr/></state></scxml>",
            r"<scxml>:3: unknown element <onentyr> \(did you mean 'onentry'\?\)",
        ),
        (
            f"<scxml {NS}>\n\n<state id='a'><transition target='nowhere'/></state></scxml>",
            r"<scxml>:3: no state with id 'nowhere'",
        ),
        (
            f"<scxml {NS}>\n<state id='a'/>\n<state id='a'/></scxml>",
            r"<scxml>:3: duplicate state id 'a' \(first at line 2\)",
        ),
        (
            f"<scxml {NS}>\n<state id='a'><onentry><transition/></onentry></state></scxml>",
            r"<scxml>:2: <transition> is not allowed inside <onentry>",
        ),
        ("<machine/>", r"<scxml>:1: the root element is <machine>, not <scxml>"),
    ],
)
def test_bad_documents_name_the_line(text: str, message: str) -> None:
    with pytest.raises(ScxmlError, match=message):
        load_scxml(text)


def test_a_file_path_is_named_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "chart.scxml"
    path.write_text(f"<scxml {NS}>\n<state id='a'>\n<bogus/></state></scxml>")
    with pytest.raises(ScxmlError, match=rf"{path}:3: unknown element <bogus>"):
        load_scxml(path)
    with pytest.raises(ScxmlError, match="cannot read the document"):
        load_scxml(str(tmp_path / "missing.scxml"))


def test_unknown_attributes_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="statecharts.scxml"):
        machine = load_scxml(f"<scxml {NS}>\n<state id='a' intial='b'/></scxml>")
    assert "<scxml>:2: <state> has no attribute 'intial' (did you mean 'initial'?)" in caplog.text
    assert machine.initial_transition()[0].value == "a"


def test_the_fingerprint_follows_the_executable_content() -> None:
    def doc(expr: str) -> str:
        return (
            f"<scxml {NS} initial='s'><datamodel><data id='x'/></datamodel><state id='s'>"
            f"<onentry><assign location='x' expr='{expr}'/></onentry></state></scxml>"
        )

    assert load_scxml(doc("1")).fingerprint == load_scxml(doc("1")).fingerprint
    assert load_scxml(doc("1")).fingerprint != load_scxml(doc("2")).fingerprint


def test_a_persisted_snapshot_resumes() -> None:
    text = f"""<scxml {NS} initial="a">
      <datamodel><data id="n" expr="0"/></datamodel>
      <state id="a"><transition event="go" target="b"><assign location="n" expr="n + 1"/>
        <send event="later" delay="1s"/></transition></state>
      <state id="b"><transition event="later" target="c"/></state>
      <state id="c"/>
    </scxml>"""
    actor = run(text, ("go",))
    saved = actor.get_persisted_snapshot()
    actor.stop()
    resumed = create_actor(load_scxml(text), snapshot=saved, clock=SimulatedClock(0)).start()
    assert resumed.get_snapshot().value == "b"
    clock = resumed.clock
    assert isinstance(clock, SimulatedClock)
    clock.advance(1000)
    assert resumed.get_snapshot().value == "c"
    assert user_context(resumed) == {"n": 1}
