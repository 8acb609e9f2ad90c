"""Snapshots: the frozen state of a machine between events, and its exact JSON form.

``persist`` turns a snapshot into JSON types only; ``restore`` checks every field against the
machine (its id, the fingerprint of its definition, the state value, context, timers, history)
and raises a ``SnapshotError`` naming the field instead of guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import orjson

from .configuration import Configuration, Configurations
from .errors import SnapshotError, SnapshotVersionError
from .events import EventLike
from .frozen import EMPTY, FrozenDict, freeze, thaw
from .limits import MAX_NESTING, shorten, too_deep
from .nodes import HISTORY, StateNode
from .retrying import VISITS

if TYPE_CHECKING:
    from .definition import Definition

FORMAT = 1
"""Where the engine counts entries of each retried state, inside the retry records (persisted
as ``retry_visits``), so each visit gets a new idempotency key."""
STATUSES = ("active", "done", "error", "stopped")


@dataclass(frozen=True, slots=True)
class Timer:
    """A pending delayed event: ``event`` is delivered to ``target`` (None: this machine) at
    ``due_at`` (absolute UTC epoch milliseconds)."""

    id: str
    event: Any
    due_at: int
    target: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The timer as JSON types."""
        return {"id": self.id, "event": self.event, "due_at": self.due_at, "target": self.target}


class ChildRef(msgspec.Struct, frozen=True):
    """A child actor the machine started (invoked by ``invoked_by`` or spawned).

    ``state`` holds what a runtime recorded about it when persisting: the child's own persisted
    snapshot for a child machine, or a marker for logic that cannot be persisted.
    """

    id: str
    src: str
    system_id: str | None = None
    invoked_by: str | None = None
    input: Any = None
    state: Any = None

    def to_json(self) -> dict[str, Any]:
        """The child record as JSON types."""
        return {
            "src": self.src,
            "system_id": self.system_id,
            "invoked_by": self.invoked_by,
            "input": self.input,
            "state": self.state,
        }

    @property
    def status(self) -> str:
        """``active``, or ``done`` / ``error`` for a child that has finished: XState keeps a
        finished child in ``snapshot.children`` until its state is exited or it is stopped."""
        return finished_child(self) or "active"


FINISHED = "finished"
"""The key of ``ChildRef.state`` that marks a finished child (``done`` or ``error``)."""


def finished_child(ref: ChildRef) -> str | None:
    """``done`` or ``error`` when the child has finished, else None."""
    state = ref.state
    return state.get(FINISHED) if isinstance(state, Mapping) else None


