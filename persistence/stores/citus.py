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
import re
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from persistence.stores.errors import StoreError
from persistence.stores.postgres import (
    _CHANNEL,
    _LEASED_WORK,
    _PROGRESS,
    PostgresStore,
    _Checkout,
    _lease_sql,
    lease_params,
)
from persistence.stores.records import NewEffect, NewRun, PendingWork, RunRecord
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
SELECT r.shardid, e.shardid, i.shardid, n.nodename, n.nodeport
  FROM pg_dist_shard r
  JOIN pg_dist_shard e ON e.logicalrelid = 'workflow_effects'::regclass
   AND e.shardminvalue = r.shardminvalue
  JOIN pg_dist_shard i ON i.logicalrelid = 'workflow_inbox'::regclass
   AND i.shardminvalue = r.shardminvalue
  JOIN pg_dist_placement p ON p.shardid = r.shardid
  JOIN pg_dist_node n ON n.groupid = p.groupid
 WHERE r.logicalrelid = 'workflow_runs'::regclass
 ORDER BY r.shardid
"""
"""Each run shard with its co-located outbox and inbox shards and the node that holds them."""

_TABLES = re.compile(r"\bworkflow_(runs|effects|inbox)\b")


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard group of the run tables: its shard ids and the node holding it."""

    runs: int
    effects: int
    inbox: int
    node: tuple[str, int]

    def local(self, sql: str) -> str:
        """`sql` with the run tables named as this group's shard tables (on its node)."""
        ids = {"runs": self.runs, "effects": self.effects, "inbox": self.inbox}
        return _TABLES.sub(lambda m: f"workflow_{m.group(1)}_{ids[m.group(1)]}", sql)


class CitusStore(PostgresStore):
    """`PostgresStore` on a Citus coordinator (a `citus://` store URL; docs/citus.md).

    `shards`: shards per distributed table, used when `migrate` distributes the tables (a
    few per worker node's core; Citus's default is 32).
    """

    _NOTIFY = ""  # (a routed statement would notify on a worker node: `_tell_others`)
    _START_CONFLICT = ""  # (keys are taken in workflow_run_keys first: `_take_key_in`)
    _CREATE_IS_ONE_STATEMENT = False

    # Per-run statements (each routed to its run's shard) for what PostgreSQL batches.
    commit_steps = SQLStore.commit_steps
    _commit_all_in = SQLStore._commit_all_in
    _commit_later_in = SQLStore._commit_later_in
    send_and_step = SQLStore.send_and_step
    finish_calls = SQLStore.finish_calls
    read_work = SQLStore.read_work
    unknown_versions = SQLStore.unknown_versions

    def __init__(self, dsn: str, *, shards: int = 32, **options: Any) -> None:
        if not 1 <= shards <= 4096:
            raise ValueError(f"shards must be between 1 and 4096: {shards!r}")
        super().__init__(dsn, **options)
        self.shards = shards
        self._nodes: dict[tuple[str, int], psycopg_pool.ConnectionPool[Any]] = {}
        self._map: list[Shard] = []
        self._map_read_at = float("-inf")
        self._map_lock = threading.Lock()
        self._turn = itertools.count()

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

    # -- claims, shard by shard on the worker nodes ------------------------------------------
    def _lease(
        self,
        owner: str,
        now: int,
        expires: int,
        limit: int,
        pairs: list[tuple[str, str]] | None,
        with_work: bool,
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """`PostgresStore._lease`, one shard group at a time, each on the node that holds it,
        starting at the next group in turn (so claimers spread over the groups), until
        `limit` runs are leased or every group was asked."""
        shards = self._shard_map()
        if not shards:
            return [], {}
        start = next(self._turn) % len(shards)
        runs: list[RunRecord] = []
        work: dict[str, PendingWork] = {}
        for shard in shards[start:] + shards[:start]:
            params = lease_params(owner, now, expires, limit - len(runs), pairs)
            try:
                got, got_work = self._lease_on(shard, params, pairs is not None, with_work)
            except StoreError:
                self._map_read_at = float("-inf")  # (moved, or its node is down: read again)
                continue
            runs += got
            work.update(got_work)
            if len(runs) >= limit:
                break
        return runs, work

    def _lease_on(
        self, shard: Shard, params: dict[str, Any], filtered: bool, with_work: bool
    ) -> tuple[list[RunRecord], dict[str, PendingWork]]:
        """The claim statement (and the claimed runs' work) on `shard`'s own tables, in one
        transaction on its node."""
        with _Checkout(self._node_pool(shard.node), None, self.pooling.begin) as conn:
            with conn.pipeline(), conn.transaction():
                conn.execute("SET LOCAL synchronous_commit = off")
                cursor = conn.execute(shard.local(_lease_sql(filtered, self._CLAIM_ORDER)), params)
                found = conn.execute(shard.local(_LEASED_WORK), params) if with_work else None
            rows = cursor.fetchall()
            work_rows = found.fetchall() if found is not None else None
        return self._leased(rows, work_rows)

    def _shard_map(self) -> list[Shard]:
        """The shard groups of the run tables (read from the coordinator's metadata, again
        after `SHARD_MAP_TTL_S` or a failed claim)."""
        with self._map_lock:
            if time.monotonic() - self._map_read_at > SHARD_MAP_TTL_S:
                rows = self._rows(_SHARD_MAP)
                self._map = [Shard(r, e, i, (host, int(port))) for r, e, i, host, port in rows]
                self._map_read_at = time.monotonic()
            return self._map

    def _node_pool(self, node: tuple[str, int]) -> psycopg_pool.ConnectionPool[Any]:
        """The connection pool of a worker node (the store's DSN, that node's host and port)."""
        with self._map_lock:
            pool = self._nodes.get(node)
            if pool is None:
                params = conninfo_to_dict(self._conninfo)
                params.update(host=node[0], port=str(node[1]))
                pool = psycopg_pool.ConnectionPool(
                    make_conninfo(**params),
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
            holder = self._take_key_in(conn, run)
            if holder is not None:
                return holder, False
        return SQLStore._create_in(self, conn, run, effects, now)

    def _take_key_in(self, conn: Any, run: NewRun) -> RunRecord | None:
        """Make `run` its key's holder in `workflow_run_keys`, unless the key's holder is an
        active run: that run is returned. The key's row stays locked to the commit, so a
        second start of the key waits for the first and then finds its run."""
        key = (run.key, run.workflow_name)
        taken = self._exec(
            conn,
            "INSERT INTO workflow_run_keys (key, workflow_name, run_id) VALUES (?, ?, ?) "
            "ON CONFLICT (key, workflow_name) DO NOTHING RETURNING 1",
            (*key, self._id(run.id)),
        ).fetchall()
        if taken:
            return None
        held = self._exec(
            conn,
            "SELECT run_id FROM workflow_run_keys WHERE key = ? AND workflow_name = ? FOR UPDATE",
            key,
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
            (self._id(run.id), *key),
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
            conn.execute(f"SELECT pg_notify({_CHANNEL}, %s)", (f"{_PROGRESS}:{told[0][0]}",))

