"""What an SCXML document does while it runs: its datamodel, ``_event`` and system variables,
conditions, and executable content.

Executable content compiles to ``Block`` (a built-in action the pure core resolves against its
action scope), so assignments change the machine's context, ``<raise>`` queues internal events
and ``<send>`` schedules timers or sends to other actors, all inside the engine's pure step. An
expression that fails stops its block and queues ``error.execution``, as SCXML requires.

The datamodel lives in the context: one key per ``<data>`` id, plus ``__scxml__`` for the
session's own bookkeeping (session id, name, the counter for generated send ids, the states
whose late-bound data is initialized, invocation parameters). Expressions cannot read names
starting with ``__``, so documents never see it.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...actions import BuiltinAction
from ...effects import Log, SendParent, SendTo
from ...errors import StatechartError
from ...frozen import FrozenDict, freeze, thaw
from ...limits import MAX_DELAY
from .errors import ExpressionError
from .evaluator import Evaluator, Provided, Record, Work, records, working

META = "__scxml__"
SCXML_PROCESSOR = "http://www.w3.org/TR/scxml/#SCXMLEventProcessor"
SCXML_TYPES = (SCXML_PROCESSOR, "scxml", "http://www.w3.org/TR/scxml")
SYSTEM_VARIABLES = frozenset({"_event", "_sessionid", "_name", "_ioprocessors", "_x"})
_DURATION = re.compile(r"^\s*(\d*\.?\d+)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class OriginType(str):
    """The SCXML processor's origintype: equal to its URI and to its short name ``scxml``."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return other in (SCXML_PROCESSOR, "scxml")

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__


