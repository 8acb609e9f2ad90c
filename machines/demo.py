"""The main job: the CRM follow-up machine and the invoice workflow, three weeks in seconds.

    python -m machines.demo [--store URL | --in-memory] [--workdir DIR] [--days N]

Deals are registered by webhooks (some "lost" on the way; on the durable runtime the fake CRM
posts them, signed, to the webhook ingress on loopback, and retries one), Evaluate runs hourly
across simulated business days with injected CRM, task tool, summarizer and mail failures, a
run is killed in the middle and resumed, a CRM admin renames a stage (the filter that then
matches nothing fails loudly), a deploy sets the filter to a stage that exists but is the wrong
one (the scope health rule catches it: no deal in scope while the CRM has open ones), and three
invoices go out with retries. A timeline is printed as it goes; the diagrams are written; a
summary table ends it, with the duplicates counted from the fake task tool and invoice API
themselves.

Runs are durable, on the embedded SQLite store in ``--workdir`` unless ``--store`` names another
(``postgresql://...``); ``--in-memory`` runs them on in-memory actors instead. The follow-up
database and the fake outside world are SQLite files in ``--workdir`` (``--followup-db`` moves
the database).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from machines.durable import DurableRunner, wall_ms
from machines.fakes import FOREVER, FakeWorld
from machines.followup import build_machines
from machines.followup import repository as repo
from machines.followup.adapters import FakeCrm, FakeTaskTool
from machines.followup.db import Database
from machines.followup.digest import long_date
from machines.followup.routing import DEFAULT_STAGES
from machines.followup.schedules import schedules, slot_input
from machines.followup.services import Services
from machines.invoice import build as build_invoice
from machines.invoice import fake_services as invoice_fakes
from machines.invoice.adapters import FakeInvoiceApi, FakeLedger
from machines.local import LocalRunner
from machines.mail import FakeMailer
from machines.runs import Outcome
from machines.webhooks import LoopbackIngress
from persistence.runtime import Runtime
from persistence.scheduling import ScheduledStart
from statecharts import SimulatedClock

START = date(2026, 3, 2)  # a Monday
HOLIDAY = (date(2026, 3, 12), "Company offsite")
STAGES = ["Lead", "Qualified", "Proposal", "Negotiation", "Won", "Lost"]
DEALS = [  # id, name, stage it enters on day 1, webhook delivered?
    ("D-101", "Acme Corp", "Proposal", True),
    ("D-102", "Globex", "Negotiation", False),
    ("D-103", "Initech", "Proposal", True),
    ("D-104", "Umbrella", "Proposal", False),
    ("D-105", "Hooli", "Negotiation", True),
    ("D-106", "Stark Industries", "Lead", True),
]
WRONG_STAGES = ("Qualified",)  # exists in the CRM, holds no deal: every run would be idle
OWN_FILES = ("followup.db", "world.db", "runs.db")
LEASE_MS = 1000
REGISTER_PATH = "/api/workflows/followup_register/runs"
DIAGRAMS = Path(__file__).resolve().parent.parent / "diagrams"


class WorkerKilled(BaseException):
    """Raised inside a call to stop the in-memory worker dead (like SIGKILL: nothing below
    the call gets to clean up)."""


def at(day: date, hour: int, minute: int = 0) -> int:
    """Epoch ms of ``day`` ``hour``:``minute`` UTC."""
    return int(datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC).timestamp() * 1000)


@dataclass
class Tally:
    """What the summary table counts."""

    runs: Counter[tuple[str, str]] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)

    def add(self, outcome: Outcome) -> None:
        """Count a run (and its error workflow's run)."""
        self.runs[(outcome.name, outcome.status)] += 1
        self.retries[outcome.name] += outcome.retries
        self.skipped[outcome.name] += len(outcome.skipped)
        if outcome.alert is not None:
            self.add(outcome.alert)


class Demo:
    """The scenario, on the in-memory runner or the durable runtime."""

    def __init__(
        self,
        workdir: Path,
        days: int,
        out: Callable[[str], None],
        store: str | None = None,
        followup_db: str | None = None,
    ) -> None:
        self.workdir = workdir
        self.days = days
        self.out = out
        workdir.mkdir(parents=True, exist_ok=True)
        for name in OWN_FILES:
            for suffix in ("", "-wal", "-shm"):
                (workdir / f"{name}{suffix}").unlink(missing_ok=True)
        self.db = Database(followup_db or f"sqlite:///{workdir / 'followup.db'}")
        self.world = FakeWorld(str(workdir / "world.db"))
        self.services = Services.fakes(self.db, self.world)
        self.crm = FakeCrm(self.world)
        self.tasks = FakeTaskTool(self.world)
        self.mailer = FakeMailer(self.world)
        self.now = at(START, 7)  # business time: what the workflows are told it is
        followup = build_machines(self.services)
        invoice = build_invoice(invoice_fakes(self.world))
        self.store = store
        self.runner: LocalRunner | DurableRunner
        if store is None:
            self.runner = LocalRunner({**followup, invoice.id: invoice}, SimulatedClock(self.now))
        else:
            self.runner = DurableRunner(store, [*followup.values(), invoice], lease_ms=LEASE_MS)
        self.ingress: LoopbackIngress | None = None
        self.deliveries: dict[str, bytes] = {}  # deal id -> the body of its first webhook
        self.tally = Tally()
        self.via = ""  # how the last webhook arrived, for the timeline
        self.skipped_slot: str | None = None  # the schedule skipped the next hour's slot: why

    def close(self) -> None:
        """Stop the webhook ingress, if it was started; close the durable store (its wake-up
        listener's thread and pool) and the follow-up database."""
        if self.ingress is not None:
            self.ingress.close()
        if isinstance(self.runner, DurableRunner):
            self.runner.close()
        self.db.close()

    # -- running -----------------------------------------------------------------------------

    def run(self, name: str, input: dict[str, Any], key: str) -> Outcome:
        """Run a workflow to its end and count it."""
        outcome = self.runner.run(name, input, key)
        self.tally.add(outcome)
        return outcome

    def at_time(self, day: date, hour: int, minute: int = 0) -> str:
        """Move business time forward to ``day`` ``hour``:``minute``; the time as text."""
        self.now = max(self.now, at(day, hour, minute))
        if isinstance(self.runner, LocalRunner):  # in memory, the actors' clock is business time
            self.runner.clock.set(max(self.runner.clock.now(), self.now))
        return f"{hour:02d}:{minute:02d}"

    def line(self, time: str, workflow: str, text: str, status: str = "") -> None:
        """One timeline line."""
        self.out(f"  {time}  {workflow:<9} {text:<62} {status}".rstrip())

    # -- the scenario ------------------------------------------------------------------------

    def setup(self) -> None:
        """Migrate the database, set up the fakes, print the header."""
        self.db.migrate()
        with self.db.transaction() as tx:
            for table in ("watch_steps", "watches", "run_log", "holidays"):  # a fresh start
                tx.execute(f"delete from {table}")
            repo.add_holiday(tx, *HOLIDAY)
        self.crm.set_stages(STAGES)
        self.invoice_ledger = FakeLedger(self.world)
        for customer in (
            ("C-1", "Ada Lovelace", "ada@example.com"),
            ("C-2", "Grace Hopper", "grace@example.com"),
        ):
            self.invoice_ledger.put_customer(*customer)
        self.out("statecharts demo: the CRM follow-up machine and the invoice workflow")
        where = (
            "in-memory actors on simulated time (no --store)"
            if self.store is None
            else f"durable, in {self.store} (in-process worker; one worker subprocess is killed)"
        )
        self.out(f"  runs:               {where}")
        self.out(f"  follow-up database: {self.db.url}")
        self.out(
            f"  fake outside world: {self.world.path} (CRM, task tool, mail, "
            "summarizer, invoice API)"
        )
        if isinstance(self.runner, DurableRunner):
            self.ingress = LoopbackIngress(
                self.runner.runtime, "crm-webhook-secret", ("followup_register",)
            )
            self.out(
                f"  webhook ingress:    {self.ingress.url}/api (persistence.ingress; the "
                "CRM signs each body, X-CRM-Signature)"
            )
        self.out(
            f"  calendar:           {self.days} business days from {long_date(START)}; "
            f"holiday {HOLIDAY[0]:%a %d %b} ({HOLIDAY[1]}); cadence 5, 12, 21 "
            "business days"
        )
        self.out("")

    def webhooks(self, day: date) -> None:
        """Day 1: the deals enter their stages; some webhooks are lost."""
        for n, (deal_id, name, stage, delivered) in enumerate(DEALS):
            time = self.at_time(day, 8, 5 + n)
            self.crm.put_deal(deal_id, name, stage)
            if not delivered:
                self.line(
                    time,
                    "webhook",
                    f"{name} -> {stage}: webhook LOST on the way",
                    "(never arrives)",
                )
                continue
            outcome = self.register(day, deal_id, name, stage)
            what = {
                "registered": "watch opened",
                "closed": "watch closed",
                "ignored": "nothing to do",
            }
            result = str(outcome.snapshot.value)
            text = what.get(result, result)
            if result == "closed" and not outcome.context["closed"]:
                text = "out of scope, not watched: nothing to do"
            self.line(time, "webhook", f"{name} -> {stage}: {text}{self.via}", outcome.status)
        time = self.at_time(day, 8, 20)
        if self.ingress is None:
            again = self.register(day, "D-103", "Initech", "Proposal")
            self.line(
                time,
                "webhook",
                "Initech -> Proposal again (CRM retried the webhook): "
                f"same watch {again.context['watch_id']}, cadence kept",
                again.status,
            )
            return
        again = self.redeliver("D-103")
        self.line(
            time,
            "webhook",
            "Initech -> Proposal again (CRM retried the webhook): "
            f"same run, watch {again.context['watch_id']}{self.via}",
            again.status,
        )
        forged = orjson.dumps({"key": "webhook:D-999:forged", "input": {"deal_id": "D-999"}})
        code, _ = self.ingress.post(REGISTER_PATH, forged, signed=False)
        self.line(
            time,
            "webhook",
            f"a webhook without the CRM's signature: refused, nothing started (HTTP {code})",
            "refused" if code == 401 else f"HTTP {code}!",
        )

    def register(self, day: date, deal_id: str, name: str, stage: str) -> Outcome:
        """A delivered webhook: a Register run (posted over HTTP on the durable runtime)."""
        input = {
            "deal_id": deal_id,
            "deal_name": name,
            "stage": stage,
            "today": day.isoformat(),
            "now": self.now,
        }
        key = f"webhook:{deal_id}:{self.now}"
        if self.ingress is None:
            self.via = ""
            return self.run("followup_register", input, key=key)
        body = orjson.dumps({"key": key, "input": input})
        self.deliveries.setdefault(deal_id, body)
        return self.deliver(body)

    def redeliver(self, deal_id: str) -> Outcome:
        """The CRM sends the first webhook of `deal_id` again, byte for byte."""
        return self.deliver(self.deliveries[deal_id])

    def deliver(self, body: bytes) -> Outcome:
        """POST a webhook to the ingress, then drive the run it names to its end. Only a run
        the request created is counted (a redelivery answers 200 with the existing run)."""
        assert self.ingress is not None
        code, answer = self.ingress.post(REGISTER_PATH, body)
        if code not in (200, 201):
            raise RuntimeError(f"the ingress refused a CRM webhook: HTTP {code} {answer}")
        self.via = f" (HTTP {code})"
        sent = orjson.loads(body)
        assert isinstance(self.runner, DurableRunner)
        self.runner.run_ids[sent["key"]] = answer["id"]
        outcome = self.runner.finish("followup_register", sent["key"], answer["id"], sent["input"])
        if code == 201:
            self.tally.add(outcome)
        return outcome

    def enrich(self, day: date, hour: int) -> Outcome:
        """An Enrich run at ``hour``:30."""
        self.at_time(day, hour, 30)
        return self.run("followup_enrich", {"now": self.now}, key=f"enrich:{day}T{hour:02d}:30")

    def evaluate(self, day: date, hour: int, crash_after: int | None = None) -> Outcome:
        """An Evaluate run at ``hour``:00; with ``crash_after``, its worker is killed after
        that many tasks and the run resumed."""
        time = self.at_time(day, hour)
        key = f"evaluate:{day}T{hour:02d}:00"
        input = {"run_key": key, "today": day.isoformat(), "now": self.now}
        if crash_after is None:
            return self.run("followup_evaluate", input, key)
        if isinstance(self.runner, LocalRunner):
            outcome = self.kill_in_memory(self.runner, time, key, input, crash_after)
        else:
            outcome = self.kill_worker_process(self.runner, time, key, input, crash_after)
        self.tally.add(outcome)
        return outcome

    def kill_in_memory(
        self, runner: LocalRunner, time: str, key: str, input: dict[str, Any], after: int
    ) -> Outcome:
        """Stop the in-memory worker dead inside the task tool call, resume from the last
        persisted snapshot."""
        real = self.services.tasks
        self.services.tasks = _Killing(self.world, after)
        try:
            runner.run("followup_evaluate", input, key)
        except WorkerKilled:
            state = _state_text(runner.persisted[key]["value"])
            self.line(
                time,
                "evaluate",
                f"worker KILLED after creating task "
                f"{self.tasks.tasks()[-1]['id']}, before recording it; last persisted "
                f"state: {state}",
                "killed",
            )
        finally:
            self.services.tasks = real
        self.line(
            time,
            "evaluate",
            f"a new worker resumes {key} from that snapshot; calls in "
            "flight are made again (the task tool finds the task by its key)",
            "resumed",
        )
        return runner.resume("followup_evaluate", key, input)

    def kill_worker_process(
        self, runner: DurableRunner, time: str, key: str, input: dict[str, Any], after: int
    ) -> Outcome:
        """The Evaluate schedule fires the slot; a worker subprocess takes the run; SIGKILL it
        right after its ``after``-th task; the schedule's next slot comes while the run is still
        running and is skipped (its overlap policy: one Evaluate at a time); the in-process
        worker takes the run over once the lease expires."""
        schedule = self.evaluate_schedule(runner)
        run_id = schedule.tick()
        if run_id is None:
            raise RuntimeError("the Evaluate schedule did not fire its slot")
        runner.run_ids[key] = run_id
        input = slot_input(schedule.name, {}, schedule.tz)(self.now)  # the run was given it
        self.world.hold("tasks", after=after)
        env = {
            **os.environ,
            "FOLLOWUP_DATABASE": self.db.url,
            "FOLLOWUP_FAKES": self.world.path,
            "INVOICE_FAKES": self.world.path,
            "FOLLOWUP_STAGES": ",".join(self.services.settings.in_scope_stages),
        }
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "machines.durable",
                "--store",
                runner.url,
                "--lease-ms",
                str(LEASE_MS),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = wall_ms() + 60_000
            while not self.world.holding("tasks"):
                if worker.poll() is not None or wall_ms() > deadline:
                    error = worker.stderr.read().decode() if worker.stderr else ""
                    raise RuntimeError(
                        f"the worker subprocess never reached the kill point:\n{error}"
                    )
                threading.Event().wait(0.02)
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait()
        finally:
            self.world.release("tasks")
            if worker.poll() is None:
                worker.kill()
                worker.wait()
            if worker.stderr:
                worker.stderr.close()
        state = runner.runtime.get(run_id).state
        self.line(
            time,
            "evaluate",
            f"worker process {worker.pid} KILLED (SIGKILL) after creating "
            f"task {self.tasks.tasks()[-1]['id']}, before recording it; the run's row "
            f"says: {state}",
            "killed",
        )
        self.skipped_slot = self.next_slot_skipped(schedule, run_id)
        self.line(
            time,
            "evaluate",
            f"after its {LEASE_MS} ms lease expires another worker "
            "takes the run over; the call in flight is made again with the same "
            "idempotency key (the task tool finds the task)",
            "resumed",
        )
        return runner.finish("followup_evaluate", key, run_id, input)

    def evaluate_schedule(self, runner: DurableRunner) -> ScheduledStart:
        """Evaluate's schedule (machines.followup.schedules: overlap ``skip``) on business
        time, on the runner's store."""
        clock = SimulatedClock(self.now)
        runtime = Runtime(runner.store, list(runner.runtime.machines.values()), clock=clock)
        return next(s for s in schedules(runtime) if s.workflow == "followup_evaluate")

    def next_slot_skipped(self, schedule: ScheduledStart, run_id: str) -> str:
        """Tick the schedule at its next slot (the next hour) while `run_id` still runs: the
        slot is skipped, as the schedule's record says; the timeline line for that hour."""
        slot = schedule.cron.next_after(self.now, schedule.tz)
        assert isinstance(schedule.runtime.clock, SimulatedClock)
        schedule.runtime.clock.set(slot)
        started = schedule.tick()
        record = schedule.runtime.store.get_schedule(schedule.name)
        skips = record.skipped if record is not None else ()
        if started is not None or not skips or skips[-1]["last"] != slot:
            raise RuntimeError(
                "the Evaluate schedule did not skip its slot while the previous "
                "run was still running"
            )
        hhmm = datetime.fromtimestamp(slot / 1000, UTC).strftime("%H:%M")
        return (
            f"schedule: slot {hhmm} SKIPPED: the previous run was still running (run "
            f"{run_id[:8]}, its worker killed; overlap skip: one Evaluate at a time)"
        )

    def describe_evaluate(self, time: str, outcome: Outcome) -> None:
        """The timeline line of a noteworthy Evaluate run."""
        context = outcome.context
        parts = []
        reconciled = context.get("reconciled") or {}
        if reconciled.get("registered"):
            parts.append(
                f"reconciled: +{len(reconciled['registered'])} watch "
                f"({', '.join(reconciled['registered'])})"
            )
        if reconciled.get("closed"):
            parts.append(f"closed {len(reconciled['closed'])} (deal left scope)")
        created = context["created"]
        if created:
            parts.append(
                f"{len(created)} task(s): "
                + ", ".join(f"{c['task_id']} {c['subject_name']} #{c['step']}" for c in created)
            )
        for skipped in context["skipped"]:
            parts.append(f"skipped {skipped['item']} ({skipped['error']})")
        if outcome.retries:
            parts.append(f"{outcome.retries} retr{'y' if outcome.retries == 1 else 'ies'}")
        if outcome.snapshot.status == "error":
            error = outcome.snapshot.error
            parts.append(f"FAILED: {error['name']}: {str(error['message']).split(';')[0]}")
            if error["name"] == "NothingInScope":
                parts.append("caught by the scope health rule; no watch closed")
        self.line(time, "evaluate", "; ".join(parts) or "nothing to do", outcome.status)
        self.describe_alert(time, outcome)

    def describe_alert(self, time: str, outcome: Outcome) -> None:
        """The timeline line of the Alerts run a failure started, if any."""
        if outcome.alert is not None:
            alert = outcome.alert
            verdict = {
                "alerted": "alert mailed to ops",
                "suppressed": "same alert sent recently: suppressed",
            }.get(str(alert.snapshot.value), f"alerts run {alert.status}")
            self.line(time, "alerts", verdict, alert.status)

    def business_days(self) -> list[date]:
        """The simulated business days."""
        days: list[date] = []
        day = START
        while len(days) < self.days:
            if day.weekday() < 5 and day != HOLIDAY[0]:
                days.append(day)
            day += timedelta(days=1)
        return days

    def injections(self, n: int, day: date, hour: int) -> str | None:
        """The failures this scenario injects, by business day number and hour."""
        if n == 3 and hour == 9:
            self.world.fail("crm", times=FOREVER)
            return "CRM outage begins"
        if n == 3 and hour == 11:
            self.world.heal("crm")
            return "CRM back"
        if n == 8 and hour == 9:
            self.crm.put_deal("D-105", "Hooli", "Won")
            hooli = self.register(day, "D-105", "Hooli", "Won")
            self.line("09:00", "webhook", f"Hooli -> Won: watch closed{self.via}", hooli.status)
            self.crm.put_deal("D-103", "Initech", "Lost")
            return "Initech -> Lost: webhook LOST (reconciliation will close the watch)"
        if n == 11 and hour == 10:
            self.crm.rename_stage("Proposal", "Proposal Sent")
            return "a CRM admin renames stage 'Proposal' to 'Proposal Sent'"
        if n == 11 and hour == 13:
            self.crm.rename_stage("Proposal Sent", "Proposal")
            return "the rename is reverted after the alert"
        if n == 12 and hour == 9:
            self.services.settings = replace(self.services.settings, in_scope_stages=WRONG_STAGES)
            return (
                f"a deploy sets the stage filter to {list(WRONG_STAGES)}: a real stage, "
                "the wrong one (no deal is in it)"
            )
        if n == 12 and hour == 12:
            self.services.settings = replace(self.services.settings, in_scope_stages=DEFAULT_STAGES)
            return f"the stage filter is fixed: {list(DEFAULT_STAGES)}"
        if n == 13 and hour == 9:
            self.world.fail("tasks", times=3)
            return "task tool flaky: the next 3 calls fail"
        return None

    def morning(self, n: int, day: date) -> None:
        """The 08:00 report and the morning's events."""
        if n == 14:
            self.world.fail("mail", times=2)
            self.line("07:59", "inject", "mail server down for the next 2 sends")
        time = self.at_time(day, 8)
        morning = self.run(
            "followup_report",
            {"kind": "morning", "today": day.isoformat()},
            key=f"report:morning:{day}",
        )
        if morning.snapshot.status == "error":
            error = morning.snapshot.error
            self.line(
                time,
                "report",
                f"morning list FAILED: {error['name']}: {error['message']}",
                morning.status,
            )
            self.describe_alert(time, morning)
        else:
            due = str(morning.context["report"]).count("\n- ")
            self.line(
                time,
                "report",
                f"morning list mailed to sales ({due} follow-up(s) due or overdue)",
                morning.status,
            )
        if n == 1:
            self.webhooks(day)
        if n in (2, 4, 7):
            self.emails(day, n)
        if n == 5:
            self.world.fail("summarizer", times=2)
            self.line("08:29", "inject", "summarizer down for the next 2 calls")

    def follow_up_days(self) -> None:
        """The business days, hour by hour."""
        days = self.business_days()
        for n, day in enumerate(days, 1):
            self.out(f"[day {n}/{len(days)}] {long_date(day)}")
            self.morning(n, day)
            quiet, enriched = 0, 0
            for hour in range(9, 18):
                note = self.injections(n, day, hour)
                if note:
                    self.line(f"{hour:02d}:00", "inject", note)
                crash = 2 if n == 6 and hour == 9 else None
                if self.skipped_slot is not None:  # the schedule skipped this hour's slot
                    self.line(f"{hour:02d}:00", "evaluate", self.skipped_slot, "skipped")
                    self.skipped_slot = None
                else:
                    outcome = self.evaluate(day, hour, crash_after=crash)
                    if _noteworthy(outcome):
                        self.describe_evaluate(f"{hour:02d}:{2 if crash else 0:02d}", outcome)
                    else:
                        quiet += 1
                if hour < 17:
                    enrich = self.enrich(day, hour)
                    enriched += 1
                    skipped = enrich.context["skipped"]
                    if skipped:
                        errors = ", ".join(sorted({s["error"] for s in skipped}))
                        self.line(
                            f"{hour:02d}:30",
                            "enrich",
                            f"skipped {len(skipped)} deal(s) "
                            f"({errors}); their old summaries are kept",
                            enrich.status,
                        )
            self.out(
                f"  ...      evaluate ran hourly 09:00-17:00 ({quiet} run(s) with nothing "
                f"to do), enrich hourly at :30 ({enriched} runs)"
            )
            if day.weekday() == 4:
                time = self.at_time(day, 17, 30)
                digest = self.run(
                    "followup_report",
                    {"kind": "digest", "today": day.isoformat()},
                    key=f"report:digest:{day}",
                )
                first = str(digest.context["report"]).splitlines()[2]
                self.line(time, "report", f"Friday digest mailed to sales ({first})", digest.status)

    def emails(self, day: date, n: int) -> None:
        """E-mails about deals arrive (for Enrich to summarise)."""
        notes = {
            2: (
                "D-101",
                "cfo@acme.example",
                "Budget",
                "Budget approved for Q2, waiting on procurement.",
            ),
            4: (
                "D-102",
                "ops@globex.example",
                "Pilot",
                "Pilot went well; they want a 3-year price.",
            ),
            7: (
                "D-104",
                "it@umbrella.example",
                "Security review",
                "Security questionnaire returned with two open items.",
            ),
        }
        deal_id, sender, subject, body = notes[n]
        self.crm.add_email(deal_id, at(day, 7, 45), sender, subject, body)

    def invoices(self) -> None:
        """Three invoice runs: healthy, invoice API flaky, mail flaky."""
        self.out("")
        self.out(
            "Invoices (pending -> fetching customer -> creating invoice -> recording -> "
            "sending e-mail)"
        )
        orders = [
            ("O-1", "C-1", 129_00, None),
            ("O-2", "C-2", 4_990_00, "invoice_api"),
            ("O-3", "C-1", 59_00, "mail"),
        ]
        for order_id, customer, amount, failing in orders:
            if failing == "invoice_api":
                self.world.fail("invoice_api", times=3)
            if failing == "mail":
                self.world.fail("mail", times=1)
            started = self.runner.clock.now()
            outcome = self.runner.run(
                "invoice",
                {"order_id": order_id, "customer_id": customer, "amount_cents": amount},
                key=f"invoice:{order_id}",
            )
            self.tally.add(outcome)
            took = (self.runner.clock.now() - started) / 1000
            detail = f"{outcome.context['invoice_id']} mailed"
            if failing == "invoice_api":
                detail += (
                    f" after {outcome.retries} retries of the invoice API (waits 1s, "
                    f"2s, 4s; one idempotency key) in {took:.0f}s"
                )
            elif failing == "mail":
                detail += f" after {outcome.retries} SMTP retry"
            self.line("", "invoice", f"{order_id}: {detail}", str(outcome.snapshot.value))

    def diagrams(self, out_dir: Path) -> None:
        """Bring the diagrams of every machine under ``machines/`` up to date in ``out_dir``."""
        from statecharts.render.diagrams import discover, regenerate

        machines_dir = Path(__file__).resolve().parent
        changed = regenerate(machines_dir, out_dir)
        count = len(discover(machines_dir))
        self.out("")
        self.out(
            f"Diagrams: {count} machines drawn in {os.path.relpath(out_dir)}/ "
            f"({len(changed)} file(s) changed; index: README.md)"
        )

    def summary(self) -> None:
        """The summary table, counted from the runs and from the fakes themselves."""
        self.out("")
        self.out("Summary")
        names = sorted({name for name, _ in self.tally.runs})
        self.out(
            f"  {'workflow':<20}{'runs':>6}{'done':>6}{'partial':>9}{'failed':>8}"
            f"{'retries':>9}{'skipped':>9}"
        )
        for name in names:
            counts = {s: self.tally.runs[(name, s)] for s in ("done", "partial", "error")}
            self.out(
                f"  {name:<20}{sum(counts.values()):>6}{counts['done']:>6}"
                f"{counts['partial']:>9}{counts['error']:>8}"
                f"{self.tally.retries[name]:>9}{self.tally.skipped[name]:>9}"
            )
        total = sum(self.tally.runs.values())
        with self.db.transaction() as tx:
            steps = repo.step_counts(tx)
        invoices = FakeInvoiceApi(self.world)
        duplicates = self.tasks.duplicates() + invoices.duplicates()
        mails = self.mailer.sent()
        alerts = sum(1 for m in mails if m["recipient"] == self.services.settings.ops_inbox)
        self.out(
            f"  {'all':<20}{total:>6}{'':>32}{sum(self.tally.retries.values()):>9}"
            f"{sum(self.tally.skipped.values()):>9}"
        )
        self.out("")
        self.out(
            f"  tasks created: {len(self.tasks.tasks())}   steps fired: "
            f"{steps.get('fired', 0)}, pending: {steps.get('pending', 0)}, skipped "
            f"(watch closed): {steps.get('skipped', 0)}"
        )
        self.out(
            f"  invoices: {len(invoices.invoices())}   mails sent: {len(mails)} "
            f"(alerts to ops: {alerts})"
        )
        if isinstance(self.runner, DurableRunner):
            stored = self.runner.store.count_runs()
            self.out(
                f"  runs in the store: {sum(stored.values())} ("
                + ", ".join(f"{n} {status}" for status, n in sorted(stored.items()))
                + ")"
            )
        self.out(f"  duplicates: {duplicates}")


class _Killing(FakeTaskTool):
    """The fake task tool, except the worker dies right after the ``after``-th task is made."""

    def __init__(self, world: FakeWorld, after: int) -> None:
        super().__init__(world)
        self.left = after

    def create_task(self, external_key: str, title: str, body: str, due_on: str) -> str:
        """Create the task; die after the ``after``-th."""
        task_id = super().create_task(external_key, title, body, due_on)
        self.left -= 1
        if self.left == 0:
            raise WorkerKilled(task_id)
        return task_id


def _noteworthy(outcome: Outcome) -> bool:
    context = outcome.context
    reconciled = context.get("reconciled") or {}
    return bool(
        context["created"]
        or context["skipped"]
        or outcome.retries
        or outcome.snapshot.status == "error"
        or reconciled.get("registered")
        or reconciled.get("closed")
    )


def _state_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return ".".join(f"{k}.{_state_text(v)}" if v else k for k, v in value.items())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the exit status (1 if any duplicate was found)."""
    parser = argparse.ArgumentParser(
        prog="python -m machines.demo", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path("demo-output"),
        help="where the SQLite files go (default: ./demo-output)",
    )
    parser.add_argument("--days", type=int, default=15, help="business days to simulate")
    parser.add_argument(
        "--diagrams",
        type=Path,
        default=DIAGRAMS,
        help=f"where the diagrams go (default: {DIAGRAMS})",
    )
    parser.add_argument(
        "--followup-db",
        default=None,
        help="the follow-up database URL (default: a SQLite file in --workdir)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--store",
        default=None,
        help="the durable run store (default: sqlite:///<workdir>/runs.db; "
        "e.g. postgresql://localhost/test?schema=demo)",
    )
    where.add_argument(
        "--in-memory",
        action="store_true",
        help="run on in-memory actors instead of a durable store",
    )
    args = parser.parse_args(argv)
    store = None if args.in_memory else args.store or f"sqlite:///{args.workdir / 'runs.db'}"
    demo = Demo(
        args.workdir, args.days, lambda text: print(text, flush=True), store, args.followup_db
    )
    try:
        demo.setup()
        demo.follow_up_days()
        demo.invoices()
        demo.diagrams(args.diagrams)
        demo.summary()
    finally:
        demo.close()
    return 1 if demo.tasks.duplicates() or FakeInvoiceApi(demo.world).duplicates() else 0


if __name__ == "__main__":
    sys.exit(main())
