"""The PostgreSQL store on a Citus cluster (docs/citus.md).

Distribution: a run and everything of it (outbox, inbox, journal, deliveries, calls and their
attempts, search attributes, fork link) are hash-distributed by the run's id, co-located, so a
statement about one run is routed to the one shard that holds it. Business keys live in a
table of their own distributed by key (`workflow_run_keys`), so a key is unique across the
cluster (Citus refuses a unique index without the distribution column); limits and their
places are distributed by the limit's name. Breakers, claims, schedules and the schema
version stay plain tables on the coordinator.

What differs from `PostgresStore` (the rest is its code):

- steps, sends, starts and call ends take the store's per-run statements (`SQLStore`) instead
  of PostgreSQL's batched ones (one statement over several runs is a multi-shard statement);
- a claim is made shard by shard, each claim statement sent to the worker node holding the
  shard and run against its shard tables (Citus takes row locks only in single-shard queries,
  and `FOR UPDATE SKIP LOCKED` is what lets claimers pass each other): claims spread over the
  nodes, and more nodes claim more;
- wake-ups are sent by a statement of their own on the coordinator, where every store
  connection and its listener are (a `pg_notify` inside a routed statement would run on a
  worker node, which no listener hears).
"""

from __future__ import annotations

import itertools
import logging
import re
import struct
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg_pool
from psycopg.conninfo import make_conninfo

from persistence.stores.conflicts import retried
from persistence.stores.errors import StoreError
from persistence.stores.planners import PlanT, Sent, StepPlanner
from persistence.stores.postgres import PostgresStore
from persistence.stores.postgres_connections import Checkout, RecentFirstPool
from persistence.stores.postgres_statements import (
    CHANNEL,
    LEASED_WORK,
    PROGRESS,
    heartbeat_sql,
    lease_params,
    lease_sql,
)
from persistence.stores.postgres_values import to_ts
from persistence.stores.records import (
    CallFinish,
    CallRecord,
    NewEffect,
    NewRun,
    PendingWork,
    RunQuery,
    RunRecord,
    StepCommit,
)
from persistence.stores.rules import check_distinct_runs, unowned_calls
from persistence.stores.run_ids import random_uuid
from persistence.stores.sql import SQLStore

SHARD_MAP_TTL_S = 30.0
"""How long a store trusts the shard map it read (a rebalance moves shards; a claim sent to
a node that no longer holds its shard fails, and the map is read again at once)."""

_DISTRIBUTE = """
DROP INDEX IF EXISTS workflow_runs_active_key;
CREATE TABLE workflow_run_keys (
    key           text NOT NULL,
    workflow_name text NOT NULL,
    run_id        uuid NOT NULL,                   -- the newest top-level run with the key
    PRIMARY KEY (key, workflow_name)
);
INSERT INTO workflow_run_keys
SELECT DISTINCT ON (key, workflow_name) key, workflow_name, id FROM workflow_runs
 WHERE key IS NOT NULL AND parent_run_id IS NULL
 ORDER BY key, workflow_name, status = 'active' DESC, created_at DESC;
ALTER TABLE workflow_inbox DROP CONSTRAINT workflow_inbox_pkey,
    ADD PRIMARY KEY (run_id, id);
ALTER TABLE workflow_call_attempts DROP CONSTRAINT workflow_call_attempts_idempotency_key_fkey,
    DROP CONSTRAINT workflow_call_attempts_pkey;
ALTER TABLE workflow_calls DROP CONSTRAINT workflow_calls_pkey,
    ADD PRIMARY KEY (run_id, idempotency_key);
ALTER TABLE workflow_call_attempts ADD PRIMARY KEY (run_id, idempotency_key, attempt),
    ADD FOREIGN KEY (run_id, idempotency_key) REFERENCES workflow_calls (run_id, idempotency_key)
    ON DELETE CASCADE;
ALTER TABLE workflow_capacity DROP CONSTRAINT workflow_capacity_run_id_fkey;
SELECT create_distributed_function('statecharts_claim_order(timestamptz, integer)');
SELECT create_distributed_table('workflow_runs', 'id', shard_count => {shards});
SELECT create_distributed_table('workflow_effects', 'run_id', colocate_with => 'workflow_runs');
SELECT create_distributed_table('workflow_inbox', 'run_id', colocate_with => 'workflow_runs');
SELECT create_distributed_table('workflow_events', 'run_id', colocate_with => 'workflow_runs');
SELECT create_distributed_table('workflow_deliveries', 'run_id',
                                colocate_with => 'workflow_runs');
SELECT create_distributed_table('workflow_calls', 'run_id', colocate_with => 'workflow_runs');
SELECT create_distributed_table('workflow_call_attempts', 'run_id',
                                colocate_with => 'workflow_runs');
SELECT create_distributed_table('workflow_search', 'run_id', colocate_with => 'workflow_runs');
SELECT create_distributed_table('workflow_forks', 'run_id', colocate_with => 'workflow_runs');
SELECT create_distributed_table('workflow_run_keys', 'key', shard_count => {shards});
SELECT create_distributed_table('workflow_key_tombstones', 'key',
                                colocate_with => 'workflow_run_keys');
SELECT create_distributed_table('workflow_limits', 'name', colocate_with => 'workflow_run_keys');
SELECT create_distributed_table('workflow_capacity', 'name', colocate_with => 'workflow_run_keys');
"""
"""The Citus set-up of a migrated schema (`CitusStore.migrate`, once): every unique key given
the distribution column, then the tables distributed. `{shards}`: shards per table."""

