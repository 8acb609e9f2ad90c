"""How each kind of n8n node is mapped, checked on real corpus workflows."""

from __future__ import annotations

from statecharts.io.n8n import Implementation, from_n8n
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


def _names(impls: tuple[Implementation, ...]) -> set[str]:
    return {i.name for i in impls}


# -- Wait -----------------------------------------------------------------------------------------


def test_wait_time_interval_is_an_after_timer_in_ms() -> None:
    # 0230: Wait v1 {"unit": "seconds", "amount": 2}
    result = imported("zie619__N8ntrainingcustomermessenger_0230")
    after = state(result, "wait_for_time_interval")["after"]
    assert list(after) == ["2000"]
    assert guarded_targets(after["2000"]) == [
        mapped_state(result, "Customer Messenger - Send message to client")
    ]
    # Wait_0716: v1.1 {"amount": 2}: the unit defaults to seconds from v1.1 on
    result = imported("zie619__Wait_0716")
    assert list(
        state(result, mapped_state(result, "Simulate some Consumed Service Time"))["after"]
    ) == ["2000"]
    # Wait_0498: v1.1 {"amount": 600} -> ten minutes
    assert list(state(imported("zie619__Wait_0498"), "wait2")["after"]) == ["600000"]
    # Telegram_1185: v1.1 with no parameters -> n8n's default of 5 seconds
    result = imported("zie619__Telegram_1185")
    assert list(state(result, mapped_state(result, "Wait"))["after"]) == ["5000"]


def test_wait_v1_defaults_to_one_hour() -> None:
    data = corpus_data("zie619__N8ntrainingcustomermessenger_0230")
    wait = next(n for n in data["nodes"] if n["name"] == "Wait for time interval")
    wait["parameters"] = {}
    assert list(state(from_n8n(data, "w"), "wait_for_time_interval")["after"]) == ["3600000"]


def test_wait_amount_given_as_an_expression_becomes_a_named_delay() -> None:
    # Stopanderror_0743: "amount": "={{ $json[\"waitTime\"] }}"
    result = imported("zie619__Stopanderror_0743")
    after = state(result, mapped_state(result, "Wait"))["after"]
    assert list(after) == ["wait_delay"]
    [delay] = result.delays
    assert delay.name == "wait_delay" and "waitTime" in delay.doc


def test_wait_specific_time_is_a_timer_with_a_named_delay() -> None:
    # Wait_0092: resume specificTime, dateTime from an expression
    result = imported("zie619__Wait_0092")
    path = mapped_state(result, "Wait")
    assert list(state(result, path)["after"]) == ["wait_until"]
    assert "feedback_time" in next(d.doc for d in result.delays if d.name == "wait_until")


def test_wait_for_webhook_waits_for_an_event() -> None:
    result = imported("zie619__N8ntrainingcustomermessenger_0230")
    waiting = state(result, "wait_for_external_approval")
    assert list(waiting["on"]) == ["WAIT_FOR_EXTERNAL_APPROVAL_WEBHOOK_CALLED"]
    assert guarded_targets(waiting["on"]["WAIT_FOR_EXTERNAL_APPROVAL_WEBHOOK_CALLED"]) == [
        "rest_of_the_workflow_placeholder"
    ]
    assert "after" not in waiting  # no limitWaitTime: waits without limit, as in n8n


def test_wait_limit_wait_time_is_a_timeout_to_the_same_next_node() -> None:
    data = corpus_data("zie619__N8ntrainingcustomermessenger_0230")
    wait = next(n for n in data["nodes"] if n["name"] == "Wait for external approval")
    wait["parameters"].update(limitWaitTime=True, resumeAmount=30, resumeUnit="minutes")
    waiting = state(from_n8n(data, "w"), "wait_for_external_approval")
    assert list(waiting["after"]) == ["1800000"]
    assert guarded_targets(waiting["after"]["1800000"]) == ["rest_of_the_workflow_placeholder"]


def test_form_pages_wait_for_their_submission() -> None:
    # Form_0633: three Form pages (n8n-nodes-base.form) after the Form Trigger
    result = imported("zie619__Form_0633")
    for name in (
        "Validate with Verification Code",
        "Additional Data for the Sheet",
        "Let the User Reenter Code",
    ):
        events = list(state(result, mapped_state(result, name))["on"])
        assert len(events) == 1 and events[0].endswith("_FORM_SUBMITTED")
    assert list(state(result, "waiting_for_trigger")["on"]) == ["WAITLIST_FORM"]


# -- Loop Over Items ------------------------------------------------------------------------------


