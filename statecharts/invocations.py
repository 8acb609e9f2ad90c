"""An invoke's config read into an ``InvokeDef``: its actor (by name or logic), id, input,
and the call's protection (``onFinalFailure``, ``timeout``, ``heartbeatTimeout``,
``keyLength``, ``transient``, ``breaker``, ``limit``, ``external``), each problem named by its
path. The invoke's transitions (``onDone``, ``onError``, ``onSnapshot``) are the definition's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .idempotency import KEY_LENGTH, MAX_KEY_LENGTH, MIN_KEY_LENGTH
from .logic import is_external
from .nodes import InvokeDef, StateNode
from .references import References, join_path, name_of

INVOKE_KEYS = frozenset(
    {
        "id",
        "src",
        "input",
        "onDone",
        "onError",
        "onSnapshot",
        "systemId",
        "retry",
        "onFinalFailure",
        "breaker",
        "limit",
        "external",
        "transient",
        "timeout",
        "heartbeatTimeout",
        "keyLength",
        "description",
        "meta",
    }
)
FAILURE_CLASSES = ("fail_run", "skip")


class Invocations(References):
    """``References`` that also read invokes (the base of ``definition._Builder``)."""

    def _invoke(
        self, node: StateNode, item: Mapping[str, Any], path: str, index: int
    ) -> InvokeDef | None:
        src = item.get("src")
        logic: Any = None
        if isinstance(src, str):
            logic = self.impl.actors.get(src)
            if logic is None:
                self.no_implementation("actor", src, join_path(path, "src"), self.impl.actors)
        elif src is not None and not isinstance(src, Mapping):
            logic, src = src, name_of(src)
        else:
            self.problem(join_path(path, "src"), "an invoke needs 'src' naming an actor")
            return None
        actor_id = item.get("id") or f"{node.id}:invocation[{index}]"
        if not isinstance(actor_id, str):
            self.problem(join_path(path, "id"), "an invoke id must be a string")
            actor_id = f"{node.id}:invocation[{index}]"
        failure = item.get("onFinalFailure")
        if failure is not None and failure not in FAILURE_CLASSES:
            self.problem(
                join_path(path, "onFinalFailure"),
                f"one of {', '.join(FAILURE_CLASSES)}, not {failure!r}",
            )
        retry = node.retry_attempt_of.retry if node.retry_attempt_of is not None else None
        input_value = item.get("input")
        if input_value is not None and not callable(input_value):
            input_value = self._params({"input": input_value}, join_path(path, "input"))
            input_value = input_value["input"] if input_value is not None else None
        description = self._description(item.get("description"), join_path(path, "description"))
        external = item.get("external", False)
        if not isinstance(external, bool):
            self.problem(join_path(path, "external"), "'external' is true or false")
            external = False
        breaker = item.get("breaker")
        if breaker is not None and not isinstance(breaker, str):
            self.problem(join_path(path, "breaker"), "'breaker' names a downstream (a string)")
            breaker = None
        limit = item.get("limit")
        if limit is not None and not (isinstance(limit, str) and limit.strip()):
            self.problem(
                join_path(path, "limit"),
                "'limit' names a shared limit (a non-empty string, e.g. \"crm\")",
            )
            limit = None
        return InvokeDef(
            actor_id,
            str(src),
            input_value,
            item.get("systemId"),
            retry,
            failure,
            path,
            logic,
            description,
            breaker,
            external or is_external(logic),
            self._transient(item.get("transient", False), join_path(path, "transient")),
            limit,
            self._ms(item.get("timeout"), join_path(path, "timeout")),
            self._ms(item.get("heartbeatTimeout"), join_path(path, "heartbeatTimeout")),
            self._key_length(item.get("keyLength"), join_path(path, "keyLength")),
        )

    def _ms(self, value: Any, path: str) -> int | None:
        """A call's ``timeout`` / ``heartbeatTimeout``: whole milliseconds, positive."""
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**31:
            return value
        self.problem(path, f"milliseconds, a whole number from 1 to {2**31}, not {value!r}")
        return None

    def _key_length(self, value: Any, path: str) -> int:
        """``keyLength``: how many characters the call's idempotency key has."""
        if value is None:
            return KEY_LENGTH
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and MIN_KEY_LENGTH <= value <= MAX_KEY_LENGTH
        ):
            return value
        self.problem(
            path,
            f"'keyLength' is a whole number from {MIN_KEY_LENGTH} to "
            f"{MAX_KEY_LENGTH} (the idempotency key's characters), not {value!r}",
        )
        return KEY_LENGTH

    def _transient(self, value: Any, path: str) -> bool | tuple[str, ...]:
        """``transient``: true (every error) or a list of error class names."""
        if isinstance(value, bool):
            return value
        if (
            isinstance(value, list | tuple)
            and value
            and all(isinstance(n, str) and n for n in value)
        ):
            return tuple(value)
        self.problem(
            path,
            "'transient' is true, false or a non-empty list of error class "
            'names (e.g. ["DatabaseError"])',
        )
        return False
