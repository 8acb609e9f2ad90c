"""``load_scxml``: an SCXML document compiled into a machine of this engine.

The document becomes an XState-shaped config plus implementations, and ``create_machine``
does the rest. Where SCXML and XState differ, the config says what SCXML means:

- every transition with an event sits under the ``*`` descriptor, in document order, with a
  ``Condition`` guard that matches SCXML descriptors (``error`` matches ``error.send``; a
  transition's event list ``"a b"``) and evaluates ``cond``; eventless ones go to ``always``;
- ``type="external"`` (the default) is ``reenter: true``;
- an initial transition with executable content, or whose targets are not one child, becomes a
  transient ``_initial`` child with an eventless transition;
- executable content, datamodel initialization and invocations are built-in actions
  (``runtime.Block``/``runtime.Hook``) the pure core resolves;
- ``<finalize>`` and ``autoforward`` are guards at the head of the invoking state's atomic
  descendants that act on events from (or for) the child and never pass.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from ...effects import SendParent, SendTo, StartChild
from ...frozen import FrozenDict
from ...machine import Machine, create_machine
from .document import STATECHARTS_NS, Element, parse_document, read_source
from .errors import ExpressionRefused, ScxmlError, ScxmlWarning
from .evaluator import XML_KEY, Evaluator, RestrictedEvaluator, TrustedEvaluator, check_expression
from .runtime import (
    META,
    Assign,
    Block,
    CancelSend,
    Condition,
    ContentError,
    Fail,
    Foreach,
    Hook,
    If,
    Instruction,
    LogValue,
    NamedAction,
    Payload,
    RaiseEvent,
    Script,
    Send,
    Session,
    is_scxml_type,
    literal,
    platform_error,
    run_all,
)

STATE_TAGS = ("state", "parallel", "final", "history")
EXPRESSION_ATTRS = frozenset(
    {
        "expr",
        "cond",
        "location",
        "array",
        "eventexpr",
        "targetexpr",
        "typeexpr",
        "delayexpr",
        "srcexpr",
        "sendidexpr",
        "idlocation",
    }
)


def load_scxml(
    path_or_text: str | Path,
    *,
    trusted: bool = False,
    guards: Mapping[str, Callable[..., Any]] | None = None,
    actions: Mapping[str, Callable[..., Any]] | None = None,
) -> Machine:
    """Load an SCXML document (a path, or the XML text itself) as a machine.

    Expressions use a Python datamodel. Untrusted documents (the default) are evaluated by
    the restricted evaluator and may not contain ``<script>``; ``trusted=True`` runs them with
    Python's ``eval``/``exec``. ``guards``/``actions`` bind the named implementations that
    ``to_scxml`` exports as ``cond="name()"`` and ``<sc:action>``. Raises ``ScxmlError``
    naming the line for malformed XML, unknown elements or attributes, bad targets and
    refused expressions. One exception: an invoked document's transition to a state it does
    not have warns (``ScxmlWarning``, naming the line) and raises ``error.execution`` in the
    child if taken.
    """
    text, source = read_source(path_or_text)
    base = Path(source).parent if source != "<scxml>" else Path.cwd()
    root = parse_document(text, source)
    evaluator: Evaluator = TrustedEvaluator(guards) if trusted else RestrictedEvaluator(guards)
    return Compiler(source, base, evaluator, dict(guards or {}), dict(actions or {})).machine(root)


class Compiler:
    """Compiles one ``<scxml>`` element (and, recursively, the documents it invokes).

    ``invoked`` is true for an invoked child document: it is a separate session, created
    when it is invoked, so a transition of it to a state it does not have loads with an
    ``ScxmlWarning`` and raises ``error.execution`` in the child if taken (a top-level
    document with such a transition fails to load)."""

    def __init__(
        self,
        source: str,
        base: Path,
        evaluator: Evaluator,
        guards: dict[str, Callable[..., Any]],
        actions: dict[str, Callable[..., Any]],
        *,
        invoked: bool = False,
    ) -> None:
        self.source = source
        self.invoked = invoked
        self.base = base
        self.evaluator = evaluator
        self.guards = guards
        self.actions = actions
        self.ids: dict[str, Element] = {}
        self.keys: dict[int, str] = {}
        self.actors: dict[str, Any] = {}
        self.variables: list[str] = []
        self.late = False
        self.invoke_ids: list[str] = []

    def error(self, element: Element, message: str) -> ScxmlError:
        """A load error naming the element's line."""
        return ScxmlError(f"{self.source}:{element.line}: {message}")

    # -- the document ------------------------------------------------------------------------

    def machine(self, root: Element) -> Machine:
        """The machine for ``root``."""
        self.late = root.get("binding", "early") == "late"
        self._collect(root)
        self._check_expressions(root)
        name = root.get("name")
        machine_id = name or "scxml"
        while machine_id in self.ids:
            machine_id += "_"
        config = self._compound_parts(root, machine_id)
        config["id"] = machine_id
        data = [d for d in root.child_elements("datamodel") for d in d.child_elements("data")]
        if not self.late:
            data = self._all_data(root)
        scripts = [Script(s.text, s.line) for s in root.child_elements("script")]
        if scripts and not self.evaluator.trusted:
            raise self.error(
                root.child_elements("script")[0],
                "<script> needs a trusted document (load_scxml(..., trusted=True))",
            )
        entry: list[Any] = [self._data_hook(data, None)]
        if scripts:
            entry.append(
                Block(scripts, self.evaluator, "script", "".join(script.code for script in scripts))
            )
        config["entry"] = entry
        config["exit"] = [Hook(_announce_done, self.evaluator, "done.invoke")]
        config["context"] = _context_factory(name, list(self.variables))
        config["output"] = _done_output
        _prepend_to_atomic(config, [_DropCancelled(frozenset(self.invoke_ids))])
        return create_machine(config, actors=self.actors, actions=self.actions)

    def _collect(self, element: Element) -> None:
        keys: set[str] = set()
        for child in element.children:
            if child.tag in STATE_TAGS:
                state_id = child.get("id") or f"_{child.tag}{len(self.ids)}"
                if state_id in self.ids:
                    raise self.error(
                        child,
                        f"duplicate state id {state_id!r} (first at line "
                        f"{self.ids[state_id].line})",
                    )
                child.attrs["id"] = state_id
                self.ids[state_id] = child
                self.keys[id(child)] = _state_key(state_id, keys)
                self._collect(child)
            elif child.tag == "datamodel":
                for data in child.child_elements("data"):
                    if data.get("id") is None:
                        raise self.error(data, "<data> needs an 'id'")
                    if data.get("id") not in self.variables:
                        self.variables.append(str(data.get("id")))

    def _check_expressions(self, element: Element) -> None:
        if self.evaluator.trusted:
            return
        for name, value in element.attrs.items():
            if name in EXPRESSION_ATTRS:
                try:
                    check_expression(value, frozenset(self.guards))
                except ExpressionRefused as exc:
                    raise self.error(element, f"<{element.tag} {name}={value!r}>: {exc}") from None
        for child in element.children:
            if child.tag == "content" and child.child_elements("scxml"):
                continue  # an invoked document is checked when it is compiled
            self._check_expressions(child)

    def _all_data(self, element: Element) -> list[Element]:
        found = []
        for child in element.children:
            if child.tag == "datamodel":
                found += child.child_elements("data")
            elif child.tag in STATE_TAGS:
                found += self._all_data(child)
        return found

    # -- states ------------------------------------------------------------------------------

    def _states(self, parent: Element) -> dict[str, Any]:
        states: dict[str, Any] = {}
        for child in parent.child_elements(*STATE_TAGS):
            states[self._key(child)] = self._state(child)
            if child.tag == "history":
                self._history_default(child, states)
        return states

    def _history_default(self, element: Element, states: dict[str, Any]) -> None:
        """A default history transition with content goes through a transient sibling state
        whose eventless transition runs the content (XState's history has no actions)."""
        transitions = element.child_elements("transition")
        body = self._instructions(transitions[0]) if transitions else ()
        if not body:
            return
        key = f"_default_{self._key(element)}"
        states[key] = {
            "id": f"{element.get('id')}._default",
            "always": [
                {
                    "target": states[self._key(element)]["target"],
                    "actions": [Block(body, self.evaluator, "history default", element.xml())],
                }
            ],
        }
        states[self._key(element)]["target"] = f"#{element.get('id')}._default"

    def _key(self, element: Element) -> str:
        return self.keys[id(element)]

    def _state(self, element: Element) -> dict[str, Any]:
        state_id = str(element.get("id"))
        if element.tag == "history":
            return self._history(element, state_id)
        config: dict[str, Any] = {"id": state_id}
        if element.tag == "parallel":
            config["type"] = "parallel"
            config["states"] = self._states(element)
        elif element.tag == "final":
            config["type"] = "final"
            donedata = element.child_elements("donedata")
            if donedata:
                config["output"] = _DoneData(state_id)
        elif element.child_elements(*STATE_TAGS):
            config.update(self._compound_parts(element, state_id))
        entry: list[Any] = []
        if self.late and element.child_elements("datamodel"):
            data = [
                d for m in element.child_elements("datamodel") for d in m.child_elements("data")
            ]
            entry.append(self._data_hook(data, state_id))
        entry += [self._block(e, "onentry") for e in element.child_elements("onentry")]
        if element.tag == "final" and element.child_elements("donedata"):
            entry.append(self._donedata_hook(element.child_elements("donedata")[0], state_id))
        exit_: list[Any] = [self._block(e, "onexit") for e in element.child_elements("onexit")]
        invokes = element.child_elements("invoke")
        heads: list[Any] = []
        for n, invoke in enumerate(invokes):
            start, stop, head = self._invoke(invoke, state_id, n)
            entry.append(start)
            exit_.append(stop)
            heads += head
        if entry:
            config["entry"] = entry
        config["exit"] = [Hook(_announce_done, self.evaluator, "done.invoke")]
        if exit_:
            config["exit"] = exit_
        self._transitions(element, config)
        if heads:
            _prepend_to_atomic(config, heads)
        return config

    def _compound_parts(self, element: Element, state_id: str) -> dict[str, Any]:
        states = self._states(element)
        children = element.child_elements(*STATE_TAGS)
        initial_el = element.child_elements("initial")
        body: tuple[Instruction, ...] = ()
        if initial_el:
            initial_transitions = initial_el[0].child_elements("transition")
            if not initial_transitions or not initial_transitions[0].get("target"):
                raise self.error(initial_el[0], "<initial> needs a <transition> with a target")
            targets = str(initial_transitions[0].get("target")).split()
            body = self._instructions(initial_transitions[0])
            where = initial_transitions[0]
        elif element.get("initial"):
            targets = str(element.get("initial")).split()
            where = element
        else:
            first = next((c for c in children if c.tag != "history"), None)
            if first is None:
                raise self.error(element, f"<{element.tag}> has no child state to start in")
            targets, where = [str(first.get("id"))], element
        for target in targets:
            self._resolve(target, where)
        direct = {str(c.get("id")): c for c in children}
        if len(targets) == 1 and targets[0] in direct and not body:
            return {"initial": self._key(direct[targets[0]]), "states": states}
        key = "_initial"
        while key in states:
            key += "_"
        transition: dict[str, Any] = {"target": [f"#{t}" for t in targets]}
        if body:
            transition["actions"] = [Block(body, self.evaluator, "initial", where.xml())]
        synthetic = {"id": f"{state_id}._initial", "always": [transition]}
        return {"initial": key, "states": {key: synthetic, **states}}

    def _history(self, element: Element, state_id: str) -> dict[str, Any]:
        config: dict[str, Any] = {
            "id": state_id,
            "type": "history",
            "history": element.get("type", "shallow"),
        }
        if config["history"] not in ("shallow", "deep"):
            raise self.error(element, "history type is 'shallow' or 'deep'")
        transitions = element.child_elements("transition")
        if transitions and transitions[0].get("target"):
            targets = str(transitions[0].get("target")).split()
            for target in targets:
                self._resolve(target, transitions[0])
            config["target"] = [f"#{t}" for t in targets]
        return config

    def _is_descendant(self, node: Element, ancestor: Element) -> bool:
        return any(
            c is node or self._is_descendant(node, c) for c in ancestor.child_elements(*STATE_TAGS)
        )

    def _resolve(self, target: str, where: Element) -> Element:
        found = self.ids.get(target)
        if found is None:
            raise self.error(where, f"no state with id {target!r}")
        return found

    # -- transitions -------------------------------------------------------------------------

    def _transitions(self, element: Element, config: dict[str, Any]) -> None:
        on: list[dict[str, Any]] = []
        always: list[dict[str, Any]] = []
        for transition in element.child_elements("transition"):
            events = transition.get("event")
            descriptors = tuple(events.split()) if events and events.strip() else None
            cond = transition.get("cond")
            cond = cond if cond is not None and cond.strip() else None
            kind = transition.get("type", "external")
            if kind not in ("external", "internal"):
                raise self.error(transition, "transition type is 'external' or 'internal'")
            unknown = self._unknown_targets(transition)
            item = (
                self._failing_transition(transition, unknown)
                if unknown
                else self._transition(transition, element, kind)
            )
            if descriptors is not None or cond is not None:
                item["guard"] = Condition(descriptors, cond, self.evaluator)
            (on if descriptors is not None else always).append(item)
        if on:
            config["on"] = {"*": on}
        if always:
            config["always"] = always

    def _transition(self, transition: Element, source: Element, kind: str) -> dict[str, Any]:
        """A transition's target, ``reenter`` and content (its guard is added by the caller)."""
        item: dict[str, Any] = {}
        targets = _targets(transition)
        if targets:
            item["target"] = [f"#{t}" for t in targets]
        inside = all(self._is_descendant(self.ids[t], source) for t in targets)
        item["reenter"] = kind == "external" or source.tag == "parallel" or not inside
        body = self._instructions(transition)
        if body:
            item["actions"] = [Block(body, self.evaluator, "transition", transition.xml())]
        return item

    def _unknown_targets(self, transition: Element) -> list[str]:
        """The targets of ``transition`` that name no state of this document. A top-level
        document may have none: it fails to load, naming the line."""
        targets = _targets(transition)
        if not self.invoked:
            for target in targets:
                self._resolve(target, transition)
        return [t for t in targets if t not in self.ids]

    def _failing_transition(self, transition: Element, unknown: list[str]) -> dict[str, Any]:
        """An invoked document's transition to states it does not have (an invalid document,
        which SCXML leaves undefined; W3C test 240 has one on a path it never takes). The child
        is a separate session, so it must not fail its parent's load: it loads with an
        ``ScxmlWarning``, and the transition, if ever taken, raises ``error.execution`` in the
        child instead of running its content and taking its target."""
        problem = (
            f"{self.source}:{transition.line}: <transition target="
            f"{transition.get('target')!r}>: no state with id "
            f"{', '.join(repr(t) for t in unknown)} in this invoked document"
        )
        warnings.warn(
            f"{problem}; the transition raises error.execution if taken", ScxmlWarning, stacklevel=1
        )  # the message names the line
        self._instructions(transition)  # its content is checked as strictly, never run
        return {
            "actions": [
                Block(
                    (Fail(problem, transition.line),),
                    self.evaluator,
                    "transition",
                    transition.xml(),
                )
            ]
        }

    # -- executable content ------------------------------------------------------------------

    def _block(self, element: Element, label: str) -> Block:
        return Block(self._instructions(element), self.evaluator, label, element.xml())

    def _instructions(self, element: Element) -> tuple[Instruction, ...]:
        return tuple(
            self._instruction(child)
            for child in element.children
            if child.tag not in ("elseif", "else")
        )

    def _instruction(self, el: Element) -> Instruction:
        tag, line = el.tag, el.line
        if el.namespace == STATECHARTS_NS:
            return self._named_action(el)
        if tag == "raise":
            if not el.get("event"):
                raise self.error(el, "<raise> needs an 'event'")
            return RaiseEvent(str(el.get("event")), line)
        if tag == "send":
            return self._send(el)
        if tag == "cancel":
            return CancelSend(el.get("sendid"), el.get("sendidexpr"), line)
        if tag == "assign":
            if not el.get("location"):
                raise self.error(el, "<assign> needs a 'location'")
            return Assign(
                str(el.get("location")),
                el.get("expr"),
                None if el.get("expr") is not None else inline_value(el),
                line,
            )
        if tag == "log":
            return LogValue(el.get("label"), el.get("expr"), line)
        if tag == "if":
            return self._if(el)
        if tag == "foreach":
            if not el.get("array") or not el.get("item"):
                raise self.error(el, "<foreach> needs 'array' and 'item'")
            return Foreach(
                str(el.get("array")),
                str(el.get("item")),
                el.get("index"),
                self._instructions(el),
                line,
            )
        if tag == "script":
            if not self.evaluator.trusted:
                raise self.error(
                    el, "<script> needs a trusted document (load_scxml(..., trusted=True))"
                )
            return Script(el.text, line)
        raise self.error(el, f"<{tag}> is not executable content")

    def _named_action(self, el: Element) -> NamedAction:
        name = str(el.get("type"))
        if name not in self.actions:
            known = ", ".join(sorted(self.actions)) or "none were given"
            raise self.error(
                el, f"no action {name!r} (load_scxml(..., actions={{...}}); known: {known})"
            )
        params = []
        for param in el.child_elements("param"):
            if not param.get("name") or param.get("expr") is None:
                raise self.error(param, "an action <param> needs 'name' and 'expr'")
            params.append((str(param.get("name")), str(param.get("expr"))))
        return NamedAction(name, tuple(params), el.line)

    def _if(self, el: Element) -> If:
        branches: list[tuple[str | None, list[Instruction]]] = [(el.get("cond"), [])]
        if el.get("cond") is None:
            raise self.error(el, "<if> needs a 'cond'")
        for child in el.children:
            if child.tag == "elseif":
                branches.append((child.get("cond") or "False", []))
            elif child.tag == "else":
                branches.append((None, []))
            else:
                branches[-1][1].append(self._instruction(child))
        return If(tuple((c, tuple(b)) for c, b in branches), el.line)

    def _send(self, el: Element) -> Send:
        if (
            el.get("event") is None
            and el.get("eventexpr") is None
            and (el.get("type") is None or is_scxml_type(el.get("type")))
        ):
            raise self.error(el, "<send> needs 'event' or 'eventexpr'")
        payload = self._payload(el)
        if (payload.content_expr is not None or payload.has_content) and (
            payload.params or payload.namelist
        ):
            raise self.error(el, "<send> takes <content> or <param>/namelist, not both")
        return Send(
            el.get("event"),
            el.get("eventexpr"),
            el.get("target"),
            el.get("targetexpr"),
            el.get("type"),
            el.get("typeexpr"),
            el.get("id"),
            el.get("idlocation"),
            el.get("delay"),
            el.get("delayexpr"),
            payload,
            el.line,
        )

    def _payload(self, el: Element) -> Payload:
        params = []
        for param in el.child_elements("param"):
            if not param.get("name"):
                raise self.error(param, "<param> needs a 'name'")
            params.append((str(param.get("name")), param.get("expr"), param.get("location")))
        content = el.child_elements("content")
        content_expr = content[0].get("expr") if content else None
        has_content = bool(content) and content_expr is None
        return Payload(
            tuple(params),
            tuple((el.get("namelist") or "").split()),
            content_expr,
            inline_value(content[0]) if has_content else None,
            has_content,
        )

    # -- datamodel ---------------------------------------------------------------------------

    def _data_hook(self, data: list[Element], state_id: str | None) -> Hook:
        items = [(str(d.get("id")), d.get("expr"), self._data_value(d), d.line) for d in data]
        evaluator = self.evaluator

        def initialize(session: Session) -> None:
            if state_id is not None:
                bound = list(session.meta.get("bound") or ())
                if state_id in bound:
                    return
                session.set_meta(bound=[*bound, state_id])
            params = session.meta.get("params") or {}
            for name, expr, inline, _line in items:
                if name in params:
                    session.set(name, params[name])
                    continue
                try:
                    value = session.evaluate(expr) if expr is not None else inline
                    session.set(name, value)
                except ContentError as exc:
                    session.scope.raise_internal(platform_error(exc.kind, str(exc)))

        return Hook(initialize, evaluator, "datamodel", "".join(d.xml() for d in data))

    def _donedata_hook(self, donedata: Element, state_id: str) -> Hook:
        payload = self._payload(donedata)

        def evaluate(session: Session) -> None:
            try:
                value = payload.evaluate(session)
            except ContentError as exc:
                session.scope.raise_internal(platform_error(exc.kind, str(exc)))
                value = None
            done = dict(session.meta.get("donedata") or {})
            done[state_id] = value
            try:
                session.set_meta(donedata=done)
            except Exception:  # not JSON data: the done event carries nothing
                done[state_id] = None
                session.set_meta(donedata=done)

        return Hook(evaluate, self.evaluator, "donedata", donedata.xml())

    def _data_value(self, data: Element) -> Any:
        src = data.get("src")
        if src is not None:
            return file_value(self._read_file(src, data).read_text(encoding="utf-8"))
        if data.children or data.text.strip():
            return inline_value(data)
        return None

    def _read_file(self, src: str, where: Element) -> Path:
        name = src.removeprefix("file:")
        path = (self.base / name).resolve()
        if not self.evaluator.trusted and self.base.resolve() not in path.parents:
            raise self.error(where, f"{src!r} is outside the document's folder")
        if not path.is_file():
            raise self.error(where, f"no file {src!r} (looked in {self.base})")
        return path

    # -- invoke ------------------------------------------------------------------------------

    def _invoke(self, el: Element, state_id: str, n: int) -> tuple[Hook, Hook, list[Any]]:
        kind = el.get("type")
        invoke_id = el.get("id") or f"{state_id}.invoke{n}"
        self.invoke_ids.append(invoke_id)
        logic = self._invoked_logic(el)
        src_name = f"scxml:{state_id}:{n}"
        if logic is not None:
            self.actors[src_name] = logic
        payload = self._payload(
            Element(
                "invoke",
                {"namelist": el.get("namelist") or ""},
                el.line,
                children=el.child_elements("param"),
            )
        )
        srcexpr, typeexpr, idlocation = el.get("srcexpr"), el.get("typeexpr"), el.get("idlocation")
        contents = el.child_elements("content")
        content_expr = contents[0].get("expr") if contents else None
        loader = self._runtime_loader(el)

        def start(session: Session) -> None:
            if invoke_id in (session.meta.get("stillborn") or ()):
                session.set_meta(stillborn=[i for i in session.meta["stillborn"] if i != invoke_id])
            if idlocation is not None:
                session.assign(idlocation, invoke_id)
            invoke_type = session.evaluate(typeexpr) if typeexpr is not None else kind
            if invoke_type is not None and not is_scxml_type(invoke_type):
                raise ContentError(f"invoke type {invoke_type!r} is not supported")
            params = payload.evaluate(session)
            child_input = {
                "invokeid": invoke_id,
                "params": params or {},
                "parent": session.session_id,
            }
            if srcexpr is not None:
                src = session.evaluate(srcexpr)
                session.scope.spawn(invoke_id, str(src), child_input, None, None, loader(src))
            elif content_expr is not None:
                document = session.evaluate(content_expr)
                session.scope.spawn(invoke_id, src_name, child_input, None, None, loader(document))
            else:
                session.scope.spawn(invoke_id, src_name, child_input, None)

        def stop(session: Session) -> None:
            # SCXML starts invocations at the end of a macrostep, for states still active;
            # one started and cancelled within a macrostep never existed: its events go
            if any(
                isinstance(e, StartChild) and e.id == invoke_id
                for e in getattr(session.scope, "effects", ())
            ):
                stillborn = list(session.meta.get("stillborn") or ())
                session.set_meta(stillborn=[*stillborn, invoke_id])
            session.scope.stop_child(invoke_id)

        heads: list[Any] = []
        finalize = el.child_elements("finalize")
        if finalize:
            heads.append(_Finalize(invoke_id, self._instructions(finalize[0]), self.evaluator))
        if el.get("autoforward") == "true":
            heads.append(_Autoforward(invoke_id))
        return (
            Hook(start, self.evaluator, f"invoke {invoke_id}", el.xml()),
            Hook(stop, self.evaluator, f"cancel {invoke_id}", el.xml()),
            heads,
        )

    def _invoked_logic(self, el: Element) -> Machine | None:
        content = el.child_elements("content")
        documents = content[0].child_elements("scxml") if content else []
        if documents:
            return self._child(documents[0], self.source, self.base)
        if content and content[0].get("expr") is not None:
            return None
        src = el.get("src")
        if src is not None:
            return self._child_file(self._read_file(src, el))
        if el.get("srcexpr") is None:
            raise self.error(el, "<invoke> needs 'src', 'srcexpr' or a <content> document")
        return None

    def _child(self, root: Element, source: str, base: Path) -> Machine:
        """An invoked document; ``source`` names it in errors (the file it is in)."""
        return Compiler(
            source, base, self.evaluator, self.guards, self.actions, invoked=True
        ).machine(root)

    def _child_file(self, path: Path) -> Machine:
        """An invoked document read from ``path`` (its errors name that file)."""
        return self._child(
            parse_document(path.read_text(encoding="utf-8"), str(path)), str(path), path.parent
        )

    def _runtime_loader(self, el: Element) -> Callable[[Any], Machine]:
        cache: dict[str, Machine] = {}

        def load(src: Any) -> Machine:
            if isinstance(src, ElementTree.Element):
                src = ElementTree.tostring(src, encoding="unicode")
            if not isinstance(src, str):
                raise ContentError(f"invoke src {src!r} is not a string")
            if src not in cache:
                try:
                    if src.lstrip().startswith("<"):
                        cache[src] = self._child(
                            parse_document(src, self.source), self.source, self.base
                        )
                    else:
                        cache[src] = self._child_file(self._read_file(src, el))
                except ScxmlError as exc:
                    raise ContentError(str(exc), "error.execution") from None
            return cache[src]

        return load