def test_loop_v3_done_and_loop_outputs_come_from_the_loops_memory() -> None:
    # Code_0182: 'Loop Over Items' v3: output 0 (done) -> Completed Notification,
    # output 1 (loop) -> Execute Workflow
    result = imported("zie619__Code_0182")
    loop = state(result, "loop_over_items")
    [action] = loop["entry"]
    params = route(result, action)
    assert (params["how"], params["batch_size"], params["loop_output"], params["done_output"]) == (
        "loop",
        1,
        1,
        0,
    )
    assert set(guarded_targets(loop["always"])) == {"completed_notification", "execute_workflow"}
    labels = {t["target"]: t["description"] for t in loop["always"]}
    assert labels["#w.completed_notification"] == "done"
    assert labels["#w.execute_workflow"] == "loop"


def test_loop_v2_outputs_are_loop_then_done() -> None:
    # Readbinaryfiles_2036: Split In Batches v2: output 0 (loop) -> Read CSV,
    # output 1 (done) -> Remove duplicates (the "done branch never runs")
    data = corpus_path("zie619__Readbinaryfiles_2036", MORE)
    result = from_n8n(__import__("json").loads(data.read_text()), "w")
    params = route(result, state(result, "split_in_batches")["entry"][0])
    assert (params["loop_output"], params["done_output"], params["batch_size"]) == (0, 1, 1)
    labels = {t["target"]: t["description"] for t in state(result, "split_in_batches")["always"]}
    assert labels["#w.read_csv"] == "loop" and labels["#w.remove_duplicates"] == "done"


def test_loop_v3_batch_size_and_unconnected_done_output() -> None:
    # Wait_0498: batchSize 250, done output is null in the JSON -> the run ends when done
    result = imported("zie619__Wait_0498")
    loop = state(result, "loop_over_items2")
    assert route(result, loop["entry"][0])["batch_size"] == 250
    assert targets(loop["always"])[-1] in ("done", "next_branch")


def test_loop_v1_is_ended_by_an_if_on_no_items_left() -> None:
    # 0230: SplitInBatches v1 (one output), ended by "If - Are we Finished?" asking
    # $node["SplitInBatches"].context["noItemsLeft"]
    result = imported("zie619__N8ntrainingcustomermessenger_0230")
    loop = state(result, "splitinbatches")
    assert guarded_targets(loop["always"]) == ["wait_for_time_interval"]
    finished = state(result, "if_are_we_finished")
    assert "invoke" not in finished  # n8n's own bookkeeping: no actor to write
    assert route(result, finished["entry"][0])["how"] == "no_items_left"
    assert route(result, finished["entry"][0])["loop"] == "SplitInBatches"
    assert set(guarded_targets(finished["always"])) == {"create_approval_url", "splitinbatches"}


def test_loop_v2_has_batches_of_its_batch_size() -> None:
    # Stopanderror_0427: 'loop' v2 with batchSize 1; v1/v2 default is 10
    result = imported("zie619__Stopanderror_0427")
    assert route(result, state(result, "loop")["entry"][0])["batch_size"] == 1
    data = corpus_data("zie619__Stopanderror_0427")
    next(n for n in data["nodes"] if n["name"] == "loop")["parameters"].pop("batchSize")
    result = from_n8n(data, "w")
    assert route(result, state(result, "loop")["entry"][0])["batch_size"] == 10


# -- If, Switch, Filter ---------------------------------------------------------------------------


def _actor_doc(result: object, name: str) -> str:
    return next(i.doc for i in result.actors if i.name == name)  # type: ignore[attr-defined]


def test_if_routes_per_item_through_its_actor() -> None:
    result = imported("enescingoz__devops")
    invoke = state(result, "any_alerts")["invoke"]
    assert invoke["src"] == "any_alerts" and invoke["input"] == {"$n8n": "items"}
    assert guarded_targets(invoke["onDone"]) == ["send_telegram_alert"]  # false: no wire
    assert "0: true, 1: false" in _actor_doc(result, "any_alerts")
    labels = {t["target"]: t["description"] for t in invoke["onDone"]}
    assert labels["#w.send_telegram_alert"] == "true"


def test_switch_v1_has_four_outputs_and_its_actor_routes() -> None:
    # Code_0182 'Check Status' v1: four outputs (a rule names its output)
    result = imported("zie619__Code_0182")
    onDone = state(result, "check_status")["invoke"]["onDone"]
    assert set(guarded_targets(onDone)) == {
        "same_file_do_nothing",
        "file_is_different",
        "file_is_new",
    }
    assert "0: 0, 1: 1, 2: 2, 3: 3" in _actor_doc(result, "check_status")


