"""The follow-up workflows' downstream systems behind small interfaces, and their fakes.

A failure of any of these is a third-party failure: Evaluate and Enrich skip the item and end
the run partial; only the database (``machines.followup.db``) fails a run. The fakes live in a
``FakeWorld`` and fail on demand (targets ``crm``, ``tasks``, ``summarizer``; mail is
``machines.mail``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from machines.fakes import FakeWorld


class CrmUnavailable(Exception):
    """The CRM did not answer (retryable; the item is skipped when retries run out)."""


class TaskToolUnavailable(Exception):
    """The task tool did not answer (retryable; the item is skipped when retries run out)."""


class SummarizerUnavailable(Exception):
    """The summarizer did not answer (retryable; the deal keeps its old summary)."""


class Crm(Protocol):
    """The CRM: its pipeline stages, deals by stage, and a deal's recent e-mails."""

    def stage_names(self) -> list[str]:
        """Every stage name in the pipeline."""
        ...

    def deals_in_stages(self, stages: Sequence[str]) -> list[dict[str, Any]]:
        """Deals (``id``, ``name``, ``stage``, ``owner``) currently in one of ``stages``."""
        ...

    def count_deals_in_stages(self, stages: Sequence[str]) -> int:
        """How many deals are in one of ``stages`` (the health rule's open deals)."""
        ...

    def get_deal(self, deal_id: str) -> dict[str, Any] | None:
        """The deal (``id``, ``name``, ``stage``, ``owner``), or None if the CRM deleted it."""
        ...

    def recent_emails(self, deal_id: str, since: int) -> list[dict[str, Any]]:
        """E-mails about the deal sent at or after ``since`` (epoch ms)."""
        ...


class TaskTool(Protocol):
    """The task tool: find a task by our key, or create one."""

    def find_task(self, external_key: str) -> str | None:
        """The id of the task created with ``external_key``, if any."""
        ...

    def create_task(self, external_key: str, title: str, body: str, due_on: str) -> str:
        """Create a task; return its id."""
        ...


class Summarizer(Protocol):
    """A text model: a prompt in, an answer out."""

    def complete(self, prompt: str) -> str:
        """The model's answer to ``prompt``."""
        ...


class FakeCrm:
    """A CRM pipeline in the fake world (target ``crm``)."""

    target = "crm"

    def __init__(self, world: FakeWorld) -> None:
        self.world = world

    def _check(self) -> None:
        failure = self.world.trip(self.target)
        if failure is not None:
            raise CrmUnavailable(f"crm: {failure}")

    def stage_names(self) -> list[str]:
        """Stage names in pipeline order."""
        self._check()
        return [r["name"] for r in self.world.rows("select name from stages order by position")]

    def deals_in_stages(self, stages: Sequence[str]) -> list[dict[str, Any]]:
        """In-scope deals by id."""
        self._check()
        marks = ", ".join("?" for _ in stages) or "null"
        return self.world.rows(
            f"select id, name, stage, owner from deals where stage in ({marks}) order by id",
            list(stages),
        )

    def count_deals_in_stages(self, stages: Sequence[str]) -> int:
        """Deals in one of ``stages``."""
        self._check()
        marks = ", ".join("?" for _ in stages) or "null"
        return int(
            self.world.rows(
                f"select count(*) as n from deals where stage in ({marks})", list(stages)
            )[0]["n"]
        )

    def get_deal(self, deal_id: str) -> dict[str, Any] | None:
        """The deal by id."""
        self._check()
        found = self.world.rows("select id, name, stage, owner from deals where id = ?", (deal_id,))
        return found[0] if found else None

    def recent_emails(self, deal_id: str, since: int) -> list[dict[str, Any]]:
        """The deal's e-mails since ``since``."""
        self._check()
        return self.world.rows(
            "select sent_at, sender, subject, body from emails where "
            "deal_id = ? and sent_at >= ? order by sent_at",
            (deal_id, since),
        )

    # -- setting the fake up (demos and tests) ----------------------------------------------

    def set_stages(self, names: Sequence[str]) -> None:
        """Replace the pipeline's stages."""
        with self.world.transaction() as tx:
            tx.execute("delete from stages")
            tx.executemany(
                "insert into stages (name, position) values (?, ?)",
                [(name, i) for i, name in enumerate(names)],
            )

    def put_deal(self, deal_id: str, name: str, stage: str, owner: str = "sales") -> None:
        """Create a deal or move it to ``stage``."""
        with self.world.transaction() as tx:
            tx.execute(
                "insert into deals (id, name, stage, owner) values (?, ?, ?, ?) on "
                "conflict (id) do update set stage = excluded.stage, "
                "name = excluded.name",
                (deal_id, name, stage, owner),
            )

    def delete_deal(self, deal_id: str) -> None:
        """Delete a deal, as a CRM user might."""
        with self.world.transaction() as tx:
            tx.execute("delete from deals where id = ?", (deal_id,))

    def rename_stage(self, old: str, new: str) -> None:
        """Rename a pipeline stage (its deals move with it), as a CRM admin might."""
        with self.world.transaction() as tx:
            tx.execute("update stages set name = ? where name = ?", (new, old))
            tx.execute("update deals set stage = ? where stage = ?", (new, old))

    def add_email(self, deal_id: str, sent_at: int, sender: str, subject: str, body: str) -> None:
        """Record an e-mail about a deal."""
        with self.world.transaction() as tx:
            tx.execute(
                "insert into emails (deal_id, sent_at, sender, subject, body) values "
                "(?, ?, ?, ?, ?)",
                (deal_id, sent_at, sender, subject, body),
            )


