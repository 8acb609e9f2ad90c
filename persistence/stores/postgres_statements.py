"""PostgreSQL's statements: the SQL text (and parameters) of its hot paths, apart from the
dialect's hooks (`postgres.PostgresStore`). Each is one statement, a data-modifying CTE run in
autocommit, so a round of steps, a start or a claim costs one round trip and one commit: a
batch of steps (`steps_statement`, written only under each run's fence), a step from rest
(`from_rest_statement`), the create-run CTE (`CREATE_RUN`), the claim with `SKIP LOCKED`
(`lease_sql`) and the pending work read with it (`LEASED_WORK`, `READ_WORK`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from persistence.stores.codec import Column
from persistence.stores.leases import PICKED_NAMES
from persistence.stores.postgres_values import (
    RUN_COLUMNS,
    json_param,
    to_ts,
    uuid_array,
    uuid_text,
)
from persistence.stores.protocol import PayloadCodec
from persistence.stores.records import (
    ACTIVE,
    CallFinish,
    RunRecord,
    StepCommit,
)
from persistence.stores.rules import (
    CLAIMABLE,
    CLAIMABLE_BY_EVENT,
    FREE,
    HELD_FENCE,
    STOPPED_BY_END,
    STOPPED_BY_EXIT,
    UNLEASED_FENCE,
    completion_times,
    ended_reason,
    idempotency_key,
    is_call,
)
from persistence.stores.runs import ACTIVE_KEY_CONFLICT

PROCESS = uuid.uuid4().hex
"""This process's mark on its NOTIFYs: its own listener skips them (the in-process wake-up was
faster), so one event never wakes a worker twice."""


CHANNEL = "left('statecharts_wake_' || current_schema(), 63)"
"""The wake-up channel: one per schema, so stores in other schemas are not woken."""


_WAKE_CALL = f"pg_notify({CHANNEL}, '{PROCESS}')"


PROGRESS = "ran"
"""The mark of a NOTIFY telling waiters that a run they watch committed a step (`watch`),
`ran:<run id>`: every listener takes it, this process's too (its waiter may be anywhere)."""


TOLD = "r.waiters > 0 AND r.waited_until > now() AS told"
"""What a step's run row returns besides its id and version: whether it has waiters."""


_TELL_WAITERS = f"CASE WHEN run.told THEN pg_notify({CHANNEL}, '{PROGRESS}:' || run.id::text) END"
"""In a step's result row: a NOTIFY `ran:<run id>` for the run's waiters, only if the row it
wrote says it has some (`waiters`, `waited_until`, schema 11: `watch`). Read from the row the
step's UPDATE wrote, which is the newest version (a waiter's UPDATE commits before the step's
or waits for it), so no waiter is missed; on the hot path, one more column returned."""


@lru_cache(maxsize=256)
def psycopg_style(sql: str) -> str:
    """Shared SQL (`?` markers) in psycopg's format style."""
    return sql.replace("%", "%%").replace("?", "%s")