def test_switch_v3_fallback_extra_is_one_more_output() -> None:
    # Splitout_0560 'Route to Requested Function': 5 rules, fallbackOutput "extra" -> output 5
    result = imported("zie619__Splitout_0560")
    doc = _actor_doc(result, "route_to_requested_function")
    assert "5: Fallback" in doc and "0: =volume_up" not in doc
    onDone = state(result, "route_to_requested_function")["invoke"]["onDone"]
    assert mapped_state(result, "Oops. How was this reached?") in guarded_targets(onDone)


def test_switch_v3_without_fallback_has_one_output_per_rule() -> None:
    result = imported("zie619__Webhook_0619")
    params = route(result, state(result, "route_message")["invoke"]["onDone"][0]["actions"][0])
    assert params["outputs"] == 3


def test_text_classifier_fallback_other_is_an_output() -> None:
    # the issue: 16 of 57 classifiers lost their "other" output
    data = corpus_data("zie619__Splitout_0816")
    node = next(n for n in data["nodes"] if n["name"] == "Spam Detection")
    node["parameters"].setdefault("options", {})["fallback"] = "other"
    result = from_n8n(data, "w")
    assert _actor_doc(result, "spam_detection").endswith("2: other")


def test_filter_keeps_or_drops_items() -> None:
    result = imported("zie619__Splitout_0560")
    invoke = state(result, "filter")["invoke"]
    assert guarded_targets(invoke["onDone"]) == ["custom_function_2_p3"]
    assert "returns the items of its output" in _actor_doc(result, "filter")


def test_noop_with_continue_error_output_keeps_its_error_branch() -> None:
    data = corpus_data("enescingoz__devops")
    data["nodes"].append(
        {
            "name": "Guard",
            "type": "n8n-nodes-base.noOp",
            "typeVersion": 1,
            "position": [0, 0],
            "onError": "continueErrorOutput",
        }
    )
    data["connections"]["Guard"] = {
        "main": [[], [{"node": "Send Email Fallback", "type": "main", "index": 0}]]
    }
    data["connections"]["Check Disk Usage (SSH)"]["main"][0].append(
        {"node": "Guard", "type": "main", "index": 0}
    )
    result = from_n8n(data, "w")
    guard = state(result, "guard")
    assert route(result, guard["entry"][0])["outputs"] == 2  # main + error
    assert "send_email_fallback" in guarded_targets(guard["always"])


# -- Execute Workflow, Error Trigger, errorWorkflow, Stop and Error -------------------------------


def test_execute_workflow_that_waits_is_an_invoked_child() -> None:
    result = imported("zie619__Webhook_0619")
    invoke = state(result, "qualys_create_report")["invoke"]
    assert invoke["input"] == {"$n8n": "items"}
    assert invoke["description"] == "run sub-workflow icSLX102kSS9zNdK"
    assert invoke["src"] == "qualys_create_report"
    assert targets(invoke["onDone"])[-1] in ("done", "next_branch")
    assert any("icSLX102kSS9zNdK" in d and "child" in d for d in result.primary.decisions)


def test_execute_workflow_without_waiting_is_fire_and_forget() -> None:
    # Splitout_0816 'Moderation Subworkflow': options.waitForSubWorkflow false
    result = imported("zie619__Splitout_0816")
    moderation = state(result, "moderation_subworkflow")
    assert "invoke" not in moderation
    assert moderation["entry"][0]["type"] == "start_moderation_subworkflow"
    assert route(result, moderation["entry"][1])["how"] == "pass"  # its items go on unchanged
    assert guarded_targets(moderation["always"]) == ["for_each_user"]
    assert "start_moderation_subworkflow" in _names(result.actions)


def test_error_trigger_next_to_other_triggers_is_a_separate_error_machine() -> None:
    # Error_0518: Error Trigger -> Gmail, and a schedule-triggered main part
    result = imported("zie619__Error_0518")
    assert result.error_config is not None
    assert result.error_config["id"] == "w_error"
    assert result.error_config["initial"] == "starting"  # started on failure: no trigger wait
    assert guarded_targets(result.error_config["states"]["starting"]["always"]) == ["gmail"]
    assert "gmail" not in result.config["states"]
    assert list(state(result, "waiting_for_trigger")["on"]) == ["SCHEDULE_TRIGGER"]


def test_a_workflow_with_only_an_error_trigger_is_itself_the_error_machine() -> None:
    result = imported("zie619__Error_0447")
    assert result.error_config is None
    assert result.config["initial"] == "starting"
    assert guarded_targets(state(result, "starting")["always"]) == ["set_message"]
    assert result.config["meta"]["n8n"]["role"] == "error workflow"


def test_settings_error_workflow_is_named_in_the_config() -> None:
    result = imported("zie619__Http_0350")
    assert result.config["meta"]["n8n"]["error_workflow"] == "2"
    assert result.error_workflow_id == "2"