_SHARD_MAP = """
SELECT r.shardid, r.shardminvalue::int, r.shardmaxvalue::int, c.relname, s.shardid,
       n.nodename, n.nodeport
  FROM pg_dist_shard r
  JOIN pg_dist_partition pr ON pr.logicalrelid = r.logicalrelid
  JOIN pg_dist_partition pt ON pt.colocationid = pr.colocationid
  JOIN pg_dist_shard s ON s.logicalrelid = pt.logicalrelid AND s.shardminvalue = r.shardminvalue
  JOIN pg_class c ON c.oid = s.logicalrelid
   AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = r.logicalrelid)
  JOIN pg_dist_placement p ON p.shardid = r.shardid
  JOIN pg_dist_node n ON n.groupid = p.groupid
 WHERE r.logicalrelid = 'workflow_runs'::regclass
 ORDER BY r.shardid
"""
"""Each run shard with the shards co-located with it (outbox, inbox, journal, calls...) and the
node that holds them."""

log = logging.getLogger("statecharts.citus")
_TABLE = re.compile(r"\bworkflow_[a-z_]+\b")


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard group of the run tables: the run ids whose hash (`run_hash`) it holds
    (`low` to `high`), each table's shard id, and the node holding them."""

    low: int
    high: int
    tables: dict[str, int]
    node: tuple[str, int]

    def local(self, sql: str) -> str:
        """`sql` with the run tables named as this group's shard tables (on its node)."""

        def named(match: re.Match[str]) -> str:
            shard = self.tables.get(match.group(0))
            return match.group(0) if shard is None else f"{match.group(0)}_{shard}"

        return _TABLE.sub(named, sql)


