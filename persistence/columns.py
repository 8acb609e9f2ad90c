"""The row columns a run's snapshot decides, computed in one place.

A run's row repeats a few facts of its snapshot so the database can answer without parsing it:
the active leaves (`state`), the run `status`, the retried call's `attempt_count` and
`last_error`, and `wake_at` (when a worker is next needed). The runtime (a run's first row),
the driver (every step) and a resume all take them from `run_columns`, so they cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from persistence.stores.records import ACTIVE
from statecharts import Snapshot
from statecharts.frozen import storable_text, thaw
from statecharts.retrying import attempt_in_progress, waits_to_retry


class RunColumns(msgspec.Struct, frozen=True):
    """The columns of a run's row that follow from its snapshot."""

    state: str
    status: str
    attempt_count: int | None
    """The retried call's attempt; None when no retried call is active (the row keeps its
    last value)."""
    last_error: str | None
    """Why the run failed, else the retried call's last error; None keeps the row's value."""
    wake_at: int | None


def run_columns(
    snapshot: Snapshot,
    *,
    pending_effects: bool,
    now: int,
    status: str | None = None,
    failure: str | None = None,
) -> RunColumns:
    """The row columns for `snapshot`; `status`/`failure` when the runtime ended the run itself
    (a failure outside the engine) rather than the snapshot saying so."""
    status = status or run_status(snapshot)
    attempts, retry_error = retry_columns(snapshot)
    if failure is None and snapshot.status == "error":
        failure = error_text(snapshot.error)
    failure = None if failure is None else storable_text(failure)
    # an ended run sleeps for ever once its effects are done
    wake_at = now if pending_effects else (snapshot.next_due() if status == ACTIVE else None)
    return RunColumns(state_text(snapshot), status, attempts, failure or retry_error, wake_at)


def state_text(snapshot: Snapshot) -> str:
    """The `state` column: active leaf paths, comma separated."""
    return ",".join(snapshot.active_leaves())


def run_status(snapshot: Snapshot) -> str:
    """The run status for a snapshot: the engine's `stopped` is a cancelled run, and a run done
    with skipped calls (failure class "skip") is `done_partial`."""
    if snapshot.status == "stopped":
        return "cancelled"
    if snapshot.status == "done" and snapshot.skipped:
        return "done_partial"
    return snapshot.status


def retry_columns(snapshot: Snapshot) -> tuple[int | None, str | None]:
    """(attempt_count, last_error) of the retried call in progress, from the snapshot's retry
    records; (None, None) when no retried call is active (the row keeps its last values)."""
    found = attempt_in_progress(snapshot.retry_records)
    if found is None:
        return None, None
    return found[0], error_text(found[1])


def error_text(error: Any) -> str | None:
    """An engine error (the JSON of an exception, or any value) as one line of text."""
    if error is None:
        return None
    if isinstance(error, Mapping) and "message" in error:
        return f"{error.get('name', 'Error')}: {error['message']}"
    return str(thaw(error))


def error_is_current(status: str, state: str) -> bool:
    """Whether a run's `last_error` describes it now: it failed, or it is waiting to retry the
    call that failed. A run that finished, or went on after the error, keeps the column (the
    history), but it is no longer what is wrong with the run: the UI and `runs list` show it
    as an earlier error, not in red."""
    return status == "error" or (status == ACTIVE and bool(waits_to_retry(state.split(","))))