def test_stop_and_error_fails_the_run_with_its_message() -> None:
    result = imported("zie619__Stopanderror_0427")
    stop = state(result, "stop_and_error")
    assert stop["tags"] == ["failed"]
    assert stop["invoke"]["input"] == {
        "message": "You have reached the Google Indexing API limit (200/day by default)"
    }
    assert "onError" not in stop["invoke"] and "onDone" not in stop["invoke"]


# -- what has no state of its own -----------------------------------------------------------------


def test_disabled_nodes_pass_their_items_on() -> None:
    # Wait_0716: the disabled 'Webhook' trigger starts nothing
    result = imported("zie619__Wait_0716")
    assert "WEBHOOK" not in state(result, "waiting_for_trigger")["on"]
    webhook = next(m for m in result.nodes if m.node == "Webhook")
    assert webhook.state is None and webhook.how.startswith("disabled")
    # a disabled node in the middle of a chain passes its items on to its first output
    data = corpus_data("enescingoz__devops")
    next(n for n in data["nodes"] if n["name"] == "Parse & Evaluate")["disabled"] = True
    result = from_n8n(data, "w")
    parse = state(result, "parse_evaluate")
    assert "invoke" not in parse and route(result, parse["entry"][0])["how"] == "pass"
    assert guarded_targets(parse["always"]) == ["any_alerts"]
    assert "parse_evaluate" not in {i.name for i in result.actors}


def test_ai_sub_nodes_are_attributes_not_states() -> None:
    result = imported("zie619__Splitout_0816")
    model = next(m for m in result.nodes if m.node == "Model")
    assert model.state is None and "'Spam Detection' (ai_languageModel)" in model.how
    meta = state(result, "spam_detection")["meta"]["n8n"]
    assert meta["sub_nodes"] == {"ai_languageModel": ["Model"]}
    # the classifier's outputs are named after its categories
    on_done = state(result, "spam_detection")["invoke"]["onDone"]
    labels = {t["target"]: t["description"] for t in on_done}
    assert labels["#w.flag_as_not_spam"] == "is_not_spam"
    result = imported("zie619__Telegram_1185")
    agent = state(result, mapped_state(result, "AI Agent"))["meta"]["n8n"]["sub_nodes"]
    assert agent == {
        "ai_memory": ["Window Buffer Memory"],
        "ai_tool": ["Qdrant Vector Store Tool"],
        "ai_languageModel": ["Google Gemini Chat Model1"],
    }


def test_unknown_node_types_become_a_generic_doing_state() -> None:
    result = imported("enescingoz__devops")
    ssh = next(m for m in result.nodes if m.node == "Check Disk Usage (SSH)")
    assert ssh.how.startswith('unknown node type: generic "doing Check Disk Usage (SSH)" state')
    assert state(result, "check_disk_usage_ssh")["invoke"]["src"] == "check_disk_usage_ssh"
    assert "check_disk_usage_ssh" in _names(result.actors)


# -- what real exports contain --------------------------------------------------------------------


def test_real_export_shapes_are_accepted() -> None:
    # Github_1149: nodes without "id"; only nodes + connections; no settings
    data = corpus_data("zie619__Github_1149")
    assert set(data) == {"nodes", "connections"} and all("id" not in n for n in data["nodes"])
    result = from_n8n(data, "w")
    assert result.config["meta"]["n8n"]["execution_order"] == "legacy"
    # Wait_0498: an output slot that is null
    data = corpus_data("zie619__Wait_0498")
    assert data["connections"]["Loop Over Items2"]["main"][0] is None
    assert from_n8n(data, "w").state_count > 0


def test_a_connection_from_a_missing_node_is_ignored_with_a_warning() -> None:
    # Splitout_0560 wires from 'MQTT Trigger - Ikea Remote Switch', a node that is not there
    result = imported("zie619__Splitout_0560")
    assert any("MQTT Trigger - Ikea Remote Switch" in w for w in result.warnings)
    # so 'Globals' has no incoming wire: n8n only runs it by hand, an explicit RUN_ event
    assert "RUN_GLOBALS" in state(result, "waiting_for_trigger")["on"]


def test_retry_on_fail_on_if_and_filter_is_kept_and_on_a_loop_is_warned() -> None:
    # the issue: retryOnFail on If/Filter/Loop nodes was dropped without a word
    data = corpus_data("zie619__Code_0182")
    for node in data["nodes"]:
        if node["name"] in ("If file too large", "Loop Over Items"):
            node.update(retryOnFail=True, maxTries=2)
    result = from_n8n(data, "w")
    assert (
        state(result, mapped_state(result, "If file too large"))["invoke"]["retry"]["max_attempts"]
        == 2
    )
    [warning] = [w for w in result.warnings if "Loop Over Items" in w]
    assert "Retry on Fail" in warning and "dropped" in warning