class CitusStore(PostgresStore):
    """`PostgresStore` on a Citus coordinator (a `citus://` store URL; docs/citus.md).

    `shards`: shards per distributed table, used when `migrate` distributes the tables (a
    few per worker node's core; Citus's default is 32).
    """

    _NOTIFY = ""  # (a routed statement would notify on a worker node: `_tell_others`)
    _START_CONFLICT = ""  # (keys are taken in workflow_run_keys first: `_take_key_in`)
    _CREATE_IS_ONE_STATEMENT = False

    # Per-run statements (each routed to its run's shard) for what PostgreSQL batches.
    _commit_all_in = SQLStore._commit_all_in
    _commit_later_in = SQLStore._commit_later_in
    send_and_step = SQLStore.send_and_step
    read_work = SQLStore.read_work
    unknown_versions = SQLStore.unknown_versions

    def __init__(self, dsn: str, *, shards: int = 32, **options: Any) -> None:
        if not 1 <= shards <= 4096:
            raise ValueError(f"shards must be between 1 and 4096: {shards!r}")
        super().__init__(dsn, **options)
        self.url = re.sub(r"^postgres(ql)?://", "citus://", self.url)
        self.shards = shards
        self._nodes: dict[tuple[str, int], psycopg_pool.ConnectionPool[Any]] = {}
        self._map: list[Shard] = []
        self._map_read_at = float("-inf")
        self._map_lock = threading.Lock()
        self._turn = itertools.count()
        self._local = threading.local()

    # -- schema -----------------------------------------------------------------------------
    def migrate(self) -> list[int]:
        """The migrations (`PostgresStore.migrate`), then, once, the distribution of the
        tables (`_DISTRIBUTE`), under the migrations' advisory lock."""
        applied = super().migrate()
        with self._conn() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('statecharts_schema'))")
            done = conn.execute(
                "SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'workflow_runs'::regclass"
            ).fetchone()
            if done is None:
                conn.execute(_DISTRIBUTE.format(shards=self.shards).encode())
        return applied

    # -- one run tree per transaction ---------------------------------------------------------
    def commit_steps(
        self, commits: Sequence[StepCommit], now: int, *, cancelled: list[str] | None = None
    ) -> list[int | None]:
        """`SQLStore.commit_steps`, each step in a transaction of its own: a run tree lives on
        one shard, so each is a transaction on one node, where a batch's would span nodes
        (a two-phase commit, and a deadlock between such batches is only found by Citus's
        distributed detection, seconds later, after leases ran out)."""
        check_distinct_runs(commits)
        versions = [SQLStore.commit_steps(self, [c], now, cancelled=cancelled)[0] for c in commits]
        if any(unowned_calls(c.new_effects, c.call_lease) for c in commits):
            self._tell_others(None)  # (other processes' executors claim them)
        return versions

    def create_runs(
        self, runs: Sequence[tuple[NewRun, Sequence[NewEffect]]], now: int
    ) -> list[RunRecord]:
        """`SQLStore.create_runs`: the batch's runs are on many shards, so its one
        transaction is Citus's two-phase commit (new rows only: it waits for no other
        transaction's locks). Not PostgreSQL's pipelined statement, whose `pg_notify` Citus
        refuses in a distributed insert."""
        return SQLStore.create_runs(self, runs, now)

    def finish_calls(
        self,
        ends: Sequence[tuple[CallFinish, str, Mapping[str, Any]]],
        now: int,
        planner: StepPlanner[PlanT],
        cancelled: list[str] | None = None,
        rests: Mapping[str, RunRecord] | None = None,
    ) -> list[Sent[PlanT]]:
        """`SQLStore.finish_calls`, each end in a transaction of its own (`commit_steps`)."""
        return [SQLStore.finish_calls(self, [end], now, planner, cancelled)[0] for end in ends]

    @retried
    def heartbeat_calls(
        self, owner: str, beats: Mapping[str, Any], now: int, lease_ms: int
    ) -> set[str]:
        """`SQLStore.heartbeat_calls`, each call's renewal a statement of its own (one shard,
        no transaction spanning shards: `commit_steps`), all pipelined: one round trip."""
        ts, expires = to_ts(now), to_ts(now + lease_ms)
        keys = sorted(beats)
        renewals = [
            self._renewal(owner, key, self._sealed_details(key, beats[key]), ts, expires)
            for key in keys
        ]
        return {key for key, rows in zip(keys, self._read_all(renewals), strict=True) if rows}

    # -- shard by shard on the worker nodes -----------------------------------------------
    def _lease(
        self,
        owner: str,
        now: int,
        expires: int,
        limit: int,
        pairs: list[tuple[str, str]] | None,
        with_work: bool,
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """`PostgresStore._lease` shard group by shard group (`_on_shards`)."""
        runs: list[RunRecord] = []
        work: dict[str, PendingWork] = {}
        sql = lease_sql(pairs is not None, self._CLAIM_ORDER)

        def take(shard: Shard, limit: int) -> int:
            params = lease_params(owner, now, expires, limit, pairs)
            with self._connection() as conn:
                with conn.pipeline(), conn.transaction():
                    conn.execute("SET LOCAL synchronous_commit = off")
                    cursor = conn.execute(shard.local(sql), params)
                    found = conn.execute(shard.local(LEASED_WORK), params) if with_work else None
                rows = cursor.fetchall()
                work_rows = found.fetchall() if found is not None else None
            got, got_work = self._leased(rows, work_rows)
            runs.extend(got)
            work.update(got_work)
            return len(got)

        self._on_shards(limit, take, fill=True)
        return runs, work

    @retried
    def heartbeat(self, owner: str, run_ids: Collection[str], now: int, lease_ms: int) -> set[str]:
        """`PostgresStore.heartbeat` one run at a time (each statement routed to its run's
        shard: its `FOR UPDATE SKIP LOCKED` may not span shards), pipelined: one round trip."""
        expires = to_ts(now + lease_ms)
        sql = heartbeat_sql("= %s::uuid")
        with self._connection() as conn, conn.pipeline():
            cursors = [
                conn.execute(sql, (owner, rid, expires, expires, owner, rid))
                for rid in sorted(self._id(i) for i in run_ids)
            ]
        return {row[0] for cursor in cursors for row in cursor.fetchall()}

    @retried
    def claim_calls(
        self, owner: str, now: int, lease_ms: int, limit: int, run_id: str | None = None
    ) -> list[CallRecord]:
        """`SQLStore.claim_calls`; without `run_id`, shard group by shard group (`_on_shards`:
        its `FOR UPDATE SKIP LOCKED` would span every shard)."""
        if run_id is not None:
            return super().claim_calls(owner, now, lease_ms, limit, run_id)
        calls: list[CallRecord] = []

        def take(shard: Shard, limit: int) -> int:
            got = SQLStore.claim_calls(self, owner, now, lease_ms, limit)
            calls.extend(got)
            return len(got)

        self._on_shards(limit, take, fill=False)
        return calls

    def _on_shards(self, limit: int, take: Callable[[Shard, int], int], fill: bool) -> None:
        """`take(shard, left)` (how many it took of `left`) for each shard group in turn,
        starting at the next group (so that claimers spread over them), until `limit` are
        taken, or with `fill` False until one group gives some (the call executor's claim:
        the leases of calls claimed from the first groups would run while the last ones
        were asked, and it asks again at once when it got some). Meanwhile this thread's
        statements go to the group's node, the run tables named as its shards (`_here`):
        each one single-shard, run where its rows are. A group whose node fails is passed
        (and the shard map read again: a rebalance may have moved it)."""
        shards = self._shard_map()
        start = next(self._turn) % max(len(shards), 1)
        left = limit
        for shard in shards[start:] + shards[:start]:
            self._local.shard = shard
            try:
                left -= take(shard, left)
            except StoreError as exc:
                log.warning("shard group on %s:%s passed: %s", *shard.node, exc)
                self._map_read_at = float("-inf")
            finally:
                self._local.shard = None
            if left <= 0 or (left < limit and not fill):
                return

    def _here(self) -> Shard | None:
        """The shard group this thread's statements go to now (`_on_shards`), if any."""
        shard: Shard | None = getattr(self._local, "shard", None)
        return shard

    def _connection(self) -> Checkout:
        shard = self._here()
        if shard is None:
            return super()._connection()
        return Checkout(self._node_pool(shard.node), None, self.pooling.begin)

    _conn = _connection

    def _exec(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        shard = self._here()
        return super()._exec(conn, sql if shard is None else shard.local(sql), params)

    def _many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        shard = self._here()
        super()._many(conn, sql if shard is None else shard.local(sql), rows)

    def _shard_map(self) -> list[Shard]:
        """The shard groups of the run tables (read from the coordinator's metadata, again
        after `SHARD_MAP_TTL_S` or a failed claim)."""
        with self._map_lock:
            if time.monotonic() - self._map_read_at > SHARD_MAP_TTL_S:
                groups: dict[int, Shard] = {}
                for group, low, high, table, shard, host, port in self._rows(_SHARD_MAP):
                    found = groups.setdefault(group, Shard(low, high, {}, (host, int(port))))
                    found.tables[table] = shard
                self._map = list(groups.values())
                self._map_read_at = time.monotonic()
            return self._map

    def _node_pool(self, node: tuple[str, int]) -> psycopg_pool.ConnectionPool[Any]:
        """The connection pool of a worker node (the store's DSN, that node's host and port)."""
        with self._map_lock:
            pool = self._nodes.get(node)
            if pool is None:
                pool = RecentFirstPool(
                    make_conninfo(self._conninfo, host=node[0], port=node[1]),
                    kwargs=self._kwargs,
                    configure=self._configure_new,
                    min_size=1,
                    max_size=2,
                    open=True,
                )
                self._nodes[node] = pool
            return pool

    def close(self) -> None:
        """`PostgresStore.close`, and the worker nodes' pools."""
        super().close()
        with self._map_lock:
            for pool in self._nodes.values():
                pool.close()
            self._nodes.clear()

    # -- keys: one active top-level run per (workflow, key), cluster-wide ---------------------
    def _create_in(
        self, conn: Any, run: NewRun, effects: Sequence[NewEffect], now: int
    ) -> tuple[RunRecord, bool]:
        """The start (`SQLStore._create_in`) of a run whose key was free, or the active run
        that holds the key (`_take_key_in`)."""
        if run.key is not None and run.parent_run_id is None:
            holder = self._take_key_in(conn, run.id, run.workflow_name, run.key)
            if holder is not None:
                return holder, False
        return SQLStore._create_in(self, conn, run, effects, now)

    def _active_with_key_in(self, conn: Any, run_id: str, name: str, key: str) -> str | None:
        """`SQLStore._active_with_key_in` through `workflow_run_keys` (one shard, locked to the
        commit; no index across the shards refuses a second active run): the resumed run
        takes its key back unless another active run has it."""
        holder = self._take_key_in(conn, run_id, name, key)
        return None if holder is None else holder.id

    def _take_key_in(self, conn: Any, run_id: str, name: str, key: str) -> RunRecord | None:
        """Make run `run_id` its key's holder in `workflow_run_keys`, unless the key's
        holder is an active run: that run is returned. The key's row stays locked to the
        commit, so a second start of the key waits for the first and then finds its run."""
        keyed = (key, name)
        taken = self._exec(
            conn,
            "INSERT INTO workflow_run_keys (key, workflow_name, run_id) VALUES (?, ?, ?) "
            "ON CONFLICT (key, workflow_name) DO NOTHING RETURNING 1",
            (*keyed, self._id(run_id)),
        ).fetchall()
        if taken:
            return None
        held = self._exec(
            conn,
            "SELECT run_id FROM workflow_run_keys WHERE key = ? AND workflow_name = ? FOR UPDATE",
            keyed,
        ).fetchall()
        if held:
            active = self._exec(
                conn,
                f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE id = ? AND status = 'active'",
                (held[0][0],),
            ).fetchall()
            if active:
                return self._run(active[0])
        self._exec(
            conn,
            "UPDATE workflow_run_keys SET run_id = ? WHERE key = ? AND workflow_name = ?",
            (self._id(run_id), *keyed),
        )
        return None

    def _keyed_in(self, conn: Any, run: NewRun, *, ended_too: bool) -> RunRecord | None:
        """The key's holder (`workflow_run_keys`: one shard), read by its id (another)."""
        active = "" if ended_too else " AND status = 'active'"
        rows = self._exec(
            conn,
            f"SELECT {self.RUN_COLUMNS} FROM workflow_runs WHERE id = (SELECT run_id FROM "
            f"workflow_run_keys WHERE key = ? AND workflow_name = ?){active}",
            (run.key, run.workflow_name),
        ).fetchall()
        return self._run(rows[0]) if rows else None

    # -- run trees: on the shard of their root -------------------------------------------
    def new_child_id(self, parent_run_id: str) -> str:
        """A random run id that hashes into the shard of `parent_run_id` (and so of its
        root): a run tree lives on one shard, and a step that starts, stops or tells its
        child runs is a transaction on one node. Drawn again until it lands there (as many
        draws as there are shards, on average); a random id if the map has no such shard."""
        parent = run_hash(uuid.UUID(parent_run_id))
        shard = next((s for s in self._shard_map() if s.low <= parent <= s.high), None)
        while True:
            candidate = random_uuid()
            if shard is None or shard.low <= run_hash(candidate) <= shard.high:
                return str(candidate)

    def _tree_in(self, conn: Any, run_id: str) -> tuple[str, tuple[Any, ...]]:
        """The run tree as `SQLStore._tree_in` names it, found by walking the parent links
        up and the child index down a level at a time (Citus runs no recursive query over
        distributed tables), then read by id: its root and its active descendants."""
        level = [self._root_in(conn, run_id)]
        tree = list(level)
        while level:
            rows = self._exec(
                conn,
                "SELECT id::text FROM workflow_runs WHERE parent_run_id = ANY(CAST(? AS text[])) "
                "AND status = 'active'",
                (_array(level),),
            ).fetchall()
            level = [r[0] for r in rows if r[0] not in tree]
            tree += level
        return (
            "WITH tree (id, key, parent, invoke, workflow) AS (SELECT id, key, parent_run_id, "
            "parent_invoke_id, workflow_name FROM workflow_runs "
            "WHERE id = ANY(CAST(? AS uuid[]))) ",
            (_array(tree),),
        )

    def _lock_tree_in(self, conn: Any, run_id: str) -> None:
        """`PostgresStore._LOCK_TREE`'s advisory lock on the tree's root, taken on the
        coordinator (a statement on no table: advisory locks live where they are taken)."""
        root = self._root_in(conn, run_id)
        self._exec(conn, "SELECT pg_advisory_xact_lock(hashtextextended(?, 18))", (root,))

    def _root_in(self, conn: Any, run_id: str) -> str:
        """The root of run `run_id`'s tree, up the parent links (a cycle a bad row might make
        ends the walk)."""
        seen = [run_id]
        while True:
            rows = self._exec(
                conn, "SELECT parent_run_id FROM workflow_runs WHERE id = ?", (seen[-1],)
            ).fetchall()
            if not rows or rows[0][0] is None or self._id(rows[0][0]) in seen:
                return seen[-1]
            seen.append(self._id(rows[0][0]))

    # -- limits: their places read apart from the runs ------------------------------------
    def _live_hold_in(self, conn: Any, name: str | None, ts: Any) -> tuple[str, tuple[Any, ...]]:
        """`SQLCapacity._live_hold_in` (`_LIVE_HOLD`) without a join of places (by limit) and
        runs or calls (by run id), which Citus cannot run: the held places (of limit `name`:
        one shard), then their runs' leases, open calls and queued events (by run id), then
        the live ones named to the statement."""
        by_name = "" if name is None else " AND name = ?"
        held = self._exec(
            conn,
            f"SELECT name, holder, run_id::text, owner FROM workflow_capacity WHERE "
            f"state = 'held'{by_name}",
            () if name is None else (name,),
        ).fetchall()
        if not held:
            return "false", ()
        runs = _array(sorted({r[2] for r in held}))
        leases = dict(
            self._exec(
                conn,
                "SELECT id::text, lease_owner FROM workflow_runs WHERE "
                "id = ANY(CAST(? AS uuid[])) AND lease_expires_at > ?",
                (runs, ts),
            ).fetchall()
        )
        calls = self._exec(  # the held places' runs' calls open or still working
            conn,
            "SELECT run_id::text, idempotency_key, status <> 'pending' FROM workflow_calls "
            "WHERE run_id = ANY(CAST(? AS uuid[])) AND (status = 'pending' OR (status IN "
            "('running', 'stopped') AND lease_expires_at > ?))",
            (runs, ts),
        ).fetchall()
        queued = self._exec(  # the held places' active runs with an event queued (a result)
            conn,
            "SELECT DISTINCT i.run_id::text FROM workflow_inbox i JOIN workflow_runs r ON "
            "r.id = i.run_id WHERE i.run_id = ANY(CAST(? AS uuid[])) AND i.dead_at IS NULL AND "
            "r.status = 'active'",
            (runs,),
        ).fetchall()
        # runs with a call open or still working, or a result of one queued
        working = {run for run, _, _ in calls} | {run for (run,) in queued}
        running = {key for _, key, leased in calls if leased}  # calls working under a lease
        live = [
            (n, h)
            for n, h, run, owner in held
            if (owner is not None and leases.get(run) == owner)
            or h in running
            or (h.startswith("run:") and run in working)
        ]
        return (
            "(name, holder) IN (SELECT * FROM unnest(CAST(? AS text[]), CAST(? AS text[])))",
            ([n for n, _ in live], [h for _, h in live]),
        )

    def search_runs(self, query: RunQuery, limit: int = 50, offset: int = 0) -> list[RunRecord]:
        """`SQLStore.search_runs`; the newest run of a workflow with a key (`limit` 1: what a
        keyed start asks first) from `workflow_run_keys` (one shard), then by id (another),
        when that holds it; other searches read every shard."""
        if (
            query == RunQuery(workflow_name=query.workflow_name, key=query.key)
            and (query.workflow_name is not None and query.key is not None and limit == 1)
            and not offset
        ):
            with self._connection() as conn:
                holder = self._keyed_in(
                    conn,
                    NewRun("", query.workflow_name, "", query.key, "", {}),
                    ended_too=True,
                )
            if holder is not None:
                return [holder]
        return super().search_runs(query, limit, offset)

    # -- wake-ups, on the coordinator ---------------------------------------------------------
    def create_run(
        self,
        run: NewRun,
        effects: Sequence[NewEffect],
        now: int,
        *,
        children: Sequence[tuple[NewRun, Sequence[NewEffect]]] = (),
        key_once: bool = False,
    ) -> tuple[RunRecord, bool]:
        """`SQLStore.create_run`, then other processes' workers woken (`_tell_others`)."""
        record, created = super().create_run(
            run, effects, now, children=children, key_once=key_once
        )
        if created and run.lease_owner is None:
            self._tell_others(None)
        return record, created

    def send_event(
        self, run_id: str, event: Mapping[str, Any], now: int, *, traceparent: str | None = None
    ) -> int:
        """`SQLStore.send_event`, then other processes' workers woken (`_tell_others`)."""
        inbox_id = super().send_event(run_id, event, now, traceparent=traceparent)
        self._tell_others(self._id(run_id))
        return inbox_id

    def send_delivery(
        self,
        run_id: str,
        event: Mapping[str, Any],
        now: int,
        delivery_id: str,
        *,
        traceparent: str | None = None,
    ) -> tuple[int, bool]:
        """`SQLStore.send_delivery`, then other processes' workers woken (`_tell_others`)."""
        inbox_id, queued = super().send_delivery(
            run_id, event, now, delivery_id, traceparent=traceparent
        )
        if queued:
            self._tell_others(self._id(run_id))
        return inbox_id, queued

    def _tell_others(self, run_id: str | None) -> None:
        """A NOTIFY on the coordinator's wake-up channel (naming `run_id`, a run with a queued
        event; None: work is due), after the commit: a lost one only leaves the work to the
        workers' polls."""
        with self._connection() as conn:
            self._notify_in(conn, run_id)

    def _tell_waiters_in(self, conn: Any, run_id: str) -> None:
        """The run's waiters read by a routed statement, told by a NOTIFY on the coordinator."""
        told = conn.execute(
            "SELECT id::text FROM workflow_runs WHERE id = %s AND waiters > 0 "
            "AND waited_until > now()",
            (self._id(run_id),),
        ).fetchall()
        if told:
            conn.execute(f"SELECT pg_notify({CHANNEL}, %s)", (f"{PROGRESS}:{told[0][0]}",))


def _array(values: Sequence[str]) -> str:
    """Run ids as the text of an SQL array (canonical uuids: nothing in them needs quoting)."""
    return "{" + ",".join(values) + "}"


_M = 0xFFFFFFFF


def run_hash(run_id: uuid.UUID) -> int:
    """The hash Citus places a run by: PostgreSQL's `uuid_hash` (`hash_bytes`, Bob Jenkins'
    lookup3, of the 16 bytes) as a signed 32-bit integer; `tests/persistence/test_citus.py`
    compares it with the server's `worker_hash`."""
    w = struct.unpack("<4I", run_id.bytes)
    a = b = c = (0x9E3779B9 + 16 + 3923095) & _M
    a, b, c = _mix((a + w[0]) & _M, (b + w[1]) & _M, (c + w[2]) & _M)
    c = _final((a + w[3]) & _M, b, c)
    return c - (1 << 32) if c >= 1 << 31 else c


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    """lookup3's `mix` (PostgreSQL's hashfn.c)."""
    for shift_a, shift_b, shift_c in ((4, 6, 8), (16, 19, 4)):
        a = ((a - c) & _M) ^ _rot(c, shift_a)
        c = (c + b) & _M
        b = ((b - a) & _M) ^ _rot(a, shift_b)
        a = (a + c) & _M
        c = ((c - b) & _M) ^ _rot(b, shift_c)
        b = (b + a) & _M
    return a, b, c


def _final(a: int, b: int, c: int) -> int:
    """lookup3's `final`; its `c`."""
    c = ((c ^ b) - _rot(b, 14)) & _M
    a = ((a ^ c) - _rot(c, 11)) & _M
    b = ((b ^ a) - _rot(a, 25)) & _M
    c = ((c ^ b) - _rot(b, 16)) & _M
    a = ((a ^ c) - _rot(c, 4)) & _M
    b = ((b ^ a) - _rot(a, 14)) & _M
    return ((c ^ b) - _rot(b, 24)) & _M