def steps_statement(
    commits: Sequence[StepCommit],
    ids: list[str],
    now: int,
    ring: PayloadCodec | None,
    from_rest: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The one statement (and its parameters) that writes `commits` (`steps_sql`): one
    commit's run row as plain parameters (`_one_run_sql`), a batch's as a JSON row set; its
    payloads sealed by `ring` when there is one."""
    one = len(commits) == 1
    failing = any(c.error_traceback is not None for c in commits)
    params = _steps_params(commits, now, with_runs=not one, tracebacks=failing)
    if ring is not None:
        seal_rows(params, ring)
    present = {
        "outcomes": params["outcomes"],
        "effects": params["effects"],
        "inbox": params["inbox"] and not from_rest,  # (its event has no row)
        "calls": params["calls"],
        "stops": params["stops"],
        "journal": params["journal"],
        "dead": params["dead"],
        "search": params["search"],
    }
    parts = tuple(name for name, rows in present.items() if rows)
    for name in parts if one else ("steps", *parts):  # (the others are not in the statement)
        params[name] = json_param(params[name])
    if not one:
        params["ids"] = uuid_array(ids)
        return steps_sql(parts, "batch", failing), params
    commit = commits[0]
    params.update(_run_params(commit, ids[0], now, ring))
    if failing:
        params["error_traceback"] = commit.error_traceback
    if from_rest:
        return steps_sql(parts, from_rest, failing), params
    form = ("release" if commit.release else "keep", commit.unleased, bool(commit.effect_outcomes))
    return steps_sql(parts, form, failing), params


def _run_params(
    commit: StepCommit, run_id: str, now: int, ring: PayloadCodec | None
) -> dict[str, Any]:
    """One step's run row as the plain parameters of `_one_run_sql` and `_FROM_REST_RUN`."""
    completed_at, failed_at = completion_times(commit.status, now)
    snapshot = (
        commit.snapshot if ring is None else ring.seal(commit.snapshot, run_id, Column.SNAPSHOT)
    )
    return {
        "id": run_id,
        "expected": commit.expected_version,
        "owner": commit.owner,
        "state": commit.state,
        "snapshot": json_param(snapshot),
        "status": commit.status,
        "attempts": commit.attempt_count,
        "last_error": commit.last_error,
        "wv": commit.workflow_version,
        "completed": completed_at,
        "failed": failed_at,
        "lease": commit.lease_until,
        "wake": commit.wake_at,
        "outcome_count": len(commit.effect_outcomes),
    }


def from_rest_statement(
    commit: StepCommit,
    rest: RunRecord,
    now: int,
    ring: PayloadCodec | None,
    finish: CallFinish | None = None,
) -> tuple[str, dict[str, Any]]:
    """`steps_statement` of a step computed from `rest` (`_FROM_REST_RUN`): the sent event
    is not in the inbox (nothing to consume), the run's columns are plain parameters; with
    `finish`, the step of a call's result, with the call's end (`_FINISH_FROM_REST_RUN`).
    A sealed snapshot is never sealed twice alike (a new nonce each time), so with a `ring`
    the row is matched by its version alone (`was` NULL): an envelope cannot be edited by
    hand into another valid one, and one rewritten by `reencrypt` holds the same value."""
    sql, params = steps_statement(
        [commit], [uuid_text(rest.id)], now, ring, from_rest="finish" if finish else "rest"
    )
    if finish is not None:
        params.update(call_end_params(finish))
    params.update(
        was=None if ring is not None else json_param(rest.snapshot),
        was_version=rest.workflow_version,
        due=wakes_now(commit, now),
    )
    return sql, params


def wakes_now(commit: StepCommit, now: int) -> bool:
    """Whether a step from rest leaves its run due at once (a timer due by `now`): other
    processes' workers are woken for it."""
    return commit.wake_at is not None and commit.wake_at <= now


def call_end_params(finish: CallFinish) -> dict[str, Any]:
    """A call's end as the parameters of the statements that write it with its result's step
    (`_FINISH_FROM_REST_RUN`, `_FINISH_BURST_RUNS`): which attempt of whose call, and how it
    ended."""
    end = finish.end
    return {
        "call_key": finish.key,
        "call_owner": finish.owner,
        "call_attempt": finish.attempt,
        "call_status": finish.status,
        "call_error": end.message if finish.status == "failed" else None,
        "outcome": end.outcome,
        "error_name": end.error_name,
        "message": end.message,
        "traceback": end.traceback,
    }


def has_extras(commit: StepCommit) -> bool:
    """Whether a step writes other runs too (starts, stops or tells them)."""
    return bool(commit.start_runs or commit.stop_children or commit.deliveries)


def _epoch_ms(column: str) -> str:
    """SQL for a timestamptz column as epoch milliseconds, rounded down as `to_ms` does."""
    return f"floor(extract(epoch FROM {column}) * 1000)::bigint"


_EFFECT_ITEM = (
    "jsonb_build_array(e.idempotency_key, e.step, e.effect_index, e.kind, e.payload, e.status, "
    f"e.result, e.error, {_epoch_ms('e.created_at')}, {_epoch_ms('e.updated_at')})"
)


_INBOX_ITEM = f"jsonb_build_array(i.id, i.event, {_epoch_ms('i.created_at')}, i.traceparent)"


_WORK_ARRAYS = (
    f"(SELECT coalesce(jsonb_agg({_EFFECT_ITEM} ORDER BY e.step, "
    "e.effect_index), '[]'::jsonb) FROM workflow_effects e WHERE e.run_id = r.id AND "
    f"e.status = 'pending'), (SELECT coalesce(jsonb_agg({_INBOX_ITEM} ORDER BY i.id), "
    "'[]'::jsonb) FROM workflow_inbox i WHERE i.run_id = r.id AND i.dead_at IS NULL)"
)
"""A run `r`'s pending effects and live inbox events as two JSON arrays (the rows
`pending_work` reads, in its order)."""


LEASED_WORK = (
    f"SELECT r.id::text, {_WORK_ARRAYS} "
    "FROM workflow_runs r WHERE r.wake_at = %(exp)s AND r.lease_owner = %(owner)s"
)
"""After a claim, in its transaction: the pending effects and live inbox events of the runs it
leased (found by the lease it set, through the due-time index), as `_WORK_ARRAYS`."""


READ_WORK = (
    f"SELECT {RUN_COLUMNS.replace('id::text', 'r.id::text', 1)}, {_WORK_ARRAYS} "
    "FROM workflow_runs r WHERE r.id = ANY(%(ids)s::uuid[])"
)
"""`read_work`: runs by id with their pending work (`_WORK_ARRAYS`), no lease."""


def heartbeat_sql(ids: str) -> str:
    """`PostgresStore.heartbeat`'s statement, its runs matched by `id {ids}` (a parameter):
    the owner's leases extended, skipping rows locked now; the runs it still holds."""
    return (
        f"WITH locked AS (SELECT id FROM workflow_runs WHERE lease_owner = %s AND id {ids} "
        "ORDER BY id FOR UPDATE SKIP LOCKED), extended AS (UPDATE workflow_runs r SET "
        "lease_expires_at = %s, wake_at = %s FROM locked WHERE r.id = locked.id RETURNING r.id) "
        f"SELECT id::text FROM workflow_runs WHERE lease_owner = %s AND id {ids}"
    )


def lease_params(
    owner: str, now: int, expires: int, limit: int, pairs: list[tuple[str, str]] | None
) -> dict[str, Any]:
    """The parameters of the claim statement (`lease_sql`)."""
    return {
        "now": to_ts(now),
        "exp": to_ts(expires),
        "limit": limit,
        "owner": owner,
        "names": [n for n, _ in pairs or ()],
        "versions": [v for _, v in pairs or ()],
    }


@lru_cache(maxsize=4)
def lease_sql(filtered: bool, order: str) -> str:
    """The claim statement: find the claimable runs (restricted to the given versions when
    `filtered`) in `order` (the due time aged by priority), lease them, return them with
    their previous owner and due time."""
    # (`workflow_name || ''`: not the versions' index. Before the table's first analysis, as
    # after a burst of starts, the planner takes a version's thousands of runs for one row
    # and walked them all through that index at every claim: 3.4 ms with 10,000 runs waiting
    # on calls, against 0.9 ms by the claim order's index; the same 0.7 ms once analysed)
    version_sql = (
        "AND (workflow_name || '', workflow_version) IN "
        "(SELECT * FROM unnest(%(names)s::text[], %(versions)s::text[]))"
        if filtered
        else ""
    )
    free = FREE.format(r="", now="%(now)s")
    due = CLAIMABLE.format(now="%(now)s", free=free)
    asked = CLAIMABLE_BY_EVENT.format(free=free)
    return (
        f"WITH due AS (SELECT {PICKED_NAMES} FROM workflow_runs WHERE {due} "
        # priorities (issue 30): never negative, so a due run's order is at most now
        f"AND {order} <= %(now)s {version_sql} ORDER BY {order} "
        "LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
        # the inbox's run ids as one array: an index probe per id, whatever the planner
        # guesses of the (often empty, never analysed) inbox
        f"asked AS (SELECT {PICKED_NAMES} FROM workflow_runs WHERE id = ANY(ARRAY(SELECT "
        f"DISTINCT run_id FROM workflow_inbox WHERE dead_at IS NULL)) AND {asked} "
        f"{version_sql} LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
        f"picked AS (SELECT {PICKED_NAMES} FROM due UNION SELECT {PICKED_NAMES} FROM asked "
        "LIMIT %(limit)s) "
        "UPDATE workflow_runs r SET lease_owner = %(owner)s, lease_expires_at = %(exp)s, "
        "wake_at = %(exp)s, claim_count = r.claim_count + 1 FROM picked "
        "WHERE r.id = picked.id RETURNING "
        + RUN_COLUMNS.replace("id::text", "r.id::text")
        .replace("lease_owner", "r.lease_owner")
        .replace("wake_at", "r.wake_at")
        + ", picked.lease_owner, picked.wake_at"
    )


def _ts(column: str) -> str:
    """SQL for a millisecond epoch (bigint, from JSON) as timestamptz, exactly."""
    return f"('epoch'::timestamptz + {column} * interval '1ms')"


def _at(name: str) -> str:
    """SQL for the parameter `name`, a millisecond epoch (an int, or None), as timestamptz: the
    hot statements take times as the integers the runtime keeps (no `datetime` built per
    parameter on the client), converted exactly as `_ts` converts JSON's."""
    return _ts(f"%({name})s::bigint")


_NOW = _at("now")


CREATE_RUN = f"""
WITH ins AS (
    INSERT INTO workflow_runs ({RUN_COLUMNS.replace("id::text", "id")})
    VALUES (%(id)s, %(name)s, %(wv)s, %(key)s, %(state)s, %(snapshot)s, %(status)s,
            %(attempts)s, {_NOW}, {_NOW}, {_at("completed")}, {_at("failed")}, %(last_error)s,
            {_at("wake")}, %(owner)s, {_at("lease")}, 1, %(claims)s, %(traceparent)s, %(parent)s,
            %(invoke)s, %(priority)s, NULL)
    {ACTIVE_KEY_CONFLICT} DO NOTHING
    RETURNING *, CASE WHEN lease_owner IS NULL AND wake_at <= {_NOW} THEN {_WAKE_CALL} END
), effects AS (
    INSERT INTO workflow_effects (idempotency_key, run_id, step, effect_index, kind, payload,
                                  status, created_at, updated_at)
    SELECT n.k, ins.id, 1, n.i, n.kind, n.payload, 'pending', {_NOW}, {_NOW}
    FROM ins, jsonb_to_recordset(%(effects)s) AS n(k text, i integer, kind text, payload jsonb)
)
SELECT {RUN_COLUMNS.replace(" snapshot,", " NULL::jsonb,", 1)}, true FROM ins
UNION ALL
SELECT {RUN_COLUMNS}, false FROM workflow_runs
WHERE workflow_name = %(name)s AND key = %(key)s AND status = 'active'
  AND parent_run_id IS NULL AND NOT EXISTS (SELECT 1 FROM ins)
"""


_CREATE_CALLS = f"""), calls AS (
    INSERT INTO workflow_calls (idempotency_key, run_id, step, call_id, payload, status, attempt,
                                owner, lease_expires_at, available_at, created_at, updated_at)
    SELECT c.k, ins.id, 1, c.id, c.payload,
           CASE WHEN %(unowned)s THEN 'pending' ELSE 'running' END,
           CASE WHEN %(unowned)s THEN 0 ELSE 1 END, %(call_owner)s, {_at("call_lease")},
           statecharts_claim_order({_NOW}, ins.priority), {_NOW}, {_NOW}
    FROM ins, jsonb_to_recordset(%(calls)s) AS c(k text, id text, payload jsonb)
), call_attempts AS (
    INSERT INTO workflow_call_attempts (idempotency_key, attempt, run_id, worker, started_at)
    SELECT c.k, 1, ins.id, %(call_owner)s, {_NOW}
    FROM ins, jsonb_to_recordset(%(calls)s) AS c(k text, id text, payload jsonb)
    WHERE NOT %(unowned)s
)"""


CREATE_RUN_WITH_CALLS = CREATE_RUN.replace(
    f"THEN {_WAKE_CALL} END", f"OR %(unowned)s THEN {_WAKE_CALL} END"
).replace("\n)\nSELECT", _CREATE_CALLS + "\nSELECT", 1)
"""`CREATE_RUN` with the first step's calls (`workflow_calls`), leased to the starter's
executor (their first attempts open) or due for any worker's (woken)."""


CREATE_RUNS = f"""
WITH b AS (
    SELECT * FROM jsonb_to_recordset(%(runs)s) AS b(
        id uuid, name text, wv text, state text, snapshot jsonb, status text, attempts integer,
        completed bigint, failed bigint, last_error text, wake bigint, traceparent text,
        owner text, lease bigint, claims integer, parent uuid, invoke text, priority integer,
        effects jsonb, calls jsonb, call_owner text, call_lease bigint)
), ins AS (
    INSERT INTO workflow_runs ({RUN_COLUMNS.replace("id::text", "id")})
    SELECT id, name, wv, NULL, state, snapshot, status, attempts, {_NOW}, {_NOW},
           {_ts("completed")}, {_ts("failed")}, last_error, {_ts("wake")}, owner, {_ts("lease")},
           1, claims, traceparent, parent, invoke, priority, NULL
    FROM b
    RETURNING *
), effects AS (
    INSERT INTO workflow_effects (idempotency_key, run_id, step, effect_index, kind, payload,
                                  status, created_at, updated_at)
    SELECT n.k, b.id, 1, n.i, n.kind, n.payload, 'pending', {_NOW}, {_NOW}
    FROM b, jsonb_to_recordset(b.effects) AS n(k text, i integer, kind text, payload jsonb)
), calls AS (
    INSERT INTO workflow_calls (idempotency_key, run_id, step, call_id, payload, status, attempt,
                                owner, lease_expires_at, available_at, created_at, updated_at)
    SELECT c.k, b.id, 1, c.id, c.payload,
           CASE WHEN b.call_owner IS NULL THEN 'pending' ELSE 'running' END,
           CASE WHEN b.call_owner IS NULL THEN 0 ELSE 1 END, b.call_owner, {_ts("b.call_lease")},
           statecharts_claim_order({_NOW}, b.priority), {_NOW}, {_NOW}
    FROM b, jsonb_to_recordset(b.calls) AS c(k text, id text, payload jsonb)
), call_attempts AS (
    INSERT INTO workflow_call_attempts (idempotency_key, attempt, run_id, worker, started_at)
    SELECT c.k, 1, b.id, b.call_owner, {_NOW}
    FROM b, jsonb_to_recordset(b.calls) AS c(k text, id text, payload jsonb)
    WHERE b.call_owner IS NOT NULL
), woken AS (
    SELECT {_WAKE_CALL} FROM b
    WHERE (b.owner IS NULL AND b.wake <= %(now)s::bigint)
       OR (b.call_owner IS NULL AND jsonb_array_length(b.calls) > 0)
    LIMIT 1
)
SELECT {RUN_COLUMNS.replace(" snapshot,", " NULL::jsonb,", 1)}, (SELECT count(*) FROM woken)
FROM ins
"""
"""A batch of starts without keys (`PostgresStore.create_runs`) as one statement: `CREATE_RUN`
and `CREATE_RUN_WITH_CALLS` for each row of `runs` (the same row values, as JSON), with a
wake-up where any has work due or a call no executor holds (one NOTIFY per transaction)."""


VERSION_PAIRS = """
WITH RECURSIVE pairs(n, v) AS (
    (SELECT workflow_name, workflow_version FROM workflow_runs
     ORDER BY workflow_name, workflow_version LIMIT 1)
    UNION ALL
    SELECT x.n, x.v FROM pairs p CROSS JOIN LATERAL (
        SELECT workflow_name AS n, workflow_version AS v FROM workflow_runs
        WHERE (workflow_name, workflow_version) > (p.n, p.v)
        ORDER BY workflow_name, workflow_version LIMIT 1) AS x
)
SELECT n, v FROM pairs"""
"""Every (name, version) pair of `workflow_runs`, whatever its runs' statuses: a loose scan of
`workflow_runs_versions`, one probe per pair."""


_STEPS_RUNS = f"""
WITH b AS (
    SELECT * FROM jsonb_to_recordset(%(steps)s) AS b(
        id uuid, expected bigint, owner text, state text, snapshot jsonb, status text,
        attempts integer, last_error text, wv text, completed bigint, failed bigint,
        release boolean, lease bigint, wake bigint, outcome_keys text[], unleased boolean)
), run AS (
    UPDATE workflow_runs r SET state = b.state, snapshot = b.snapshot, status = b.status,
        attempt_count = coalesce(b.attempts, r.attempt_count),
        last_error = coalesce(b.last_error, r.last_error), updated_at = {_NOW},
        workflow_version = coalesce(b.wv, r.workflow_version),
        completed_at = coalesce(r.completed_at, {_ts("b.completed")}),
        failed_at = coalesce(r.failed_at, {_ts("b.failed")}), version = b.expected + 1,
        lease_owner = CASE WHEN b.release THEN NULL ELSE b.owner END,
        claim_count = r.claim_count + (b.unleased AND NOT b.release)::int,
        lease_expires_at = CASE WHEN b.release THEN NULL
                                ELSE coalesce({_ts("b.lease")}, r.lease_expires_at) END,
        wake_at = CASE WHEN b.release THEN {_ts("b.wake")}
                       ELSE coalesce({_ts("b.lease")}, r.wake_at) END
    FROM b
    WHERE r.id = ANY(%(ids)s::uuid[])  -- the planner sees the batch size: index, never seq scan
      AND r.id = b.id
      AND CASE WHEN b.unleased THEN {UNLEASED_FENCE.format(r="r.", expected="b.expected")}
               ELSE {HELD_FENCE.format(r="r.", expected="b.expected", owner="b.owner")} END
      AND (cardinality(b.outcome_keys) = 0
           OR (SELECT count(*) FROM workflow_effects e
               WHERE e.run_id = b.id AND e.status = 'pending'
                 AND e.idempotency_key = ANY(b.outcome_keys)) = cardinality(b.outcome_keys))
    RETURNING r.id, r.version, r.snapshot, r.priority, {TOLD}
)"""


_ONE_RUN_SET = f"""
    UPDATE workflow_runs r SET state = %(state)s, snapshot = %(snapshot)s, status = %(status)s,
        attempt_count = coalesce(%(attempts)s, r.attempt_count),
        last_error = coalesce(%(last_error)s, r.last_error), updated_at = {_NOW},
        workflow_version = coalesce(%(wv)s, r.workflow_version),
        completed_at = coalesce(r.completed_at, {_at("completed")}),
        failed_at = coalesce(r.failed_at, {_at("failed")}), version = %(expected)s::bigint + 1,"""
"""The columns one step writes in its run row, as plain parameters (`_FROM_REST_RUN`,
`_one_run_sql`); each adds how it holds the lease and which row it may write."""


_FROM_REST_RUN = (
    """
WITH run AS ("""
    + _ONE_RUN_SET
    + f"""
        wake_at = {_at("wake")}
    WHERE r.id = %(id)s AND {UNLEASED_FENCE.format(r="r.", expected="%(expected)s::bigint")}
      AND r.snapshot = coalesce(%(was)s, r.snapshot)
      AND r.workflow_version = %(was_version)s AND statecharts_still_at_rest(r.id)
    RETURNING r.id, r.version, r.snapshot, r.priority, {TOLD}
)"""
)
"""The run's row written by a step computed from the run as last committed here
(`send_and_step`'s `rest`): what `_STEPS_RUNS` writes for an unleased step that releases the
run and executed nothing (so no outcomes, no lease to take or give back), as plain parameters
(measured: 0.21 ms of server time against the batch form's 0.29, and 0.1 ms less client CPU),
only if the run is still so: at the version,
with the snapshot and definition the step was computed from (the version alone does not see a
hand edit of the row, which must never be overwritten: a row that does not restore is failed
by a claim, as it is), active, held by nobody, no event waiting before the sent one and no
effect waiting to run."""


_FINISH_FROM_REST_RUN = (
    _FROM_REST_RUN.replace(
        "\nWITH run AS (",
        """
WITH held AS (
    SELECT 1 FROM workflow_calls WHERE idempotency_key = %(call_key)s AND owner = %(call_owner)s
      AND attempt = %(call_attempt)s::integer AND status = 'running'
      AND statecharts_still_at_rest(%(id)s::uuid) FOR UPDATE
), run AS (""",
        1,
    ).replace(" AND statecharts_still_at_rest(r.id)", " AND EXISTS (SELECT 1 FROM held)", 1)
    + f"""
, finished AS (
    UPDATE workflow_calls k SET status = %(call_status)s, owner = NULL, lease_expires_at = NULL,
        error = %(call_error)s, updated_at = {_NOW}
    FROM run WHERE k.idempotency_key = %(call_key)s
), attempt_ended AS (
    UPDATE workflow_call_attempts a SET outcome = %(outcome)s, ended_at = {_NOW},
        error_name = %(error_name)s, message = %(message)s, traceback = %(traceback)s
    FROM run WHERE a.idempotency_key = %(call_key)s AND a.attempt = %(call_attempt)s::integer
      AND a.outcome IS NULL
)"""
)
"""`_FROM_REST_RUN` for the step that applies a call's result (`send_and_step`'s `finish`),
written with the call's end only while its holder still holds it (the call's row locked):
one round trip for a call's end and the step it feeds. The run is locked and checked at rest
before the call's row is locked (the function is in the call's scan, under its lock): the one
lock order, run then call, of every writer."""


_FROM_REST_RESULT = (
    "\nSELECT id::text, version, nextval('workflow_inbox_id_seq'), "
    f"CASE WHEN %(due)s THEN {_WAKE_CALL} END, {_TELL_WAITERS} FROM run"
)
"""The result of a step written from rest: the new version, the sent event's inbox id (drawn
from the inbox's sequence, as its insert would), and the wake-up of other processes' workers
when the step left work due."""


_FINISH_BURST_RUNS = f"""
WITH b AS (
    SELECT * FROM jsonb_to_recordset(%(steps)s) AS b(
        id uuid, expected bigint, state text, snapshot jsonb, status text, attempts integer,
        last_error text, error_traceback text, wv text, completed bigint, failed bigint,
        wake bigint, was jsonb, was_version text, due boolean, call_key text, call_owner text,
        call_attempt integer, call_status text, call_error text, outcome text,
        error_name text, message text, traceback text)
), held AS (
    SELECT k.idempotency_key FROM workflow_calls k JOIN b ON k.idempotency_key = b.call_key
    WHERE k.owner = b.call_owner AND k.attempt = b.call_attempt AND k.status = 'running'
    ORDER BY k.idempotency_key FOR UPDATE OF k
), run AS (
    UPDATE workflow_runs r SET state = b.state, snapshot = b.snapshot, status = b.status,
        attempt_count = coalesce(b.attempts, r.attempt_count),
        error_traceback = coalesce(b.error_traceback, r.error_traceback),
        last_error = coalesce(b.last_error, r.last_error), updated_at = {_NOW},
        workflow_version = coalesce(b.wv, r.workflow_version),
        completed_at = coalesce(r.completed_at, {_ts("b.completed")}),
        failed_at = coalesce(r.failed_at, {_ts("b.failed")}), version = b.expected + 1,
        wake_at = {_ts("b.wake")}
    FROM b
    WHERE r.id = b.id AND {UNLEASED_FENCE.format(r="r.", expected="b.expected")}
      AND r.snapshot = coalesce(b.was, r.snapshot)
      AND r.workflow_version = b.was_version
      AND statecharts_still_at_rest(r.id)
      AND b.call_key IN (SELECT idempotency_key FROM held)
    RETURNING r.id, r.version, r.snapshot, r.priority, {TOLD}
), finished AS (
    UPDATE workflow_calls k SET status = b.call_status, owner = NULL, lease_expires_at = NULL,
        error = b.call_error, updated_at = {_NOW}
    FROM run JOIN b ON b.id = run.id WHERE k.idempotency_key = b.call_key
), attempt_ended AS (
    UPDATE workflow_call_attempts a SET outcome = b.outcome, ended_at = {_NOW},
        error_name = b.error_name, message = b.message, traceback = b.traceback
    FROM run JOIN b ON b.id = run.id
    WHERE a.idempotency_key = b.call_key AND a.attempt = b.call_attempt AND a.outcome IS NULL
)"""
"""`_FINISH_FROM_REST_RUN` for a burst of call ends (`PostgresStore._finish_burst_from_rest`):
the same fence and the same writes per run, each run's row (with its call's end) a row of one
JSON row set, so that one statement writes the burst. A run whose row is no longer as its
step was computed from, or whose call its holder no longer holds, is left out (not written,
its call's end neither), exactly as the single statement leaves it. The runs are found by
`r.id = b.id` alone: `_STEPS_RUNS`' `r.id = ANY(ids)` made the planner price the primary key's
path per row of the burst as a probe of every id, so it took `workflow_runs_versions` or
`workflow_runs_stuck` instead, scanning every active run for each row (EXPLAIN ANALYZE at
10,000 runs: 2.1 s for 500 ends; by the primary key 30-80 ms)."""


_FINISH_BURST_RESULT = (
    "\nSELECT run.id::text, run.version, nextval('workflow_inbox_id_seq'), "
    f"CASE WHEN b.due THEN {_WAKE_CALL} END, {_TELL_WAITERS} FROM run JOIN b ON b.id = run.id"
)
"""`_FROM_REST_RESULT` per run written by the burst."""


@lru_cache(maxsize=32)
def finish_burst_sql(parts: tuple[str, ...]) -> str:
    """The burst's statement (`_FINISH_BURST_RUNS`) with only the step parts it needs."""
    return _FINISH_BURST_RUNS + "".join(STEPS_PARTS[p] for p in parts) + _FINISH_BURST_RESULT


_FROM_REST_PARTS = ("outcomes", "effects", "calls", "stops", "journal", "dead", "search")
"""The step parts of a statement from rest, in `steps_statement`'s order (no `inbox`: the sent
event has no row to consume)."""


def finish_burst_statement(
    steps: Sequence[tuple[StepCommit, RunRecord, CallFinish]], now: int, ring: PayloadCodec | None
) -> tuple[str, dict[str, Any]]:
    """The one statement (and its parameters) that writes a burst of steps computed from rest,
    each with the end of the call whose result it applies (`finish_burst_sql`): per run what
    `from_rest_statement` writes for it with its `finish`."""
    commits = [commit for commit, _, _ in steps]
    failing = any(c.error_traceback is not None for c in commits)
    params = _steps_params(commits, now, with_runs=True, tracebacks=failing)
    if ring is not None:
        seal_rows(params, ring)
    for row, (commit, rest, finish) in zip(params["steps"], steps, strict=True):
        row.update(
            call_end_params(finish),
            was=None if ring is not None else rest.snapshot,
            was_version=rest.workflow_version,
            due=wakes_now(commit, now),
        )
    parts = tuple(p for p in _FROM_REST_PARTS if params[p])
    for name in ("steps", *parts):
        params[name] = json_param(params[name])
    return finish_burst_sql(parts), params


LOCK_RUNS = "SELECT 1 FROM workflow_runs WHERE id = ANY(%s::uuid[]) ORDER BY id FOR NO KEY UPDATE"
"""A burst's runs locked, in one lock order (the rows are locked as sorted), before its one
statement (`_FINISH_BURST_RUNS`) checks each at rest (`statecharts_still_at_rest`, which then
finds its row already held) and locks the calls: run then call, as every writer locks them."""


RENEW_CALLS = """
WITH mine AS (
    SELECT idempotency_key FROM workflow_calls
    WHERE idempotency_key = ANY(%(keys)s::text[]) AND owner = %(owner)s AND status = 'running'
), free AS (
    SELECT c.idempotency_key FROM workflow_calls c JOIN mine USING (idempotency_key)
    WHERE c.owner = %(owner)s AND c.status = 'running'
    ORDER BY c.idempotency_key FOR UPDATE OF c SKIP LOCKED
), renewed AS (
    UPDATE workflow_calls c SET lease_expires_at = %(expires)s, updated_at = %(ts)s,
        details = coalesce(b.details::jsonb, c.details)
    FROM free JOIN unnest(%(keys)s::text[], %(details)s::text[]) AS b(k, details)
        ON b.k = free.idempotency_key
    WHERE c.idempotency_key = free.idempotency_key
)
SELECT idempotency_key FROM mine
"""
"""A heartbeat's renewals (`PostgresStore._renew_calls_in`): the calls still the owner's
(as last committed), each renewed unless another transaction holds its row."""


STEPS_PARTS = {
    "outcomes": f""", outcomes AS (
    UPDATE workflow_effects e SET status = o.s, result = o.r, error = o.e, updated_at = {_NOW}
    FROM run JOIN jsonb_to_recordset(%(outcomes)s) AS o(run uuid, k text, s text, r jsonb, e text)
        ON o.run = run.id
    WHERE e.idempotency_key = o.k AND e.run_id = run.id AND e.status = 'pending'
)""",
    "effects": f""", effects AS (
    INSERT INTO workflow_effects (idempotency_key, run_id, step, effect_index, kind, payload,
                                  status, created_at, updated_at)
    SELECT n.k, run.id, run.version, n.i, n.kind,
           n.payload, 'pending', {_NOW}, {_NOW}
    FROM run JOIN jsonb_to_recordset(%(effects)s) AS n(run uuid, k text, i integer, kind text,
                                                        payload jsonb) ON n.run = run.id
)""",
    "inbox": """, consumed AS (
    DELETE FROM workflow_inbox i USING run, jsonb_to_recordset(%(inbox)s) AS c(run uuid, id bigint)
    WHERE c.run = run.id AND i.run_id = run.id AND i.id = c.id
)""",
    "dead": f""", dead AS (
    UPDATE workflow_inbox i SET dead_at = {_NOW}, dead_reason = d.reason
    FROM run JOIN jsonb_to_recordset(%(dead)s) AS d(run uuid, reason text, keep bigint[])
        ON d.run = run.id
    WHERE i.run_id = run.id AND i.dead_at IS NULL AND NOT (i.id = ANY(d.keep))
)""",
    "calls": f""", calls AS (
    INSERT INTO workflow_calls (idempotency_key, run_id, step, call_id, payload, status, attempt,
                                owner, lease_expires_at, available_at, created_at, updated_at)
    SELECT c.k, run.id, run.version, c.id, c.payload,
           CASE WHEN c.owner IS NULL THEN 'pending' ELSE 'running' END,
           CASE WHEN c.owner IS NULL THEN 0 ELSE 1 END, c.owner, {_ts("c.lease")},
           statecharts_claim_order({_NOW}, run.priority), {_NOW}, {_NOW}
    FROM run JOIN jsonb_to_recordset(%(calls)s) AS c(run uuid, k text, id text, payload jsonb,
                                                      owner text, lease bigint) ON c.run = run.id
), call_attempts AS (
    INSERT INTO workflow_call_attempts (idempotency_key, attempt, run_id, worker, started_at)
    SELECT c.k, 1, run.id, c.owner, {_NOW}
    FROM run JOIN jsonb_to_recordset(%(calls)s) AS c(run uuid, k text, id text, payload jsonb,
                                                      owner text, lease bigint) ON c.run = run.id
    WHERE c.owner IS NOT NULL
)""",
    "stops": f""", stopping AS (
    SELECT k.idempotency_key AS k, k.attempt, k.status AS was, k.run_id, s.reason, s.drop, s.keep
    FROM run JOIN jsonb_to_recordset(%(stops)s) AS s(run uuid, id text, reason text,
                                                      drop boolean, keep bigint[]) ON s.run = run.id
    JOIN workflow_calls k ON k.run_id = run.id AND k.call_id = s.id AND k.step < run.version
), stopped AS (
    UPDATE workflow_calls k SET status = 'stopped', error = st.reason, owner = NULL,
        lease_expires_at = CASE WHEN st.was = 'running' THEN k.lease_expires_at END,
        waiting_for = NULL, updated_at = {_NOW}
    FROM stopping st WHERE k.idempotency_key = st.k AND st.was IN ('pending', 'running')
), stopped_attempts AS (
    UPDATE workflow_call_attempts a SET outcome = 'stopped', ended_at = {_NOW}, message = st.reason
    FROM stopping st WHERE a.idempotency_key = st.k AND a.attempt = st.attempt
      AND a.outcome IS NULL AND st.was IN ('pending', 'running')
), dropped AS (
    UPDATE workflow_inbox i SET dead_at = {_NOW}, dead_reason = 'the result of a call ' || st.reason
    FROM stopping st WHERE i.run_id = st.run_id AND i.call_key = st.k AND i.dead_at IS NULL
      AND st.drop AND st.was IN ('done', 'failed') AND NOT (i.id = ANY(st.keep))
)""",
    "journal": f""", journal AS (
    INSERT INTO workflow_events (run_id, step, event, state_before, state_after, created_at,
                                 inbox_id, snapshot)
    SELECT run.id, run.version, j.event, j.before, j.after, {_NOW}, j.inbox,
           CASE WHEN j.last THEN run.snapshot END
    FROM run JOIN jsonb_to_recordset(%(journal)s) AS j(run uuid, n integer, event jsonb,
                                                        before text, after text, inbox bigint,
                                                        last boolean)
        ON j.run = run.id
    ORDER BY j.n
)""",
    "search": """, search_set AS (
    INSERT INTO workflow_search (run_id, name, value)
    SELECT run.id, a.name, a.value
    FROM run JOIN jsonb_to_recordset(%(search)s) AS a(run uuid, name text, value text)
        ON a.run = run.id
    WHERE a.value IS NOT NULL
    ON CONFLICT (run_id, name) DO UPDATE SET value = excluded.value
), search_unset AS (
    DELETE FROM workflow_search s
    USING run, jsonb_to_recordset(%(search)s) AS a(run uuid, name text, value text)
    WHERE a.run = run.id AND s.run_id = run.id AND s.name = a.name AND a.value IS NULL
)""",
}


_STEPS_RESULT = f"\nSELECT id::text, version, {_TELL_WAITERS} FROM run"
"""The result of a step statement: each written run's id and new version (its waiters told)."""


@lru_cache(maxsize=64)
def steps_sql(
    parts: tuple[str, ...], run: str | tuple[str, bool, bool] = "batch", tracebacks: bool = False
) -> str:
    """The one statement that commits steps, with only the parts it needs (fewer
    sub-statements to plan and run on the hot path); `run`: how it writes the run rows, a
    batch's (`_STEPS_RUNS`), one step computed from rest (`"rest"`: `_FROM_REST_RUN`,
    `_FROM_REST_RESULT`) or one step's (`_one_run_sql`'s form); the other parts are the batch's.
    `tracebacks`: a step fails its run with a traceback (`_with_error_traceback`)."""
    body = "".join(STEPS_PARTS[p] for p in parts)
    if run == "rest":
        sql = _FROM_REST_RUN + body + _FROM_REST_RESULT
    elif run == "finish":
        sql = _FINISH_FROM_REST_RUN + body + _FROM_REST_RESULT
    elif run == "batch":
        sql = _STEPS_RUNS + body + _STEPS_RESULT
    else:
        assert isinstance(run, tuple)
        sql = _one_run_sql(*run) + body + _STEPS_RESULT
    return _with_error_traceback(sql, run == "batch") if tracebacks else sql


def _with_error_traceback(sql: str, batch: bool) -> str:
    """A step statement that also writes `error_traceback` beside `last_error` (the batch's
    from its JSON row set, one step's as the parameter `error_traceback`): only the rare step
    that fails its run names the column, so the hot statements stay as they were."""
    value = "b.error_traceback" if batch else "%(error_traceback)s"
    written = sql.replace(
        "last_error = coalesce(",
        f"error_traceback = coalesce({value}, r.error_traceback),\n        last_error = coalesce(",
        1,
    )
    if batch:
        written = written.replace("unleased boolean)", "unleased boolean, error_traceback text)", 1)
    assert written.count("error_traceback") == (4 if batch else 3), written
    return written


def _one_run_sql(lease: str, unleased: bool, outcomes: bool) -> str:
    """`_STEPS_RUNS` for one step, its row's columns as plain parameters and its choices
    (whether it keeps the lease, was computed without one, records outcomes) made here, not
    by a CASE per row: the batch's JSON row set of the run is a parse on the server and a
    16-key object on the client, for one row."""
    if lease == "release":
        held = f"lease_owner = NULL, lease_expires_at = NULL, wake_at = {_at('wake')}"
    else:
        held = (
            "lease_owner = %(owner)s, "
            + ("claim_count = r.claim_count + 1, " if unleased else "")
            + f"lease_expires_at = coalesce({_at('lease')}, r.lease_expires_at), "
            f"wake_at = coalesce({_at('lease')}, r.wake_at)"
        )
    fence = (UNLEASED_FENCE if unleased else HELD_FENCE).format(
        r="r.", expected="%(expected)s::bigint", owner="%(owner)s"
    )
    pending = (
        "\n      AND (SELECT count(*) FROM workflow_effects e WHERE e.run_id = r.id"
        " AND e.status = 'pending' AND e.idempotency_key IN (SELECT o.k FROM "
        "jsonb_to_recordset(%(outcomes)s) AS o(k text))) = %(outcome_count)s"
        if outcomes
        else ""
    )
    return f"""
WITH run AS ({_ONE_RUN_SET} {held}
    WHERE r.id = %(id)s AND {fence}{pending}
    RETURNING r.id, r.version, r.snapshot, r.priority, {TOLD}
)"""


def _steps_params(
    commits: Sequence[StepCommit], now: int, with_runs: bool = True, tracebacks: bool = False
) -> dict[str, Any]:
    """The batch as JSON row sets, one per table the statement writes (`with_runs`: the
    runs' rows too, `steps`; `tracebacks`: with their `error_traceback`)."""
    steps: list[dict[str, Any]] = []
    outcomes: list[dict[str, Any]] = []
    effects: list[dict[str, Any]] = []
    inbox: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    stops: list[dict[str, Any]] = []
    journal: list[dict[str, Any]] = []
    dead: list[dict[str, Any]] = []
    search: list[dict[str, Any]] = []
    for c in commits:
        if with_runs:
            completed_at, failed_at = completion_times(c.status, now)
            steps.append(
                {
                    "id": c.run_id,
                    "expected": c.expected_version,
                    "owner": c.owner,
                    "state": c.state,
                    "snapshot": c.snapshot,
                    "status": c.status,
                    "attempts": c.attempt_count,
                    "last_error": c.last_error,
                    "wv": c.workflow_version,
                    "completed": completed_at,
                    "failed": failed_at,
                    "release": c.release,
                    "lease": c.lease_until,
                    "wake": c.wake_at,
                    "outcome_keys": [o.idempotency_key for o in c.effect_outcomes],
                    "unleased": c.unleased,
                }
            )
            if tracebacks:
                steps[-1]["error_traceback"] = c.error_traceback
        outcomes += [
            {"run": c.run_id, "k": o.idempotency_key, "s": o.status, "r": o.result, "e": o.error}
            for o in c.effect_outcomes
        ]
        step = c.expected_version + 1
        effects += [
            {
                "run": c.run_id,
                "k": idempotency_key(uuid_text(c.run_id), step, e.index),
                "i": e.index,
                "kind": e.kind,
                "payload": e.payload,
            }
            for e in c.new_effects
            if not is_call(e)
        ]
        owner, lease = c.call_lease if c.call_lease is not None else (None, None)
        calls += [
            {
                "run": c.run_id,
                "k": idempotency_key(uuid_text(c.run_id), step, e.index),
                "id": e.payload.get("id"),
                "payload": e.payload,
                "owner": owner,
                "lease": lease,
            }
            for e in c.new_effects
            if is_call(e)
        ]
        reason = STOPPED_BY_EXIT if c.status == ACTIVE else STOPPED_BY_END
        stops += [
            {
                "run": c.run_id,
                "id": i,
                "reason": reason,
                "drop": c.status == ACTIVE,
                "keep": list(c.consumed_inbox),
            }
            for i in c.stop_calls
        ]
        inbox += [{"run": c.run_id, "id": i} for i in c.consumed_inbox]
        if c.status != ACTIVE:  # its still-queued events become dead letters
            dead.append(
                {"run": c.run_id, "reason": ended_reason(c.status), "keep": list(c.consumed_inbox)}
            )
        journal += [
            {
                "run": c.run_id,
                "n": len(journal) + n,
                "event": j.event,
                "before": j.state_before,
                "after": j.state_after,
                "inbox": j.inbox_id,
                "last": n == len(c.journal) - 1,
            }  # (its row keeps the step's snapshot)
            for n, j in enumerate(c.journal)
        ]
        search += [{"run": c.run_id, "name": n, "value": v} for n, v in c.search.items()]
    return {
        "steps": steps,
        "outcomes": outcomes,
        "effects": effects,
        "inbox": inbox,
        "calls": calls,
        "stops": stops,
        "journal": journal,
        "dead": dead,
        "search": search,
        "now": now,
    }


def seal_rows(params: Mapping[str, Any], ring: PayloadCodec, run_id: str | None = None) -> None:
    """The payloads of `_steps_params`' row sets (those of them in `params`) sealed in
    place, each for its run (its `run`, or `run_id` for a new run's rows, which have none)."""
    for name, field, column in (
        ("steps", "snapshot", Column.SNAPSHOT),
        ("outcomes", "r", Column.EFFECT_RESULT),
        ("effects", "payload", Column.EFFECT_PAYLOAD),
        ("calls", "payload", Column.CALL_PAYLOAD),
        ("journal", "event", Column.JOURNAL),
    ):
        for row in params.get(name, ()):
            owner = run_id or uuid_text(row["id"] if name == "steps" else row["run"])
            row[field] = ring.seal(row[field], owner, column)
