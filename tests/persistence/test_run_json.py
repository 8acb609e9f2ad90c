"""One run reads the same from both web apps: the operator UI's `GET /api/runs/{run_id}` and
the webhook ingress's `GET /api/runs/{run_id}` (and its read by key) answer the same JSON, on
every store: where the run is, its context with secret-looking keys hidden, its timers, its
journal and its child runs."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from persistence.ingress import create_api
from persistence.runtime import Runtime
from persistence.stores import Store
from persistence.ui.app import create_app
from statecharts import assign, create_machine

ticket = create_machine(
    {
        "id": "ticket",
        "initial": "open",
        "context": lambda input: {"api_token": input["token"], "notes": []},
        "states": {
            "open": {
                "on": {
                    "NOTE": {
                        "actions": assign({"notes": lambda c, e: [*c["notes"], e["text"]]}),
                    },
                    "CLOSE": "closed",
                },
                "after": {"3600000": "closed"},
            },
            "closed": {"type": "final"},
        },
    }
)
"""Takes notes until closed, or closes itself after an hour (a pending timer)."""


def test_the_ui_and_the_ingress_answer_the_same_json_for_a_run(store: Store) -> None:
    runtime = Runtime(store, [ticket])
    run, _ = runtime.start_run("ticket", {"token": "s3cret"}, "T-7")
    runtime.send(run.id, {"type": "NOTE", "text": "called back"})
    runtime.send(run.id, {"type": "NOTE", "text": "waiting for parts"})
    with (
        TestClient(create_app(store, [ticket])) as ui,
        TestClient(create_api(runtime)) as ingress,
    ):
        from_ui: dict[str, Any] = ui.get(f"/api/runs/{run.id}").json()
        from_ingress = ingress.get(f"/api/runs/{run.id}").json()
        by_key = ingress.get("/api/workflows/ticket/runs/T-7").json()
    assert from_ingress == from_ui
    assert by_key == from_ui
    assert (from_ui["id"], from_ui["key"], from_ui["status"]) == (run.id, "T-7", "active")
    assert from_ui["context"] == {
        "api_token": "[hidden]",
        "notes": ["called back", "waiting for parts"],
    }
    assert [entry["event"]["type"] for entry in from_ui["journal"]][:2] == ["NOTE", "NOTE"]
    assert from_ui["journal_total"] == len(from_ui["journal"]) >= 2
    assert [timer["event_type"] for timer in from_ui["timers"]] != []
    assert "s3cret" not in str(from_ui)


def test_the_same_run_after_it_ended_reads_the_same_too(store: Store) -> None:
    runtime = Runtime(store, [ticket])
    run, _ = runtime.start_run("ticket", {"token": "t"}, "T-8")
    runtime.send(run.id, {"type": "CLOSE"})
    with (
        TestClient(create_app(store, [ticket])) as ui,
        TestClient(create_api(runtime)) as ingress,
    ):
        from_ui = ui.get(f"/api/runs/{run.id}").json()
        assert ingress.get(f"/api/runs/{run.id}").json() == from_ui
        assert ingress.get("/api/runs/no-such-run").status_code == 404
    assert (from_ui["status"], from_ui["state"], from_ui["timers"]) == ("done", "closed", [])
