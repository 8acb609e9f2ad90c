"""One test per hidden-state kind, each on a real corpus workflow whose JSON has the feature
(SOURCES.md lists them), checking the mapping against what the JSON holds."""

from __future__ import annotations

import json
from typing import Any

from statecharts.io.n8n import HIDDEN_KINDS, HiddenState, N8nImport, from_n8n
from statecharts.io.n8n.validation import build_machines
from tests.io.n8n_corpus import (
    MORE,
    corpus_data,
    corpus_path,
    guarded_targets,
    imported,
    mapped_state,
    route,
    state,
    targets,
)


def _hidden(result: N8nImport, kind: str) -> list[HiddenState]:
    return [h for h in result.hidden_states if h.kind == kind]


def test_trigger_wait_has_one_entry_event_per_trigger() -> None:
    # Code_0182: a manual trigger, a schedule trigger and an Execute Workflow Trigger
    result = imported("zie619__Code_0182")
    [hidden] = _hidden(result, "trigger_wait")
    assert hidden.state == result.config["initial"] == "waiting_for_trigger"
    on = state(result, "waiting_for_trigger")["on"]
    assert sorted(on) == ["EXECUTE_WORKFLOW_TRIGGER", "ON_CLICKING_EXECUTE", "SCHEDULE_TRIGGER"]
    # both the manual and the schedule trigger feed 'Starting Message' in the JSON
    assert guarded_targets(on["ON_CLICKING_EXECUTE"]) == ["starting_message"]
    assert guarded_targets(on["SCHEDULE_TRIGGER"]) == ["starting_message"]
    assert guarded_targets(on["EXECUTE_WORKFLOW_TRIGGER"]) == ["config"]
    for trigger in ("On clicking 'execute'", "Schedule Trigger", "Execute Workflow Trigger"):
        mapping = next(m for m in result.nodes if m.node == trigger)
        assert mapping.state is None and "starts a run" in mapping.how


def test_retry_on_fail_becomes_an_invoke_retry_policy_with_n8n_values() -> None:
    # Resilient REST API: retryOnFail, maxTries 3, waitBetweenTries 3000
    result = imported("enescingoz__Other_Integrations")
    invoke = state(result, "fetch_api_records")["invoke"]
    assert invoke["retry"] == {
        "max_attempts": 3,
        "initial_interval": 3000,
        "backoff": "fixed",
        "jitter": "none",
    }
    hidden = {h.state for h in _hidden(result, "retry")}
    assert hidden == {"fetch_api_records.attempting", "fetch_api_records.waiting_to_retry"}
    # the engine expands it into exactly those visible states
    machine, _ = build_machines(result)
    assert machine.get_state_node("w.fetch_api_records.waiting_to_retry").type == "atomic"


def test_retry_defaults_when_the_export_leaves_them_out() -> None:
    # Google Drive upload: retryOnFail + waitBetweenTries 5000, no maxTries -> n8n's 3 tries
    result = imported("enescingoz__Google_Drive")
    assert state(result, "google_drive")["invoke"]["retry"]["max_attempts"] == 3
    assert state(result, "google_drive")["invoke"]["retry"]["initial_interval"] == 5000
    # Http_1520: 'Respond to Webhook - Chat Message' has retryOnFail only -> 3 tries, 1000 ms
    result = imported("zie619__Http_1520")
    path = mapped_state(result, "Respond to Webhook - Chat Message")
    retry = state(result, path)["invoke"]["retry"]
    assert (retry["max_attempts"], retry["initial_interval"]) == (3, 1000)
    # ... while 'HTTP Request' has retryOnFail: false -> no retry at all
    assert "retry" not in state(result, mapped_state(result, "HTTP Request"))["invoke"]