def _targets(transition: Element) -> list[str]:
    """The state ids a ``<transition>`` names in ``target`` (none for a targetless one)."""
    return str(transition.get("target") or "").split()


def _state_key(state_id: str, taken: set[str]) -> str:
    """The config key of a state: the last dotted part of its id (``m.a.b`` -> ``b``, so
    exported machines load with the same state values), unless a sibling has it already."""
    key = state_id.rsplit(".", 1)[-1].lstrip("#")
    if not key or key in taken:
        key = state_id.replace(".", "_").lstrip("#") or "_"
    while key in taken:
        key += "_"
    taken.add(key)
    return key


def inline_value(element: Element) -> Any:
    """The value of inline content: XML children (stored as ``{"__xml__": text}``), else the
    text as a Python literal, else the whitespace-normalized text."""
    elements = element.children
    if len(elements) == 1:
        return {XML_KEY: elements[0].xml()}
    if elements:
        return {XML_KEY: "<content>" + "".join(c.xml() for c in elements) + "</content>"}
    return literal(element.text)


def file_value(text: str) -> Any:
    """The value of a ``<data src>`` file: XML if it is XML, else as inline text."""
    stripped = text.strip()
    if stripped.startswith("<"):
        try:
            ElementTree.fromstring(stripped)
        except ElementTree.ParseError:
            return literal(text)
        return {XML_KEY: stripped}
    return literal(text)