class SnapshotOwner(Protocol):
    """What a snapshot needs from the machine it belongs to (``Machine`` is one); declared
    here so that this module depends on nothing above it."""

    @property
    def id(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def definition(self) -> Definition: ...

    version: str | None
    migrations: Mapping[str, Callable[[dict[str, Any]], Mapping[str, Any]]]
    configurations: Configurations

    def configuration_of_value(self, value: Any) -> Configuration: ...
    def matches(self, configuration: Configuration, value: Any) -> bool: ...
    def can(self, snapshot: Snapshot, event: EventLike) -> bool: ...


class Snapshot(msgspec.Struct, frozen=True, eq=False):
    """The state of a machine at rest. Immutable: every change makes a new snapshot.

    These fields are the one definition of what a snapshot holds: the engine builds snapshots
    from them (``msgspec.structs.replace`` for "the same, but"), ``persist`` writes them and
    ``restore`` reads them back, validated. ``value`` is XState's state value, ``context`` a
    frozen mapping, ``status`` one of ``active``, ``done``, ``error``, ``stopped``.
    """

    machine: SnapshotOwner
    """The machine this snapshot belongs to."""
    configuration: Configuration
    """The active state nodes."""
    context: FrozenDict = EMPTY
    """The context: a frozen mapping of JSON values."""
    status: str = "active"
    """``active``, ``done``, ``error`` or ``stopped``."""
    output: Any = None
    """The machine's output once it is done."""
    error: Any = None
    """The error that stopped the machine (status ``error``)."""
    history_nodes: Mapping[str, tuple[StateNode, ...]] = EMPTY
    """Recorded history: history state id -> the nodes it remembers (``history``: their ids)."""
    timers: tuple[Timer, ...] = ()
    """Pending delayed events, in due order."""
    children: Mapping[str, ChildRef] = EMPTY
    """Child actors by id."""
    retry_records: FrozenDict = EMPTY
    """Retried call sites in progress, plus the visit counts under ``VISITS``."""
    skipped: tuple[FrozenDict, ...] = ()
    """Calls that failed for good with ``onFinalFailure: "skip"``: state, invoke, attempts,
    error."""

    @property
    def value(self) -> Any:
        """The state value, e.g. ``"idle"`` or ``{"p": {"r1": "a", "r2": "c"}}``."""
        return self.configuration.value

    @property
    def tags(self) -> frozenset[str]:
        """The tags of every active state."""
        return self.configuration.tags

    @property
    def retries(self) -> Mapping[str, Any]:
        """Retried call sites in progress: state id -> ``{attempt, last_error, started_at,
        key}``."""
        return {k: v for k, v in self.retry_records.items() if k != VISITS}

    @property
    def history(self) -> Mapping[str, tuple[str, ...]]:
        """Recorded history: history state id -> ids of the states it remembers."""
        return {key: tuple(n.id for n in nodes) for key, nodes in self.history_nodes.items()}

    def active_leaves(self) -> tuple[str, ...]:
        """Dotted paths of the active atomic states, e.g. ``("creating.waiting",)``."""
        return self.configuration.leaves

    def matches(self, value: str | Mapping[str, Any]) -> bool:
        """True when the machine is in ``value`` (a dotted path or a state value mapping)."""
        return self.machine.matches(self.configuration, value)

    def has_tag(self, tag: str) -> bool:
        """True when an active state has ``tag``."""
        return tag in self.configuration.tags

    def can(self, event: EventLike) -> bool:
        """True when ``event`` would take a transition that does something."""
        return self.machine.can(self, event)

    def next_due(self) -> int | None:
        """The due time of the earliest pending timer, if any."""
        return self.timers[0].due_at if self.timers else None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return (
            self.machine is other.machine
            and self.configuration is other.configuration
            and self.history == other.history
            and all(getattr(self, name) == getattr(other, name) for name in _COMPARED)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"Snapshot(value={thaw(self.value)!r}, status={self.status!r}, "
            f"context={thaw(self.context)!r})"
        )


# compared by value in __eq__ (machine and configuration by identity, history by ids)
_COMPARED = tuple(
    name
    for name in Snapshot.__struct_fields__
    if name not in ("machine", "configuration", "history_nodes")
)


def persist(snapshot: Snapshot) -> dict[str, Any]:
    """The snapshot as JSON types only (nested values are the snapshot's own immutable
    dicts and lists; ``thaw`` the result for a mutable copy)."""
    machine = snapshot.machine
    return {
        "format": FORMAT,
        "machine": machine.id,
        "version": machine.version,
        "fingerprint": machine.fingerprint,
        "value": snapshot.configuration.value,
        "context": snapshot.context,
        "status": snapshot.status,
        "output": snapshot.output,
        "error": snapshot.error,
        "history": {key: [n.id for n in nodes] for key, nodes in snapshot.history_nodes.items()},
        "timers": [t.to_json() for t in snapshot.timers],
        "children": {key: c.to_json() for key, c in snapshot.children.items()},
        "retries": snapshot.retries,
        "retry_visits": snapshot.retry_records.get(VISITS, EMPTY),
        "skipped": list(snapshot.skipped),
    }


def snapshot_to_json(snapshot: Snapshot) -> bytes:
    """The persisted snapshot as orjson bytes."""
    return orjson.dumps(persist(snapshot))


def restore(machine: SnapshotOwner, data: Mapping[str, Any] | bytes | str) -> Snapshot:
    """Rebuild a snapshot from ``persist`` output (a dict or JSON bytes), checking each field."""
    try:
        return _restore(machine, data)
    except (RecursionError, orjson.JSONEncodeError) as exc:
        # nesting too deep to walk, or an integer beyond 64 bits: name the field it is in
        raise SnapshotError(
            _unwritable_field(data),
            "not a JSON value that persists "
            f"({'nested too deeply' if isinstance(exc, RecursionError) else exc})",
        ) from None


def _unwritable_field(data: Any) -> str:
    if isinstance(data, Mapping):
        for key, value in data.items():
            deep = too_deep(value, MAX_NESTING, str(key))
            if deep is not None:
                return shorten(deep)
            try:
                orjson.dumps(value)
            except orjson.JSONEncodeError:
                return str(key)
    return "<root>"


def _restore(machine: SnapshotOwner, data: Mapping[str, Any] | bytes | str) -> Snapshot:
    if isinstance(data, bytes | bytearray | memoryview | str):
        try:
            data = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise SnapshotError("<json>", f"not valid JSON: {exc}") from exc
    if not isinstance(data, Mapping):
        raise SnapshotError(
            "<root>", f"a persisted snapshot is a mapping, not {type(data).__name__}"
        )
    data = _check_identity(machine, data)
    configuration = machine.configuration_of_value(_required(data, "value"))
    status = _required(data, "status")
    if status not in STATUSES:
        raise SnapshotError("status", f"{status!r} is not one of {', '.join(STATUSES)}")
    raw_context = data.get("context")
    context = (
        EMPTY if _skippable(raw_context, Mapping) else freeze(raw_context, "context", SnapshotError)
    )
    if not isinstance(context, FrozenDict):
        raise SnapshotError("context", "the context is a mapping")
    output, error = data.get("output"), data.get("error")
    # the optional parts are usually empty: skip their checks then
    history, timers, children = data.get("history"), data.get("timers"), data.get("children")
    retries, skipped = data.get("retries"), data.get("skipped")
    visits = data.get("retry_visits")
    if visits and (retries is None or isinstance(retries, Mapping)):
        retries = {**(retries or {}), VISITS: visits}
    return Snapshot(
        machine=machine,
        configuration=configuration,
        context=context,
        status=status,
        output=None if output is None else freeze(output, "output", SnapshotError),
        error=None if error is None else freeze(error, "error", SnapshotError),
        history_nodes=EMPTY if _skippable(history, Mapping) else _history(machine, history),
        timers=() if _skippable(timers, list) else _timers(timers),
        children=EMPTY if _skippable(children, Mapping) else _children(children),
        retry_records=EMPTY if _skippable(retries, Mapping) else _retries(machine, retries),
        skipped=() if _skippable(skipped, list) else _skipped(skipped),
    )


def _skippable(value: Any, kind: type) -> bool:
    """An absent or empty optional part; a falsy value of the wrong type ({} for a list, [] for
    a mapping) is corrupt, not empty, and goes on to be rejected."""
    return value is None or (not value and isinstance(value, kind))


def _check_identity(machine: SnapshotOwner, data: Mapping[str, Any]) -> Mapping[str, Any]:
    fmt = data.get("format")
    if fmt != FORMAT:
        raise SnapshotVersionError("format", f"format {fmt!r} is not supported (expected {FORMAT})")
    machine_id = data.get("machine")
    if machine_id != machine.id:
        raise SnapshotError(
            "machine", f"this is a snapshot of machine {machine_id!r}, not of {machine.id!r}"
        )
    version = data.get("version")
    if version != machine.version:
        migrate = machine.migrations.get(version) if isinstance(version, str) else None
        if migrate is None:
            raise SnapshotVersionError(
                "version",
                f"made by version {version!r} of "
                f"{machine.id!r}; this is version {machine.version!r} "
                "and has no migration from it",
            )
        migrated = migrate(thaw(data))
        if not isinstance(migrated, Mapping):
            raise SnapshotVersionError(
                "version",
                f"the migration from {version!r} returned {type(migrated).__name__}, not a mapping",
            )
        return {**migrated, "version": machine.version, "fingerprint": machine.fingerprint}
    # a snapshot made before the fingerprint covered the version label (and the same label)
    if data.get("fingerprint") not in (machine.fingerprint, machine.definition.legacy_fingerprint):
        raise SnapshotVersionError(
            "fingerprint",
            f"the definition of {machine.id!r} changed "
            "since this snapshot was made (fingerprint "
            f"{data.get('fingerprint')!r}, now {machine.fingerprint!r}); "
            "bump version= and give a migration",
        )
    return data


def _required(data: Mapping[str, Any], key: str) -> Any:
    if key not in data:
        raise SnapshotError(key, "missing")
    return data[key]


def _history(machine: SnapshotOwner, data: Any) -> Mapping[str, tuple[StateNode, ...]]:
    if not isinstance(data, Mapping):
        raise SnapshotError("history", "history is a mapping of history state id -> state ids")
    result = {}
    for key, ids in data.items():
        node = machine.definition.by_id.get(key)
        if node is None or node.type != HISTORY:
            raise SnapshotError(f"history.{key}", "no such history state")
        if not isinstance(ids, list):
            raise SnapshotError(f"history.{key}", "a list of state ids")
        nodes = []
        for i, state_id in enumerate(ids):
            state = machine.definition.by_id.get(state_id) if isinstance(state_id, str) else None
            if state is None:
                raise SnapshotError(f"history.{key}[{i}]", f"no state {state_id!r}")
            nodes.append(state)
        result[key] = tuple(nodes)
    return FrozenDict(result)


def _timers(data: Any) -> tuple[Timer, ...]:
    if not isinstance(data, list):
        raise SnapshotError("timers", "a list of pending timers")
    timers = []
    for i, item in enumerate(data):
        where = f"timers[{i}]"
        if not isinstance(item, Mapping):
            raise SnapshotError(where, "a timer is a mapping")
        timer_id, due = item.get("id"), item.get("due_at")
        event, target = item.get("event"), item.get("target")
        if not isinstance(timer_id, str):
            raise SnapshotError(f"{where}.id", "a string")
        if not isinstance(due, int) or isinstance(due, bool):
            raise SnapshotError(f"{where}.due_at", "epoch milliseconds (an integer)")
        if not isinstance(event, Mapping) or not isinstance(event.get("type"), str):
            raise SnapshotError(f"{where}.event", "an event mapping with 'type'")
        if target is not None and not isinstance(target, str):
            raise SnapshotError(f"{where}.target", "null or an actor id")
        timers.append(Timer(timer_id, freeze(event, f"{where}.event", SnapshotError), due, target))
    return tuple(sorted(timers, key=lambda t: (t.due_at, t.id)))


def _retries(machine: SnapshotOwner, data: Any) -> FrozenDict:
    if not isinstance(data, Mapping):
        raise SnapshotError("retries", "a mapping of state id -> retry record")
    for key, record in data.items():
        if key == VISITS:
            if not isinstance(record, Mapping) or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in record.values()
            ):
                raise SnapshotError("retry_visits", "a mapping of state id -> visit count")
            continue
        node = machine.definition.by_id.get(key)
        if node is None or node.retry is None:
            raise SnapshotError(f"retries.{key}", "no retried state with this id")
        if (
            not isinstance(record, Mapping)
            or not isinstance(record.get("attempt"), int)
            or not isinstance(record.get("started_at"), int)
            or not isinstance(record.get("key"), str)
        ):
            raise SnapshotError(f"retries.{key}", "a record with attempt, started_at, key")
    frozen: FrozenDict = freeze(data, "retries", SnapshotError)
    return frozen


def _skipped(data: Any) -> tuple[FrozenDict, ...]:
    if not isinstance(data, list) or not all(isinstance(item, Mapping) for item in data):
        raise SnapshotError("skipped", "a list of skipped-call records")
    return tuple(freeze(item, f"skipped[{i}]", SnapshotError) for i, item in enumerate(data))


def _children(data: Any) -> Mapping[str, ChildRef]:
    if not isinstance(data, Mapping):
        raise SnapshotError("children", "a mapping of child id -> child record")
    children = {}
    for key, item in data.items():
        if not isinstance(item, Mapping) or not isinstance(item.get("src"), str):
            raise SnapshotError(f"children.{key}", "a child record with 'src'")
        children[key] = ChildRef(
            key,
            item["src"],
            item.get("system_id"),
            item.get("invoked_by"),
            freeze(item.get("input"), f"children.{key}.input", SnapshotError),
            freeze(item.get("state"), f"children.{key}.state", SnapshotError),
        )
    return FrozenDict(children)