def test_retry_follows_n8n_clamps_on_a_real_node() -> None:
    data = corpus_data("enescingoz__Other_Integrations")
    fetch = next(n for n in data["nodes"] if n["name"] == "Fetch API Records")

    def retry_with(**settings: object) -> Any:
        fetch.update(settings)
        return state(from_n8n(data, "w"), "fetch_api_records")["invoke"].get("retry")

    assert retry_with(maxTries=10, waitBetweenTries=9000)["max_attempts"] == 5
    assert retry_with()["initial_interval"] == 5000
    assert retry_with(maxTries=1, waitBetweenTries=-5)["max_attempts"] == 2
    assert retry_with()["initial_interval"] == 0
    # a wait of 0 (and 0 tries) mean n8n's defaults, since n8n writes `value || default`
    assert retry_with(maxTries=0, waitBetweenTries=0) == {
        "max_attempts": 3,
        "initial_interval": 1000,
        "backoff": "fixed",
        "jitter": "none",
    }
    # a leftover maxTries without retryOnFail is no retry
    assert retry_with(retryOnFail=False, maxTries=4) is None
    assert not [
        h
        for h in from_n8n(data, "w").hidden_states
        if h.node == "Fetch API Records" and h.kind == "retry"
    ]


def test_error_outcome_for_continue_error_output() -> None:
    # disk watchdog: 'Send Telegram Alert' onError continueErrorOutput, output 1 -> email
    result = imported("enescingoz__devops")
    invoke = state(result, "send_telegram_alert")["invoke"]
    assert invoke["onError"] == "#w.send_telegram_alert_failed"
    assert targets(invoke["onDone"]) == ["done"]  # output 0 has nothing attached
    outcome = state(result, "send_telegram_alert_failed")
    assert outcome["entry"] == [
        {"type": "n8n_route", "params": {"route": "Send Telegram Alert:failed"}}
    ]
    assert (
        result.config["context"]["n8n"]["graph"]["Send Telegram Alert:failed"]["error_output"] == 1
    )
    assert outcome["always"][0] == {
        "guard": {"type": "current_node_is", "params": {"node": "Send Email Fallback"}},
        "target": "#w.send_email_fallback",
        "description": "continue on its error output (output 1)",
        "reenter": True,
    }
    [hidden] = _hidden(result, "error_outcome")
    assert hidden.node == "Send Telegram Alert" and "continueErrorOutput" in hidden.reason


def test_error_outcome_for_continue_regular_output_and_legacy_continue_on_fail() -> None:
    # Telegram_1185: 'Qdrant Vector Store' onError continueRegularOutput -> its output 0 (Wait)
    result = imported("zie619__Telegram_1185")
    path = mapped_state(result, "Qdrant Vector Store")
    outcome_path = state(result, path)["invoke"]["onError"].removeprefix("#w.")
    assert guarded_targets(state(result, outcome_path)["always"]) == [mapped_state(result, "Wait")]
    # Github_1149: 'GitHub' has the legacy continueOnFail: true -> regular output (Merge)
    result = imported("zie619__Github_1149")
    path = mapped_state(result, "GitHub")
    outcome_path = state(result, path)["invoke"]["onError"].removeprefix("#w.")
    outcome = state(result, outcome_path)
    assert route(result, outcome["entry"][0])["error_output"] == 0
    assert guarded_targets(outcome["always"]) == guarded_targets(
        state(result, path)["invoke"]["onDone"]
    )
    assert outcome["always"][0]["description"] == "continue on its regular output"
    [hidden] = [h for h in _hidden(result, "error_outcome") if h.node == "GitHub"]
    assert hidden.reason.startswith("continueOnFail")


def test_stop_on_error_leaves_the_failure_unhandled_so_the_run_fails() -> None:
    # disk watchdog: 'Parse & Evaluate' has no onError -> n8n's stopWorkflow
    result = imported("enescingoz__devops")
    invoke = state(result, "parse_evaluate")["invoke"]
    assert "onError" not in invoke and invoke["onFinalFailure"] == "fail_run"


def test_next_branch_when_one_output_feeds_two_nodes() -> None:
    # Google Drive: 'Generate Description ...' output 0 -> two 'Read Video' nodes, no Merge
    result = imported("enescingoz__Google_Drive")
    [hidden] = _hidden(result, "next_branch")
    data = corpus_data("enescingoz__Google_Drive")
    y = {n["name"]: n["position"][1] for n in data["nodes"]}
    upper, lower = sorted(
        ["Read Video from Google Drive", "Read Video from Google Drive2"], key=y.__getitem__
    )
    source = mapped_state(result, "Generate Description for Videos in Tiktok and Instagram")
    # both are reachable straight from the node; n8n v1 runs the upper one first, and the
    # lower one is taken off the stack once the upper branch has ended
    assert set(guarded_targets(state(result, source)["invoke"]["onDone"])) == {
        mapped_state(result, upper),
        mapped_state(result, lower),
    }
    resumed = guarded_targets(state(result, hidden.state)["always"])
    assert mapped_state(result, lower) in resumed
    assert targets(state(result, hidden.state)["always"])[-1] == "done"