class _DoneData:
    """A final state's output: its ``<donedata>`` as the entry hook evaluated it."""

    def __init__(self, state_id: str) -> None:
        self.state_id = state_id

    def __call__(self, context: Any, event: Any) -> Any:
        return ((context.get(META) or {}).get("donedata") or {}).get(self.state_id)


def _done_output(context: Any, event: Any) -> Any:
    return event.get("output")


def _context_factory(name: str | None, variables: list[str]) -> Callable[[Any], dict[str, Any]]:
    def context(input: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"sessionid": uuid.uuid4().hex, "name": name, "seq": 0, "bound": []}
        if isinstance(input, Mapping):
            meta.update(
                invokeid=input.get("invokeid"),
                parent=input.get("parent"),
                params=input.get("params") or {},
            )
        return {**dict.fromkeys(variables), META: meta}

    return context


class _Seen:
    """The events a head guard already handled (a parallel state's regions each see it)."""

    def __init__(self) -> None:
        self.events: dict[int, Any] = {}

    def first_time(self, event: Any) -> bool:
        key = id(event)
        if key in self.events and self.events[key] is event:
            return False
        if len(self.events) > 256:
            self.events.clear()
        self.events[key] = event
        return True


class _Finalize:
    """``<finalize>``: runs when an event from the invoked child arrives, before transitions
    are selected (a guard at the head of the candidates that never passes)."""

    takes_scope = True

    def __init__(self, invoke_id: str, body: tuple[Instruction, ...], evaluator: Evaluator) -> None:
        self.invoke_id = invoke_id
        self.body = body
        self.evaluator = evaluator
        self.name = f"finalize:{invoke_id}"
        self.seen = _Seen()

    def __call__(self, context: Any, event: Any, scope: Any) -> bool:
        if event.get("invokeid") == self.invoke_id and self.seen.first_time(event):
            session = Session(scope, self.evaluator, event)
            try:
                run_all(session, self.body)
            except ContentError as exc:
                scope.raise_internal(platform_error(exc.kind, str(exc)))
        return False