class FakeTaskTool:
    """A task tool in the fake world (target ``tasks``). It does not deduplicate: a task
    created twice is there twice, which is how the tests see duplicates."""

    target = "tasks"

    def __init__(self, world: FakeWorld) -> None:
        self.world = world

    def _check(self) -> None:
        failure = self.world.trip(self.target)
        if failure is not None:
            raise TaskToolUnavailable(f"task tool: {failure}")

    def find_task(self, external_key: str) -> str | None:
        """The first task created with ``external_key``."""
        self._check()
        found = self.world.rows(
            "select id from tasks where external_key = ? order by rowid limit 1", (external_key,)
        )
        return str(found[0]["id"]) if found else None

    def create_task(self, external_key: str, title: str, body: str, due_on: str) -> str:
        """A new task ``T-<n>``."""
        self._check()
        with self.world.transaction() as tx:
            count = tx.execute("select count(*) from tasks").fetchone()[0]
            task_id = f"T-{count + 1}"
            tx.execute(
                "insert into tasks (id, external_key, title, body, due_on) values (?, ?, ?, ?, ?)",
                (task_id, external_key, title, body, due_on),
            )
        self.world.checkpoint(self.target)
        return task_id

    def tasks(self) -> list[dict[str, Any]]:
        """Every task, oldest first."""
        return self.world.rows("select * from tasks order by rowid")

    def duplicates(self) -> int:
        """Tasks beyond the first for the same external key."""
        rows = self.world.rows("select count(*) - count(distinct external_key) as n from tasks")
        return int(rows[0]["n"])


class FakeSummarizer:
    """A deterministic stand-in for a text model (target ``summarizer``): it answers in the
    asked-for format from the first and last e-mail of the prompt."""

    target = "summarizer"

    def __init__(self, world: FakeWorld) -> None:
        self.world = world

    def complete(self, prompt: str) -> str:
        """Two lines: the latest e-mail's subject, and who wrote last."""
        failure = self.world.trip(self.target)
        if failure is not None:
            raise SummarizerUnavailable(f"summarizer: {failure}")
        headers = [line for line in prompt.splitlines() if line.startswith("E-mail ")]
        if not headers:
            return "No recent e-mails.\nNext step: reach out."
        last = headers[-1].split(": ", 1)
        sender = last[0].rsplit(" from ", 1)[-1]
        return f"{len(headers)} recent e-mail(s), latest: {last[-1]}\nNext step: reply to {sender}."
