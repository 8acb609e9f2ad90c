"""Enrich (hourly at :30): a two-line summary of each watched deal's recent e-mails, through a
pluggable summarizer. Not blocked by dry-run: it writes only to our database. A CRM or
summarizer failure skips that deal (it keeps its previous summary). Config: ``enrich.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from machines.config import load_config
from machines.followup import batch, repository
from machines.followup.services import Services
from machines.followup.summarizer import build_prompt, parse_summary
from statecharts import Machine, assign, create_machine, from_callable
from statecharts.frozen import thaw

CONFIG = Path(__file__).with_name("enrich.json")
WORKFLOW = "followup_enrich"


def build(services: Services) -> Machine:
    """The Enrich machine wired to ``services``."""

    def load_watches(input: Any) -> list[dict[str, Any]]:
        with services.db.transaction() as tx:
            return repository.open_watches(tx)

    def summarize_deal(input: dict[str, Any]) -> str | None:
        watch = input["current"]
        with services.db.transaction() as tx:
            if not repository.watch_is_open(tx, int(watch["id"])):
                return None  # closed since the run loaded it: not worth a model call
        since = int(input["now"]) - services.settings.summary_lookback_ms
        emails = services.crm.recent_emails(str(watch["subject_id"]), since)
        if not emails:
            return None
        answer = services.summarizer.complete(build_prompt(str(watch["subject_name"]), emails))
        return parse_summary(answer)

    def store_summary(input: dict[str, Any]) -> bool:
        with services.db.transaction() as tx:
            return repository.store_summary(
                tx, int(input["current"]["id"]), str(input["summary"]), int(input["now"])
            )

    def finish_run(input: dict[str, Any]) -> str:
        status = "partial" if input["skipped"] else "ok"
        key = str(input["run_key"] or f"{WORKFLOW}@{input['now']}")
        with services.db.transaction() as tx:
            repository.record_run(
                tx,
                WORKFLOW,
                key,
                status,
                {"summarized": input["summarized"], "skipped": input["skipped"]},
                int(input["now"]),
            )
        return status

    def note_summary(context: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
        if batch.failed(event):
            return {
                "summary": None,
                "skipped": batch.skip_record(
                    context, event, str(context["current"]["subject_name"])
                ),
            }
        return {"summary": event["output"]}

    return create_machine(
        load_config(CONFIG),
        guards={**batch.GUARDS, "hasSummary": lambda c, e: c["summary"] is not None},
        actions={
            **batch.ACTIONS,
            "noteSummary": assign(note_summary),
            "noteStored": assign(
                lambda c, e: {"summarized": [*thaw(c["summarized"]), c["current"]["subject_name"]]}
            ),
        },
        actors={
            "loadWatches": from_callable(load_watches, "loadWatches"),
            "summarizeDeal": from_callable(summarize_deal, "summarizeDeal"),
            "storeSummary": from_callable(store_summary, "storeSummary"),
            "finishRun": from_callable(finish_run, "finishRun"),
        },
    )