class _DropCancelled:
    """Events from an invocation that was started and cancelled within one macrostep are
    discarded (SCXML would never have started it); the engine's own ``xstate.done.actor``
    events are swallowed too, since SCXML children send ``done.invoke`` themselves, in order
    after their last events."""

    takes_scope = True
    name = "scxml:from-cancelled-invocation"

    def __init__(self, invoke_ids: frozenset[str]) -> None:
        self.invoke_ids = invoke_ids

    def __call__(self, context: Any, event: Any, scope: Any) -> bool:
        kind = str(event.get("type", ""))
        if kind.startswith("xstate.done.actor."):
            return kind[len("xstate.done.actor.") :] in self.invoke_ids
        invoke_id = event.get("invokeid")
        return invoke_id in self.invoke_ids and invoke_id in (
            (context.get(META) or {}).get("stillborn") or ()
        )


def _announce_done(session: Session) -> None:
    """An invoked session that reached its top-level final state tells its parent."""
    invoke_id = session.meta.get("invokeid")
    if invoke_id is not None and getattr(session.scope, "status", None) == "done":
        session.scope.effect(
            SendParent(
                FrozenDict(
                    type=f"done.invoke.{invoke_id}",
                    eventtype="external",
                    invokeid=invoke_id,
                    data=getattr(session.scope, "output", None),
                )
            )
        )


class _Autoforward:
    """``autoforward="true"``: external events go on to the child too."""

    takes_scope = True

    def __init__(self, invoke_id: str) -> None:
        self.invoke_id = invoke_id
        self.name = f"autoforward:{invoke_id}"
        self.seen = _Seen()

    def __call__(self, context: Any, event: Any, scope: Any) -> bool:
        kind = str(event.get("type", ""))
        external = event.get("eventtype", "external") == "external" and not kind.startswith(
            "xstate."
        )
        if (
            external
            and self.invoke_id in getattr(scope, "children", {})
            and self.seen.first_time(event)
        ):
            scope.effect(SendTo(self.invoke_id, FrozenDict(event)))
        return False


def _prepend_to_atomic(config: dict[str, Any], guards: list[Any]) -> None:
    """Put never-passing ``guards`` first among the ``*`` transitions of every atomic state
    at or below ``config``."""
    states = config.get("states")
    if states and config.get("type") != "history":
        for child in states.values():
            if child.get("type") != "history":
                _prepend_to_atomic(child, guards)
        return
    on = config.setdefault("on", {})
    on["*"] = [*({"guard": g} for g in guards), *on.get("*", [])]
