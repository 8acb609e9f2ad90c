"""Imported corpus workflows run on the engine the way n8n runs them: real actors (plain
functions), a simulated clock, and the calls each node's actor receives recorded."""

from __future__ import annotations

from tests.io.n8n_corpus import imported
from tests.io.n8n_runs import Run, items, to_output


def test_v1_loop_with_wait_and_webhook_runs_each_batch_then_waits_for_approval() -> None:
    result = imported("zie619__N8ntrainingcustomermessenger_0230")
    run = Run(
        result, outputs={"customer_datastore": items({"name": "a"}, {"name": "b"}, {"name": "c"})}
    )
    send = "customer_messenger_send_message_to"
    run.actor.send("ON_CLICKING_EXECUTE")
    assert run.names() == ["customer_datastore"]
    for _ in range(3):
        run.clock.advance(2000)  # 'Wait for time interval': 2 seconds per batch
    # three batches of one, 2 s apart, each batch handed to the send; then the If sees no
    # items left and asks for approval
    assert run.calls == [
        ("customer_datastore", 0),
        (send, 2000),
        (send, 4000),
        (send, 6000),
        ("create_approval_url", 6000),
        ("customer_messenger_send_url_to_merchant", 6000),
    ]
    assert run.inputs[send] == [items({"name": "a"}), items({"name": "b"}), items({"name": "c"})]
    assert run.snapshot.value == "wait_for_external_approval"
    run.clock.advance(10 * 24 * 3600 * 1000)  # no time limit: still waiting days later
    assert run.snapshot.value == "wait_for_external_approval"
    run.actor.send("WAIT_FOR_EXTERNAL_APPROVAL_WEBHOOK_CALLED")
    assert run.snapshot.status == "done"


def test_v3_loop_runs_the_body_per_item_and_takes_done_when_exhausted() -> None:
    # Code_0182: Loop Over Items (v3) -> Execute Workflow per item (continueErrorOutput to
    # 'Failed Flows', which loops back), done -> Completed Notification
    result = imported("zie619__Code_0182")
    run = Run(
        result,
        outputs={"n8n": items({"id": 1}, {"id": 2}, {"id": 3})},
        failing={"execute_workflow": 1},
    )
    run.actor.send("SCHEDULE_TRIGGER")
    assert run.names() == [
        "starting_message",
        "n8n",
        "execute_workflow",
        "failed_flows",
        "execute_workflow",
        "execute_workflow",
        "completed_notification",
    ]
    assert run.snapshot.status == "done"


def test_error_output_continues_and_default_stop_fails_the_run() -> None:
    result = imported("enescingoz__devops")
    ok = Run(result, failing={"send_telegram_alert": -1})
    ok.actor.send("SCHEDULE_TRIGGER")
    assert ok.names() == [
        "check_disk_usage_ssh",
        "parse_evaluate",
        "any_alerts",
        "send_telegram_alert",
        "send_email_fallback",
    ]
    # the error output carries n8n's error item
    assert ok.inputs["send_email_fallback"] == [
        [{"json": {"error": "send_telegram_alert is down"}}]
    ]
    assert ok.snapshot.status == "done"
    stopped = Run(result, failing={"parse_evaluate": -1})
    stopped.actor.send("SCHEDULE_TRIGGER")
    assert stopped.names() == ["check_disk_usage_ssh", "parse_evaluate"]
    assert stopped.snapshot.status == "error"
    assert "parse_evaluate is down" in str(stopped.snapshot.error)


def test_retry_on_fail_tries_three_times_3_s_apart_then_takes_the_error_output() -> None:
    # Resilient REST API: Fetch API Records retries (3 tries, 3000 ms) and continues on its
    # error output to 'Sanitize Failure'
    result = imported("enescingoz__Other_Integrations")
    run = Run(result, failing={"fetch_api_records": -1})
    run.actor.send("RUN_DEMO")
    assert run.names() == ["set_demo_configuration", "fetch_api_records"]
    assert run.snapshot.matches("fetch_api_records.waiting_to_retry")
    run.clock.advance(3000)
    run.clock.advance(3000)
    assert run.calls == [
        ("set_demo_configuration", 0),
        ("fetch_api_records", 0),
        ("fetch_api_records", 3000),
        ("fetch_api_records", 6000),
        ("sanitize_failure", 6000),
    ]
    assert run.snapshot.status == "done"  # 'Failure Record' is a No Operation node


def test_retry_succeeding_on_the_second_try_goes_on_normally() -> None:
    result = imported("enescingoz__Other_Integrations")
    run = Run(result, failing={"fetch_api_records": 1})
    run.actor.send("RUN_DEMO")
    run.clock.advance(3000)
    assert run.names() == [
        "set_demo_configuration",
        "fetch_api_records",
        "fetch_api_records",
        "normalize_and_validate_records",
    ]
    assert run.snapshot.status == "done"


def test_stop_and_error_fails_the_run_with_the_nodes_message() -> None:
    # Stopanderror_0427: index_check false -> Stop and Error
    result = imported("zie619__Stopanderror_0427")
    # the loop hands out the items of the node before it ('url_set')
    run = Run(
        result,
        outputs={"url_set": items({"url": "https://example.org"}), "index_check": to_output(1)},
    )
    run.actor.send("SCHEDULE_TRIGGER")
    assert run.names()[-2:] == ["url_index", "index_check"]
    assert run.snapshot.status == "error"
    assert "Google Indexing API limit" in str(run.snapshot.error)


def test_two_start_nodes_run_one_after_the_other_and_the_merge_joins_them_once() -> None:
    result = imported("zie619__Process_0009")
    run = Run(result)
    run.actor.send("RUN")
    names = run.names()
    # the export has no executionOrder: n8n's legacy order runs breadth first (each target
    # pushed to the back of the stack, WorkflowExecute.addNodeToBeExecuted `push`)
    assert names == ["data_1", "data_2", "convert_data_1", "convert_data_2", "merge"]
    assert len(run.inputs["merge"][0]) == 2  # one list of items per input
    assert run.snapshot.status == "done"


def test_several_triggers_start_the_same_run() -> None:
    result = imported("zie619__Stopanderror_0427")
    for event in ("SCHEDULE_TRIGGER", "WHEN_CLICKING_EXECUTE_WORKFLOW"):
        run = Run(result, outputs={"sitemap_parse": []})
        run.actor.send(event)
        assert run.names()[0] == "sitemap_set"