class ContentError(Exception):
    """Executable content failed; the block stops and ``error.<kind>`` is raised."""

    def __init__(
        self, message: str, kind: str = "error.execution", sendid: str | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.sendid = sendid


# -- events ---------------------------------------------------------------------------------


def scxml_event(event: Mapping[str, Any] | None) -> Record | None:
    """The SCXML ``_event`` for an engine event (engine done/error events renamed)."""
    if event is None:
        return None
    kind = str(event.get("type", ""))
    if kind == "xstate.init":
        return None
    fields: dict[str, Any] = {
        "name": kind,
        "type": event.get("eventtype", "external"),
        "sendid": event.get("sendid"),
        "origin": event.get("origin"),
        "origintype": event.get("origintype"),
        "invokeid": event.get("invokeid"),
        "data": event.get("data"),
    }
    if kind.startswith("xstate.done.state."):
        fields.update(name="done.state." + kind[18:], type="internal", data=event.get("output"))
    elif kind.startswith("xstate.done.actor."):
        fields.update(name="done.invoke." + kind[18:], invokeid=kind[18:], data=event.get("output"))
    elif kind.startswith("xstate.error.actor."):
        fields.update(
            name="error.communication", type="platform", invokeid=kind[19:], data=event.get("error")
        )
    if fields["origintype"] == SCXML_PROCESSOR:
        fields["origintype"] = OriginType(SCXML_PROCESSOR)
    return records(fields)  # type: ignore[no-any-return]


def event_name(event: Mapping[str, Any]) -> str:
    """The SCXML name of an engine event."""
    found = scxml_event(event)
    return str(found["name"]) if found is not None else ""


def descriptor_matches(descriptors: Sequence[str], name: str) -> bool:
    """SCXML matching: ``*``, or a descriptor equal to the name or a prefix of its tokens
    (``error`` and ``error.*`` both match ``error.send.failed``)."""
    for descriptor in descriptors:
        token = descriptor.removesuffix("*").removesuffix(".")
        if descriptor == "*" or name == token or name.startswith(token + "."):
            return True
    return False


def is_scxml_type(kind: Any) -> bool:
    """True for the SCXML event processor's names (with or without a trailing slash)."""
    return isinstance(kind, str) and kind.rstrip("/") in SCXML_TYPES


def platform_error(kind: str, message: str, sendid: str | None = None) -> FrozenDict:
    """An ``error.execution`` / ``error.communication`` event."""
    event: dict[str, Any] = {"type": kind, "eventtype": "platform", "data": message}
    if sendid is not None:
        event["sendid"] = sendid
    return FrozenDict(event)


# -- the datamodel ----------------------------------------------------------------------------


class Session:
    """One evaluation context: the action scope, the evaluator and the names in scope."""

    def __init__(self, scope: Any, evaluator: Evaluator, event: Any = None) -> None:
        self.scope = scope
        self.evaluator = evaluator
        self.event = event if event is not None else scope.event
        self._env: dict[str, Any] | None = None
        self.work = Work()

    @property
    def meta(self) -> Mapping[str, Any]:
        """The session's bookkeeping (``__scxml__`` in the context)."""
        return self.scope.context.get(META) or {}

    @property
    def session_id(self) -> str:
        """This session's ``_sessionid``."""
        return str(self.meta.get("sessionid", ""))

    def env(self) -> dict[str, Any]:
        """The names an expression sees: datamodel variables, system variables, ``In``."""
        if self._env is None:
            context = self.scope.context
            env = {k: records(v) for k, v in context.items() if k != META}
            meta = self.meta
            location = f"#_scxml_{meta.get('sessionid', '')}"
            env.update(
                _event=scxml_event(self.event),
                _sessionid=meta.get("sessionid"),
                _name=meta.get("name"),
                _ioprocessors=Record(
                    {SCXML_PROCESSOR: Record(location=location), "scxml": Record(location=location)}
                ),
                In=self.scope.in_state,
            )
            for name, fn in self.evaluator.functions.items():
                env[name] = Provided(_bind(fn, self.scope.context, self.event))
            self._env = env
        return self._env

    def evaluate(self, text: str) -> Any:
        """The value of expression ``text``; failures become ``ContentError``."""
        try:
            with working(self.work):
                return self.evaluator.evaluate(text, self.env())
        except ExpressionError as exc:
            raise ContentError(str(exc)) from None

    def declared(self, name: str) -> bool:
        """True when ``name`` is a datamodel variable."""
        return name in self.scope.context and name != META

    def assign(self, location: str, value: Any) -> None:
        """``<assign location=... >``: a declared variable, or an item/attribute inside one."""
        try:
            target = ast.parse(location.strip(), mode="eval").body
        except SyntaxError:
            raise ContentError(f"invalid location {location!r}") from None
        path: list[Any] = []
        while isinstance(target, ast.Attribute | ast.Subscript):
            if isinstance(target, ast.Attribute):
                if target.attr.startswith("_"):
                    raise ContentError(f"the location {location!r} is not allowed")
                path.append(target.attr)
            else:
                path.append(self.evaluate(ast.unparse(target.slice)))
            target = target.value
        if not isinstance(target, ast.Name):
            raise ContentError(f"invalid location {location!r}")
        name = target.id
        if name in SYSTEM_VARIABLES or name.startswith("_"):
            raise ContentError(f"{name} is read-only")
        if not self.declared(name):
            raise ContentError(f"{name!r} is not declared in the datamodel")
        if path:
            root = thaw(self.scope.context[name])
            holder = root
            try:
                for key in reversed(path[1:]):
                    holder = holder[key]
                holder[path[0]] = value
            except (KeyError, IndexError, TypeError) as exc:
                raise ContentError(f"cannot assign {location!r}: {exc}") from None
            value = root
        self.set(name, value)

    def set(self, name: str, value: Any) -> None:
        """Store ``value`` in variable ``name`` (it must be JSON data)."""
        try:
            self.scope.assign({name: freeze(_plain(value), name)})
            if self._env is not None:  # only the new value is read anew (a loop sets one name)
                with working(self.work):
                    self._env[name] = records(self.scope.context[name])
        except (TypeError, StatechartError) as exc:
            raise ContentError(f"cannot store {name!r}: {exc}") from None
        except ExpressionError as exc:
            raise ContentError(str(exc)) from None

    def set_meta(self, **changes: Any) -> None:
        """Update the session's bookkeeping (the names expressions see don't change)."""
        self.scope.assign({META: {**self.meta, **changes}})

    def next_id(self, prefix: str) -> str:
        """A new platform-generated id (``send.3``), unique within the session."""
        seq = int(self.meta.get("seq", 0)) + 1
        self.set_meta(seq=seq)
        return f"{prefix}.{self.session_id[:8]}.{seq}"

    def run_script(self, code: str) -> None:
        """``<script>`` (trusted documents): its changes to datamodel variables are kept."""
        env = dict(self.env())
        before = {k: env[k] for k in env if self.declared(k)}
        try:
            self.evaluator.execute(code, env)
        except ExpressionError as exc:
            raise ContentError(str(exc)) from None
        for name, value in env.items():
            if name.startswith("_") or name == "In" or callable(value):
                continue
            if name not in before or before[name] is not value:
                try:
                    self.scope.assign({name: freeze(_plain(value), name)})
                except (TypeError, StatechartError):
                    continue  # non-JSON values (objects, functions) live only in the script
        self._env = None


def _bind(fn: Callable[..., Any], context: Any, event: Any) -> Callable[..., Any]:
    def guard(**params: Any) -> Any:
        return fn(context, event, **params)

    return guard


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    return value


def parse_duration(value: Any) -> int:
    """Milliseconds for an SCXML delay (``'1s'``, ``'.5s'``, ``'200ms'``, a number of ms)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        ms = value
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise ContentError(f"invalid delay {value!r} (e.g. '1s', '500ms')")
        ms = float(match.group(1)) * _UNITS[match.group(2)]
    if not ms <= MAX_DELAY:  # NaN and infinity too: an error.execution, like any bad delay
        raise ContentError(f"invalid delay {value!r} (at most {MAX_DELAY} ms)")
    return int(ms)


def literal(text: str) -> Any:
    """Inline ``<content>``/``<data>`` text: a Python literal if it is one, else the text."""
    stripped = text.strip()
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return " ".join(stripped.split())


# -- executable content -----------------------------------------------------------------------


class Instruction:
    """One element of executable content."""

    line: int = 0

    def run(self, session: Session) -> None:
        """Execute; raise ``ContentError`` to stop the enclosing block."""
        raise NotImplementedError


@dataclass
class Payload:
    """``<param>``s, ``namelist`` and ``<content>`` of a send, invoke or donedata."""

    params: tuple[tuple[str, str | None, str | None], ...] = ()  # (name, expr, location)
    namelist: tuple[str, ...] = ()
    content_expr: str | None = None
    content: Any = None
    has_content: bool = False

    def evaluate(self, session: Session) -> Any:
        """The data: the content, or a mapping of params and namelist variables (or None)."""
        if self.content_expr is not None:
            return session.evaluate(self.content_expr)
        if self.has_content:
            return self.content
        if not self.params and not self.namelist:
            return None
        data: dict[str, Any] = {}
        for name in self.namelist:
            if not session.declared(name):
                raise ContentError(f"namelist: {name!r} is not a datamodel variable")
            data[name] = session.scope.context[name]
        for name, expr, location in self.params:
            data[name] = session.evaluate(expr if expr is not None else location or "")
        return data


@dataclass
class RaiseEvent(Instruction):
    """``<raise event>``: an internal event."""

    event: str
    line: int = 0

    def run(self, session: Session) -> None:
        session.scope.raise_internal(FrozenDict(type=self.event, eventtype="internal"))


@dataclass
class Send(Instruction):
    """``<send>``: to this session's external queue (now or after a delay), its internal
    queue, its parent or an invoked child."""

    event: str | None = None
    eventexpr: str | None = None
    target: str | None = None
    targetexpr: str | None = None
    type: str | None = None
    typeexpr: str | None = None
    id: str | None = None
    idlocation: str | None = None
    delay: str | None = None
    delayexpr: str | None = None
    payload: Payload = field(default_factory=Payload)
    line: int = 0

    def run(self, session: Session) -> None:
        sendid = self.id
        if self.idlocation is not None:
            sendid = session.next_id("send")
            session.assign(self.idlocation, sendid)
        try:
            self._send(session, sendid)
        except ContentError as exc:
            exc.sendid = sendid
            raise

    def _send(self, session: Session, sendid: str | None) -> None:
        name = self.event if self.eventexpr is None else session.evaluate(self.eventexpr)
        target = self.target if self.targetexpr is None else session.evaluate(self.targetexpr)
        kind = self.type if self.typeexpr is None else session.evaluate(self.typeexpr)
        delay = self.delay if self.delayexpr is None else session.evaluate(self.delayexpr)
        ms = parse_duration(delay) if delay is not None else 0
        data = self.payload.evaluate(session)
        if kind is not None and not is_scxml_type(kind):
            raise ContentError(f"send type {kind!r} is not supported")
        if not isinstance(name, str) or not name:
            raise ContentError(f"the event name {name!r} is not a non-empty string")
        event: dict[str, Any] = {
            "type": name,
            "eventtype": "external",
            "data": data,
            "origin": f"#_scxml_{session.session_id}",
            "origintype": SCXML_PROCESSOR,
        }
        if sendid is not None:
            event["sendid"] = sendid
        try:
            frozen = FrozenDict(freeze(event, "event"))
        except StatechartError as exc:
            raise ContentError(f"the event data is not JSON data: {exc}") from None
        self._dispatch(session, frozen, target, ms, sendid)

    def _dispatch(
        self, session: Session, event: FrozenDict, target: Any, ms: int, sendid: str | None
    ) -> None:
        scope = session.scope
        own = f"#_scxml_{session.session_id}"
        timer_id = sendid or session.next_id("send")
        if target is None or target == own:
            scope.schedule(timer_id, event, ms, None)
        elif not isinstance(target, str):
            raise ContentError(f"invalid send target {target!r}")
        elif target == "#_internal":
            scope.raise_internal(FrozenDict({**event, "eventtype": "internal"}))
        elif target == "#_parent" or target == f"#_scxml_{session.meta.get('parent')}":
            if session.meta.get("invokeid") is None:
                raise ContentError("this session has no parent", "error.communication")
            event = FrozenDict({**event, "invokeid": session.meta["invokeid"]})
            if ms:
                scope.schedule(timer_id, event, ms, "#parent")
            else:
                scope.effect(SendParent(event))
        elif target.startswith("#_scxml_"):
            raise ContentError(f"no session {target[8:]!r}", "error.communication")
        elif target.startswith("#_"):
            child = target[2:]
            if child not in getattr(scope, "children", {child: None}):
                raise ContentError(f"no invoked session {child!r}", "error.communication")
            if ms:
                scope.schedule(timer_id, event, ms, child)
            else:
                scope.effect(SendTo(child, event))
        else:
            raise ContentError(f"send target {target!r} is not supported")


@dataclass
class CancelSend(Instruction):
    """``<cancel sendid>``: drop a delayed send not yet delivered."""

    sendid: str | None = None
    sendidexpr: str | None = None
    line: int = 0

    def run(self, session: Session) -> None:
        sendid = self.sendid if self.sendidexpr is None else session.evaluate(self.sendidexpr)
        session.scope.cancel(str(sendid))


@dataclass
class Assign(Instruction):
    """``<assign location expr>`` (or inline content)."""

    location: str
    expr: str | None = None
    value: Any = None
    line: int = 0

    def run(self, session: Session) -> None:
        value = session.evaluate(self.expr) if self.expr is not None else self.value
        session.assign(self.location, value)


@dataclass
class LogValue(Instruction):
    """``<log label expr>``: a ``Log`` effect."""

    label: str | None = None
    expr: str | None = None
    line: int = 0

    def run(self, session: Session) -> None:
        value = session.evaluate(self.expr) if self.expr is not None else None
        try:
            value = freeze(value)
        except StatechartError:
            value = repr(value)
        session.scope.effect(Log(self.label, value))


@dataclass
class If(Instruction):
    """``<if>``/``<elseif>``/``<else>``: the first branch whose condition holds."""

    branches: tuple[tuple[str | None, tuple[Instruction, ...]], ...]
    line: int = 0

    def run(self, session: Session) -> None:
        for cond, body in self.branches:
            if cond is None or _truth(session, cond):
                run_all(session, body)
                return


@dataclass
class Foreach(Instruction):
    """``<foreach array item index>`` over a shallow copy of the array."""

    array: str
    item: str
    index: str | None = None
    body: tuple[Instruction, ...] = ()
    line: int = 0

    def run(self, session: Session) -> None:
        values = session.evaluate(self.array)
        if isinstance(values, Mapping):
            values = list(values.values())
        if not isinstance(values, list | tuple):
            raise ContentError(f"foreach: {self.array!r} is not an array")
        for name in (self.item, self.index):
            if name is not None and not _IDENTIFIER.match(name):
                raise ContentError(f"foreach: {name!r} is not a legal variable name")
        for position, value in enumerate(list(values)):
            session.set(self.item, value)
            if self.index is not None:
                session.set(self.index, position)
            run_all(session, self.body)


@dataclass
class NamedAction(Instruction):
    """``<sc:action type="name">``: one of the machine's named actions, with params."""

    type: str
    params: tuple[tuple[str, str], ...] = ()
    line: int = 0

    def run(self, session: Session) -> None:
        params = {name: session.evaluate(expr) for name, expr in self.params}
        spec = {"type": self.type, "params": params} if params else self.type
        session.scope.run_actions([spec])


@dataclass
class Script(Instruction):
    """``<script>`` (trusted documents only)."""

    code: str
    line: int = 0

    def run(self, session: Session) -> None:
        session.run_script(self.code)


@dataclass
class Fail(Instruction):
    """Content that always fails with ``message``: it stands in for content the loader could
    not compile but must not reject at load time (an invoked document's transition to a state
    it does not have)."""

    message: str
    line: int = 0

    def run(self, session: Session) -> None:
        raise ContentError(self.message)


def _truth(session: Session, cond: str) -> bool:
    return bool(session.evaluate(cond))


def run_all(session: Session, body: Sequence[Instruction]) -> None:
    """Run instructions in order."""
    for instruction in body:
        instruction.run(session)


def _typed(label: str, source: str) -> str:
    """The action's type name: it carries a digest of the SCXML it came from, so the machine
    fingerprint changes when the document's executable content does."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    return f"scxml:{label.replace(' ', '-')}:{digest}"


class Block(BuiltinAction):
    """A block of executable content (one ``<onentry>``, ``<onexit>``, transition body...)
    as a built-in action. An error stops the block and raises ``error.execution``."""

    type = "scxml"

    def __init__(
        self,
        body: Sequence[Instruction],
        evaluator: Evaluator,
        label: str = "scxml",
        source: str = "",
    ) -> None:
        self.body = tuple(body)
        self.evaluator = evaluator
        self.label = label
        self.type = _typed(label, source)

    def resolve(self, scope: Any, params: Mapping[str, Any]) -> None:
        session = Session(scope, self.evaluator)
        try:
            run_all(session, self.body)
        except ContentError as exc:
            scope.raise_internal(platform_error(exc.kind, str(exc), exc.sendid))

    def describe(self) -> str:
        return self.label


class Hook(BuiltinAction):
    """A built-in action running ``fn(session)`` (datamodel initialization, invocations)."""

    type = "scxml"

    def __init__(
        self, fn: Callable[[Session], None], evaluator: Evaluator, label: str, source: str = ""
    ) -> None:
        self.fn = fn
        self.evaluator = evaluator
        self.label = label
        self.type = _typed(label, source)

    def resolve(self, scope: Any, params: Mapping[str, Any]) -> None:
        session = Session(scope, self.evaluator)
        try:
            self.fn(session)
        except ContentError as exc:
            scope.raise_internal(platform_error(exc.kind, str(exc), exc.sendid))

    def describe(self) -> str:
        return self.label


class Condition:
    """A transition's event descriptors and ``cond`` as one guard (it needs the scope for
    ``In()`` and to raise ``error.execution`` when ``cond`` cannot be evaluated)."""

    takes_scope = True

    def __init__(
        self, descriptors: tuple[str, ...] | None, cond: str | None, evaluator: Evaluator
    ) -> None:
        self.descriptors = descriptors
        self.cond = cond
        self.evaluator = evaluator
        self.name = f"scxml:{' '.join(descriptors or ())}[{cond or ''}]"

    def __call__(self, context: Any, event: Any, scope: Any) -> bool:
        if self.descriptors is not None and not descriptor_matches(
            self.descriptors, event_name(event)
        ):
            return False
        if self.cond is None:
            return True
        session = Session(scope, self.evaluator, event)
        try:
            return _truth(session, self.cond)
        except ContentError as exc:
            scope.raise_internal(platform_error("error.execution", str(exc)))
            return False
