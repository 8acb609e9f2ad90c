"""What a driver does when a run cannot go on, and what it tells the operator about its runs:
a run failed outside a step (an exception, a value the store refuses, a row that does not
parse, transient failures used up), released with a backoff after a transient failure, the
error workflow a failure starts, and the operator events of committed steps (a failure, a
scheduled retry, dead letters, a lost lease, a takeover), each a log line, a metric and a span
event (`Telemetry.report`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from persistence.columns import state_text
from persistence.host import Host
from persistence.outbox import Executed
from persistence.planning import Leased, Step
from persistence.stores import (
    ACTIVE,
    EffectOutcome,
    NewEffect,
    NewRun,
    RunRecord,
    StepCommit,
)
from persistence.stores.rules import TRANSIENT_PREFIX, ended_reason
from persistence.telemetry import RunEvent, events
from statecharts.frozen import storable_text
from statecharts.retrying import waits_to_retry


def _waits_to_retry(state: str) -> set[str]:
    """The retried call sites waiting for their next attempt among the active leaves."""
    return waits_to_retry(state.split(","))


class Failures:
    """Fails, releases and reports the runs a driver of `owner` holds (see the module)."""

    def __init__(self, host: Host, owner: str) -> None:
        self.host = host
        self.owner = owner
        self.telemetry = host.telemetry

    def lease_lost(self, x: Leased) -> None:
        """Report that `x`'s lease was lost: another worker has the run."""
        self.report(
            events.LEASE_LOST,
            x.run,
            state_text(x.snapshot),
            f"run {x.run.id} ({x.run.workflow_name}): lost the lease (not at version "
            f"{x.version} under {self.owner}); another worker has it",
            owner=self.owner,
        )

    def report(
        self,
        kind: str,
        run: RunRecord,
        state: str,
        message: str,
        level: int = logging.WARNING,
        **fields: Any,
    ) -> None:
        """Report an operator event about `run` (its log line, metric and span event)."""
        self.telemetry.report(
            RunEvent(
                kind,
                run.id,
                run.workflow_name,
                run.key,
                state,
                message,
                level,
                run.traceparent,
                fields,
            )
        )

    def failed(self, run: RunRecord, state: str, reason: str, poisoned: str | None) -> None:
        """The one WARNING line per failed run (after the refused value's, if that was why)."""
        if poisoned is not None:
            self.report(
                events.POISONED_VALUE,
                run,
                state,
                f"run {run.id} ({run.workflow_name}, "
                f"key {run.key}, state {state}): value refused: {poisoned}",
                reason=poisoned,
            )
        self.report(
            events.RUN_FAILED,
            run,
            state,
            f"run {run.id} failed (workflow "
            f"{run.workflow_name}, key {run.key}, state {state}): {reason}",
            reason=reason,
        )

    def fail(
        self,
        x: Leased,
        reason: str,
        executed: list[Executed] | None,
        outcomes: Sequence[EffectOutcome] = (),
        poisoned: str | None = None,
        attempt_count: int | None = None,
        error_traceback: str | None = None,
    ) -> None:
        """End `x` as `error` with `reason` without writing a new snapshot: the effects it
        executed are recorded `failed` (never run again by a worker; a `resume` runs them
        again, as the step they fed was lost; results dropped, they may be what the store
        refused), its queued events become dead letters, its error workflow starts."""
        reason = storable_text(reason)
        done = list(outcomes) or [e.outcome for e in executed or ()]
        recorded = [
            EffectOutcome(o.idempotency_key, "failed", None, storable_text(o.error or reason))
            for o in done
        ]
        now = self.host.clock.now()
        state = state_text(x.snapshot)
        starts = self.error_runs(x.run, x.status, "error", state, reason, now)
        cancelled: list[str] = []
        if self.host.store.fail_run(
            x.run.id,
            self.owner,
            reason,
            now,
            outcomes=recorded,
            start_runs=starts,
            attempt_count=attempt_count,
            cancelled=cancelled,
            error_traceback=error_traceback,
        ):
            self.failed(x.run, state, reason, poisoned)
            self.telemetry.runs_cancelled(cancelled)

    def back_off(self, x: Leased, transient: Executed) -> None:
        """A transient failure: nothing of the step is committed; the run is released, due
        again after the backoff, with the attempt and error on its row (or failed once the
        attempts are used up)."""
        policy, now = self.host.transient, self.host.clock.now()
        attempt = policy.attempt_after(x.run) if x.steps == 0 else 1
        error = storable_text(transient.transient or "error")
        if attempt >= policy.max_attempts:
            self.fail(
                x,
                f"{TRANSIENT_PREFIX} persisted after {attempt} attempts: {error}",
                [],
                attempt_count=attempt,
            )
            return
        wait = policy.wait_ms(attempt)
        text = f"{TRANSIENT_PREFIX} (attempt {attempt}): {error}"
        if self.host.store.release(
            x.run.id, self.owner, now + wait, attempt_count=attempt, last_error=text
        ):
            state = state_text(x.snapshot)
            self.report(
                events.RETRY_SCHEDULED,
                x.run,
                state,
                f"run {x.run.id} ({x.run.workflow_name}, key {x.run.key}, state "
                f"{state}): {text}; step rolled back, retry in {wait} ms",
                logging.INFO,
                attempt=attempt,
                error=error,
                transient=True,
                wait_ms=wait,
            )

    def report_dead_letters(self, x: Leased, commit: StepCommit) -> None:
        """The events this driver read but did not apply because the run ended: the store made
        them dead letters with the step."""
        for item in x.inbox:
            if item.id not in commit.consumed_inbox:
                event_type, reason = item.event.get("type"), ended_reason(commit.status)
                self.report(
                    events.DEAD_LETTER,
                    x.run,
                    commit.state,
                    f"run {x.run.id} ({x.run.workflow_name}, key {x.run.key}, state "
                    f"{commit.state}): event {event_type!r} dead-lettered: {reason}",
                    event_type=event_type,
                    reason=reason,
                )

    def report_step(self, x: Leased, step: Step, commit: StepCommit) -> None:
        """Operator log lines for what this committed step did: a failure, a retry."""
        if commit.status == "error" and x.status == ACTIVE:
            self.failed(x.run, commit.state, commit.last_error or "failed", step.poisoned)
        elif commit.status == ACTIVE and _waits_to_retry(commit.state) - _waits_to_retry(
            state_text(x.snapshot)
        ):
            # (a retried call's attempt failed: it waits for the next one)
            self.report(
                events.RETRY_SCHEDULED,
                x.run,
                commit.state,
                f"run {x.run.id} ({x.run.workflow_name}, key {x.run.key}, state "
                f"{commit.state}): attempt {commit.attempt_count} failed "
                f"({commit.last_error}); retry scheduled",
                logging.INFO,
                attempt=commit.attempt_count,
                error=commit.last_error,
                transient=False,
            )

    def error_runs(
        self, run: RunRecord, before: str, status: str, state: str, error: str | None, now: int
    ) -> list[tuple[NewRun, list[NewEffect]]]:
        """The error workflow to start with the step that makes an active run fail."""
        if status != "error" or before != "active":
            return []
        return self.host.error_run(run, state, error, now)

    def fail_unreadable(self, run: RunRecord, problem: str, now: int) -> int:
        """Mark a run whose row does not parse or whose snapshot does not restore (`problem`)
        as `error`, keeping the row as it is (never rewritten: it is the evidence)."""
        reason = storable_text(problem)
        starts = self.error_runs(run, run.status, "error", run.state, reason, now)
        cancelled: list[str] = []
        if not self.host.store.fail_run(
            run.id, self.owner, reason, now, start_runs=starts, cancelled=cancelled
        ):
            return 0
        self.failed(run, run.state, reason, None)
        self.telemetry.runs_cancelled(cancelled)
        return 1
