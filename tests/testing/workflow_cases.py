"""The six example workflows in ``machines/`` as the test kit sees them: for each, the inputs
that reach every route and the outputs its calls give (per actor name), as a user of the kit
would write them. Nothing here runs a real service: the kit completes and fails the calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from machines import followup, invoice
from statecharts import Machine

TODAY = "2026-03-02"
ITEM = {"watch_id": 1, "step": 1, "subject_name": "Acme", "due_on": TODAY}
WATCH = {"id": 1, "subject_id": "d1", "subject_name": "Acme"}


@dataclass(frozen=True)
class Case:
    """One workflow: its machine, inputs (one per route its first step takes), outputs."""

    machine: Machine
    inputs: tuple[Any, ...]
    outputs: dict[str, list[Any]]
    errors: dict[str, list[str]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.machine.id


def cases() -> list[Case]:
    """The six cases, in the order of ``machines/``."""
    flows = followup.MACHINES
    return [
        Case(
            invoice.MACHINES["invoice"],
            (
                {"order_id": "o1", "customer_id": "c1", "amount_cents": 1250},
                {"order_id": "o2", "customer_id": "", "amount_cents": 0},
            ),
            {
                "fetchCustomer": [{"name": "Ada", "email": "ada@example.com"}],
                "createInvoice": ["inv-1"],
                "recordInvoice": [True],
                "sendInvoiceEmail": ["msg-1"],
            },
            {"createInvoice": ["InvoiceRejected"]},
        ),
        Case(
            flows["followup_register"],
            tuple(
                {"deal_id": "d1", "deal_name": "Acme", "stage": stage, "today": TODAY, "now": 1}
                for stage in ("Proposal", "Won", "Closed Won", "")
            ),
            {
                "registerWatch": [{"watch_id": 1, "created": True}],
                "checkStage": [True],
                "closeWatch": [True],
                "failRun": [],
            },  # it only ever fails: that is its job
            {"checkStage": ["UnknownStage"]},
        ),
        Case(
            flows["followup_evaluate"],
            ({"run_key": "k1", "today": TODAY, "now": 1},),
            {
                "claimRun": [
                    {"granted": True, "holder": None, "abandoned": [], "held_ms": 0},
                    {
                        "granted": False,
                        "holder": {"run_key": "k0", "started_at": 0},
                        "abandoned": [],
                        "held_ms": 60_000,
                    },
                    {
                        "granted": False,
                        "holder": {"run_key": "k0", "started_at": 0},
                        "abandoned": [],
                        "held_ms": 7_200_000,
                    },
                ],
                "fetchDeals": [{"stages": ["Proposal"], "deals": [], "open_deals": 0}],
                "checkStageFilter": [True],
                "checkScopeHealth": [True],
                "reconcileWatches": [{"registered": [], "closed": []}],
                "planSteps": [[ITEM]],
                "ensureTask": ["task-1"],
                "recordStep": [
                    {"fired": True, "exhausted": False},
                    {"fired": True, "exhausted": True},
                ],
                "sendNotification": ["msg-1"],
                "finishRun": ["ok"],
                "releaseFailedRun": [True],
                "failRun": [],
            },  # it only ever fails: that is its job
            {
                "checkStageFilter": ["StageFilterMatchesNothing"],
                "checkScopeHealth": ["NothingInScope"],
            },
        ),
        Case(
            flows["followup_report"],
            (
                {"kind": "morning", "today": TODAY, "now": 1},
                {"kind": "digest", "today": TODAY, "now": 1},
            ),
            {
                "composeMorningList": ["2 follow-ups"],
                "composeDigest": ["the week"],
                "sendReport": ["msg-1"],
                "logRun": [True],
            },
        ),
        Case(
            flows["followup_enrich"],
            ({"now": 1},),
            {
                "loadWatches": [[WATCH]],
                "summarizeDeal": ["Wants a demo.", None],
                "storeSummary": [True],
                "finishRun": ["ok"],
            },
        ),
        Case(
            flows["followup_alerts"],
            (
                {
                    "run_id": "r1",
                    "workflow": "followup_evaluate",
                    "key": "k1",
                    "state": "planning",
                    "error": {"name": "DatabaseError", "message": "down"},
                    "failed_at": 1,
                    "dry_run": False,
                },
            ),
            {
                "logFailure": [
                    {"duplicate": False, "alert_key": "a1"},
                    {"duplicate": True, "alert_key": "a1"},
                ],
                "sendAlert": ["msg-1"],
                "markAlerted": [True],
                "noteSuppressed": [True],
            },
        ),
    ]
