"""Retried calls on the core: an invoke with ``retry`` becomes ordinary states, two built-in
actions, one named guard and one named delay, all made here, and one vocabulary the rest of
the project reads them by.

The expansion (``expand``) turns the retried state into a compound with ``attempting`` (the
invoke) and ``waiting_to_retry`` (a durable timer, the delay ``retry:<state id>``), the
invoke's ``onDone`` / ``onError`` on the state itself so their targets resolve as written. A
failed attempt takes ``retryAllowed`` (``RetryAllowed``: the policy allows another attempt) to
the wait, remembering the error (``RecordFailure``); else the invoke's own ``onError``, or with
``onFinalFailure: "skip"`` its ``onDone`` after ``RecordSkip``, or the machine fails.

The snapshot keeps one record per retried state in progress (``retry_records``: the attempt,
the last error, when it started, the key that stays the same across its attempts); the
algorithm opens it on entering the retried state, counts an attempt on entering
``attempting`` (``entered``) and forgets it on leaving (``closed``).

The renderer, the diff, the durable driver and the run columns read retries through the names
below (``is_retry_wait``, ``retried_state_of_timer``, ``attempt_in_progress``, ...) and never
parse the expansion's names themselves. The names are stored (state paths, timer ids): they
stay as they are so that runs persisted earlier restore.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .actions import BuiltinAction
from .events import done_actor_event_type, error_actor_event_type
from .frozen import EMPTY, FrozenDict
from .guards import GuardSpec
from .nodes import StateNode, Transition
from .retry_policy import RetryPolicy, as_policy

ATTEMPTING = "attempting"
"""The child state of a retried state that runs the call (one attempt per entry)."""
WAITING = "waiting_to_retry"
"""The child state of a retried state that waits, on a durable timer, for the next attempt."""
TAG = "retrying"
"""The tag of ``waiting_to_retry``."""
DELAY_PREFIX = "retry:"
"""The named delay of a wait: ``retry:<retried state id>``."""
GUARD = "retryAllowed"
"""The guard of the "failed, another attempt allowed" transition."""
RECORD_FAILURE, RECORD_SKIP = "recordFailure", "recordSkip"
"""The built-in actions the expansion adds."""
VISITS = "#visits"
"""The key, among the retry records, of how often each retried state was entered."""


# -- the vocabulary -------------------------------------------------------------------------


def is_retry_wait(leaf: str) -> bool:
    """Whether an active leaf (a state path or id, dotted) is a retried call waiting for its
    next attempt."""
    return leaf.rsplit(".", 1)[-1] == WAITING


def waits_to_retry(leaves: Iterable[str]) -> set[str]:
    """The leaves (paths or ids) among ``leaves`` where a retried call waits."""
    return {leaf for leaf in leaves if is_retry_wait(leaf)}


def retry_steps(path: str) -> tuple[str, str]:
    """The paths (dotted, as state values match them) of the ``attempting`` and
    ``waiting_to_retry`` steps of the retried state at ``path``."""
    return f"{path}.{ATTEMPTING}", f"{path}.{WAITING}"


def is_retry_step(node: StateNode) -> bool:
    """A state the expansion added (``attempting``, ``waiting_to_retry``)."""
    parent = node.parent
    return parent is not None and parent.retry is not None and node.key in (ATTEMPTING, WAITING)


def is_retry_part(node: StateNode) -> bool:
    """A retried state or its ``attempting`` step: entering or leaving it keeps the records."""
    return node.retry is not None or node.retry_attempt_of is not None


def is_retry_transition(transition: Transition) -> bool:
    """The expansion's "failed, another attempt allowed" transition (to the wait)."""
    return isinstance(transition.guard, RetryAllowed)


def is_skip_transition(transition: Transition) -> bool:
    """A failure after the last attempt that goes on as a skipped item
    (``onFinalFailure: "skip"``: the expansion's ``RecordSkip`` on the ``onDone`` path)."""
    return any(isinstance(a.impl, RecordSkip) for a in transition.actions)


def is_retry_delay(delay: Any) -> bool:
    """Whether a transition's delay is a retry's wait."""
    return isinstance(delay, str) and delay.startswith(DELAY_PREFIX)


def is_added_action(action_type: str) -> bool:
    """An action the expansion adds (not written in the config)."""
    return action_type in (RECORD_FAILURE, RECORD_SKIP)


def delay_name(state_id: str) -> str:
    """The named delay of the retried state ``state_id``'s wait."""
    return f"{DELAY_PREFIX}{state_id}"