def test_a_merge_is_one_state_and_waits_in_the_execution_stack() -> None:
    # Form_0633: 'Generate Random Verification Code' -> 'Add to Waitlist Sheet' -> Merge(0)
    # and straight into Merge(1)
    result = imported("zie619__Form_0633")
    merge = state(result, "merge")
    assert merge["invoke"]["input"] == {"$n8n": "inputs"}  # one list of items per input
    code = state(result, "generate_random_verification_code")["invoke"]["onDone"]
    assert guarded_targets(code) == ["add_to_waitlist_sheet", "merge"]
    assert "merge" in guarded_targets(state(result, "add_to_waitlist_sheet")["invoke"]["onDone"])
    assert not [m for m in result.nodes if m.state and "." in m.state]  # no regions


def test_reply_wait_for_send_and_wait_with_its_time_limit() -> None:
    # Telegram_1185: 'Confirm Qdrant Delete Points' (sendAndWait, limit 15 minutes)
    result = imported("zie619__Telegram_1185")
    [hidden] = _hidden(result, "reply_wait")
    assert hidden.node == "Confirm Qdrant Delete Points"
    waiting = state(result, hidden.state)
    assert list(waiting["on"]) == ["CONFIRM_QDRANT_DELETE_POINTS_REPLIED"]
    assert list(waiting["after"]) == ["900000"]
    replied, timed_out = (
        waiting["on"]["CONFIRM_QDRANT_DELETE_POINTS_REPLIED"],
        waiting["after"]["900000"],
    )
    for leave in (replied, timed_out):
        assert guarded_targets(leave) == [mapped_state(result, "If")]
    # each says what ended the wait (the diagram's arrows)
    assert replied[0]["description"] == "on CONFIRM_QDRANT_DELETE_POINTS_REPLIED"
    assert timed_out[0]["description"] == "after 15 minutes without a reply (time limit)"


def test_run_done_is_the_final_state_of_a_finished_run() -> None:
    result = imported("zie619__Mailjet_1956")
    [hidden] = _hidden(result, "run_done")
    assert state(result, hidden.state)["type"] == "final"
    assert targets(state(result, "mailjet")["invoke"]["onDone"]) == ["done"]


def test_endless_loop_when_a_node_doing_no_work_is_wired_to_itself() -> None:
    # Zoom AI Meeting Assistant: Loop Over Items v3 'Filter: Only 1 item' sends its done
    # output (0) back to its own input, its loop output (1) to 'Zoom: Get transcript file'
    path = corpus_path("enescingoz__Other_Integrations_and_Use_Cases_Zoom_AI_Meeting", MORE)
    data = json.loads(path.read_text(encoding="utf-8"))
    loop = "Filter: Only 1 item"
    assert data["connections"][loop]["main"][0] == [{"node": loop, "type": "main", "index": 0}]
    result = from_n8n(data, "w")
    [hidden] = _hidden(result, "endless_loop")
    assert hidden.node is None and state(result, hidden.state)["tags"] == ["failed"]
    assert state(result, hidden.state)["invoke"]["onFinalFailure"] == "fail_run"
    first = state(result, mapped_state(result, loop))["always"][0]
    assert first["guard"] == {"type": "loops_forever"}
    assert targets([first]) == [hidden.state]
    assert any(w.startswith(f"'{loop}' forms a loop") for w in result.warnings)


def test_every_hidden_kind_occurs_in_the_corpus_tests_above() -> None:
    covered = {
        "trigger_wait",
        "retry",
        "error_outcome",
        "next_branch",
        "run_start",
        "reply_wait",
        "run_done",
        "endless_loop",
    }
    assert covered == set(HIDDEN_KINDS)