def retried_state_of_timer(event_type: str) -> str | None:
    """The retried state's id when ``event_type`` is the timer event of a wait
    (``xstate.after.retry:<id>.<id>.waiting_to_retry``: the delay, then the waiting state's
    id), else None. A timer's id is its event type."""
    rest = event_type.removeprefix("xstate.after.")
    if rest == event_type or not rest.startswith(DELAY_PREFIX) or not rest.endswith(f".{WAITING}"):
        return None
    doubled = rest[len(DELAY_PREFIX) : -len(WAITING) - 1]
    retried = doubled[: (len(doubled) - 1) // 2]
    return retried if doubled == f"{retried}.{retried}" else None


def attempt_in_progress(records: Mapping[str, Any]) -> tuple[int, Any] | None:
    """``(attempt, last error)`` of the retried call furthest on among ``records`` (a
    snapshot's ``retries``), or None when no retried call is in progress."""
    found = [r for key, r in records.items() if key != VISITS]
    if not found:
        return None
    record = max(found, key=lambda r: int(r.get("attempt") or 0))
    return int(record.get("attempt") or 0), record.get("last_error")


def mark(node: StateNode, retried: Mapping[StateNode, Expanded]) -> None:
    """Set ``node``'s retry fields when the expansion made it: a retried state (``retried``
    holds it) gets its policy and call, its ``attempting`` step the state it attempts."""
    expanded = retried.get(node)
    if expanded is not None:
        node.retry, node.retry_invoke = expanded.policy, expanded.invoke_id
    parent = node.parent
    if parent is not None and parent in retried and node.key == ATTEMPTING:
        node.retry_attempt_of = parent


# -- the guard, the delay, the built-ins ----------------------------------------------------


@dataclass(frozen=True)
class RetryAllowed(GuardSpec):
    """``retryAllowed``: the retried state's policy (``params``: its id) allows another attempt
    after the failure in the event. Resolved when the expansion makes it."""

    type: str = GUARD

    def evaluate(self, context: Any, event: Any, scope: Any) -> bool:
        """Ask the policy, with the state's record and the step's clock."""
        record = scope.retries[self.params]
        policy: RetryPolicy = scope.definition.by_id[self.params].retry
        return bool(
            policy.allows(
                record["attempt"],
                event.get("error"),
                record["started_at"],
                scope.now(),
                record["key"],
            )
        )

    def names(self) -> list[str]:
        """No user guard."""
        return []


def wait(scope: Any, state: StateNode) -> int:
    """The named delay ``retry:<id>``: the wait (ms) after the retried state's last failed
    attempt, from its policy and record."""
    record = scope.retries[state.id]
    return int(state.retry.delay_for(record["attempt"], record["last_error"], record["key"]))


@dataclass(frozen=True, eq=False)
class RecordFailure(BuiltinAction):
    """Remember a retried call's error before waiting to retry (added by the expansion)."""

    state_id: str
    type: str = RECORD_FAILURE

    def resolve(self, scope: Any, params: Mapping[str, Any]) -> None:
        scope.retries = _updated(scope.retries, self.state_id, last_error=scope.event.get("error"))

    def describe(self) -> str:
        return "remember the error"


@dataclass(frozen=True, eq=False)
class RecordSkip(BuiltinAction):
    """Record a call that failed for good as a skipped item (``onFinalFailure: "skip"``)."""

    state_id: str
    invoke: str | None = None
    """The skipped invoke's id (None: the state's retried invoke)."""
    type: str = RECORD_SKIP

    def resolve(self, scope: Any, params: Mapping[str, Any]) -> None:
        record = scope.retries.get(self.state_id, {})  # none for a call without retry: one attempt
        node = scope.definition.by_id[self.state_id]
        scope.skipped = (
            *scope.skipped,
            FrozenDict(
                state=self.state_id,
                invoke=self.invoke or node.retry_invoke,
                attempts=record.get("attempt", 1),
                error=scope.event.get("error"),
            ),
        )

    def describe(self) -> str:
        return "skip this item"


# -- the records ----------------------------------------------------------------------------


def entered(
    records: FrozenDict, node: StateNode, now: Callable[[], int]
) -> tuple[FrozenDict, str | None, int]:
    """The records after entering ``node`` (a retried state opens its record, its key stable
    across its attempts; ``attempting`` counts an attempt), with the call's key and attempt
    for the invoke it starts ((None, 1) for a state that is not part of a retry)."""
    if node.retry is not None:
        at = now()
        visits = records.get(VISITS, EMPTY)
        visit = visits.get(node.id, 0) + 1
        records = FrozenDict(
            {
                **records,
                VISITS: FrozenDict({**visits, node.id: visit}),
                node.id: FrozenDict(
                    attempt=0, last_error=None, started_at=at, key=f"{node.id}@{at}#{visit}"
                ),
            }
        )
    owner = node.retry_attempt_of
    if owner is None:
        return records, None, 1
    record = records[owner.id]
    attempt = record["attempt"] + 1
    return _updated(records, owner.id, attempt=attempt), str(record["key"]), attempt


def closed(
    records: FrozenDict,
    by_id: Mapping[str, StateNode],
    remaining: Iterable[StateNode] | frozenset[StateNode],
) -> FrozenDict:
    """The records with those of retried states no longer active (not in ``remaining``)
    forgotten."""
    active = remaining if isinstance(remaining, set | frozenset) else set(remaining)
    kept = {k: v for k, v in records.items() if k == VISITS or by_id[k] in active}
    return records if len(kept) == len(records) else FrozenDict(kept)


def _updated(records: FrozenDict, state_id: str, **changes: Any) -> FrozenDict:
    return FrozenDict({**records, state_id: FrozenDict({**records[state_id], **changes})})


# -- the expansion --------------------------------------------------------------------------


@dataclass(frozen=True)
class Expanded:
    """A retried state's config as the expansion wrote it, with its policy and call id."""

    config: Mapping[str, Any]
    policy: RetryPolicy
    invoke_id: str


def expand(
    node: StateNode, config: Mapping[str, Any], path: str, problem: Callable[[str, str], None]
) -> Expanded | None:
    """The config of ``node`` with its retried invoke expanded (see the module's doc); None
    when it has none, or reports a problem through ``problem(path, message)``."""
    invokes = config.get("invoke")
    items = invokes if isinstance(invokes, list) else [invokes]
    retried = [
        (i, inv)
        for i, inv in enumerate(items)
        if isinstance(inv, Mapping) and inv.get("retry") is not None
    ]
    if not retried:
        return None
    index, invoke = retried[0]
    invoke_path = f"{path}.invoke[{index}]" if isinstance(invokes, list) else _join(path, "invoke")
    if len(retried) > 1 or config.get("states"):
        problem(
            invoke_path,
            "a retried invoke needs a state of its own (no child states, no other retried invoke)",
        )
        return None
    try:
        policy = as_policy(invoke["retry"])
    except (TypeError, ValueError) as exc:
        problem(_join(invoke_path, "retry"), str(exc))
        return None
    given_id = invoke.get("id") or f"{node.id}:invocation[{index}]"  # (checked as the invoke)
    invoke_id = str(given_id)
    attempt = {
        k: v for k, v in invoke.items() if k not in ("onDone", "onError", "retry", "onFinalFailure")
    }
    attempt["id"] = given_id
    on = dict(config.get("on") or {})
    done = invoke.get("onDone")
    if done is not None:
        on[done_actor_event_type(invoke_id)] = done
    on[error_actor_event_type(invoke_id)] = [
        {
            "guard": RetryAllowed(params=node.id),
            "target": f".{WAITING}",
            "actions": [RecordFailure(node.id)],
        },
        *final_failure(node, invoke, invoke_path, problem),
    ]
    rest = [inv for i, inv in enumerate(items) if i != index]
    expanded = {k: v for k, v in config.items() if k not in ("invoke", "on")}
    if rest:
        expanded["invoke"] = rest
    expanded["on"] = on
    expanded["initial"] = ATTEMPTING
    expanded["states"] = {
        ATTEMPTING: {"invoke": attempt},
        WAITING: {"after": {delay_name(node.id): ATTEMPTING}, "tags": [TAG]},
    }
    return Expanded(expanded, policy, invoke_id)


def final_failure(
    node: StateNode,
    invoke: Mapping[str, Any],
    path: str,
    problem: Callable[[str, str], None],
    invoke_id: str | None = None,
) -> list[Any]:
    """The transitions of a failure after the last allowed attempt: the invoke's own
    ``onError``, or with ``onFinalFailure: "skip"`` its ``onDone`` after ``RecordSkip``
    (also for a call without retry, whose one attempt is its last: ``invoke_id`` names it),
    or none (the machine fails)."""
    if invoke.get("onError") is not None:
        error = invoke["onError"]
        return list(error) if isinstance(error, list) else [error]
    if invoke.get("onFinalFailure") != "skip":
        return []  # unhandled: the machine (the run) fails
    done = invoke.get("onDone")
    if done is None:
        problem(_join(path, "onFinalFailure"), "'skip' goes on along onDone; add onDone")
        return []
    skipped = []
    for item in done if isinstance(done, list) else [done]:
        item = {"target": item} if isinstance(item, str) else dict(item)
        actions = item.get("actions") or []
        item["actions"] = [
            RecordSkip(node.id, invoke_id),
            *(actions if isinstance(actions, list) else [actions]),
        ]
        item.pop("guard", None)
        skipped.append(item)
    return skipped[:1]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
