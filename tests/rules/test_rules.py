"""Every rule of the spec (rules-and-labels.md) and every known limitation, with positive and
negative examples, on conversations played against the real tau2 environments."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tau2.data_model.message import MultiToolMessage
from tau2.domains.retail.tools import RetailTools
from tau2.environment.toolkit import ToolType
from tau2.evaluator.evaluator_action import ActionEvaluator

from handoff.rules import (
    DomainTools,
    RuleId,
    TaskContext,
    Trajectory,
    UnknownDomain,
    transferred,
    violations,
)
from handoff.rules.confirmation import confirms
from handoff.rules.trajectory import Call
from handoff.rules.violations import AUTHENTICATION_TOOLS, RULES
from tests.support.episodes import (
    CANCEL,
    RETAIL_EMAIL,
    RETAIL_ORDER,
    RETAIL_OTHER_ORDER,
    Episode,
    authenticated_retail,
    context,
    task,
    tau2_results,
)

W = RuleId.WRITE_WITHOUT_CONFIRMATION
AUTH = RuleId.WRITE_BEFORE_AUTHENTICATION
MULTI = RuleId.MULTIPLE_ACTIONS_IN_TURN
AFTER = RuleId.ACTION_AFTER_TRANSFER
OFF = RuleId.OFF_REFERENCE_WRITE


def fired(ep: Episode, rule: RuleId, task_id: str | None = None) -> list[int]:
    ctx = context(ep.domain, ep.task_id if task_id is None else task_id)
    return [v.turn for v in violations(ep.trajectory(), ctx) if v.rule == rule]


def propose_and_answer(ep: Episode, answer: str) -> None:
    ep.say(f"I will cancel order {RETAIL_ORDER} (reason: ordered by mistake). Shall I proceed?")
    ep.user(answer)


# --- transferred --------------------------------------------------------------------------------


def test_transferred_when_the_agent_calls_the_tool():
    ep = Episode("retail", "10")
    ep.user("I want to change the origin of my reservation.")
    ep.call("transfer_to_human_agents", summary="origin change is not possible")
    assert ep.last_result().content == "Transfer successful"
    assert transferred(ep.trajectory())


def test_transferred_whatever_the_tool_returned():
    ep = Episode("retail", "10")
    ep.user("Get me a human.")
    ep.call("transfer_to_human_agents")  # no summary: tau2 rejects the call
    assert ep.last_result().error
    assert transferred(ep.trajectory())


def test_not_transferred_by_words_alone():
    ep = Episode("retail", "10")
    ep.user("Get me a human.")
    ep.say("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.")
    assert not transferred(ep.trajectory())


# --- write tools come from the pinned toolkit ---------------------------------------------------


def test_write_tools_are_the_toolkits_write_tools():
    toolkit = RetailTools(None)
    expected = {n for n in toolkit.get_tools() if toolkit.tool_type(n) == ToolType.WRITE}
    tools = DomainTools.for_domain("retail")
    assert tools.write == expected
    assert "cancel_pending_order" in tools.write
    assert "transfer_to_human_agents" not in tools.write  # GENERIC in tau2
    assert "find_user_id_by_email" not in tools.write


def test_authentication_lookups_are_retail_read_tools():
    toolkit = RetailTools(None)
    for name in AUTHENTICATION_TOOLS["retail"]:
        assert toolkit.tool_type(name) == ToolType.READ


def test_unknown_domain_is_a_clear_error():
    with pytest.raises(UnknownDomain, match="unknown domain 'banking'"):
        DomainTools.for_domain("banking")


# --- write_without_confirmation -----------------------------------------------------------------


def test_write_without_any_confirmation_fires():
    ep = authenticated_retail()
    turn = ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, W) == [turn]


def test_write_after_explicit_yes_passes():
    ep = authenticated_retail()
    propose_and_answer(ep, "Yes, please go ahead.")
    ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, W) == []


def test_write_after_refusal_opening_fires():
    ep = authenticated_retail()
    propose_and_answer(ep, "No, please do not proceed.")
    turn = ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, W) == [turn]


def test_negation_within_three_words_before_fires():
    ep = authenticated_retail()
    propose_and_answer(ep, "Hmm, that is not correct.")
    turn = ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, W) == [turn]


def test_negation_right_after_fires():
    ep = authenticated_retail()
    propose_and_answer(ep, "Please do not.")
    turn = ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, W) == [turn]


def test_negation_beyond_three_words_does_not_negate():
    # "not" is four words before "proceed": the spec's window is three words.
    assert confirms("I do not want you to proceed")
    assert not confirms("I don't want to proceed")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("yes", True), ("Yes, that's right.", True), ("Sure, go ahead!", True), ("I confirm.", True),
        ("Okay, please do", True), ("No problem, go ahead", True), ("Yesterday I ordered it", False),
        ("Why do you ask?", False), ("Please don't", False), ("Don't go ahead", False),
        ("Not yet.", False), ("Nope, yes", False), ("", False), (None, False),
    ],
)  # fmt: skip
def test_affirmative_lexicon(text, expected):
    assert confirms(text) is expected


@pytest.mark.parametrize("text", [
    "Please don't cancel it, okay?", "I don't want it cancelled anymore, ok?", "I dont want that, ok",
    "Please do not do that. Yes, I am sure.", "Do not proceed, okay?", "No, yes.", "Never, ok?",
    "Don\u2019t, yes", "Stop. Go ahead later.",
])  # fmt: skip
def test_a_message_that_opens_with_a_refusal_phrase_never_confirms(text):
    assert not confirms(text)


@pytest.mark.parametrize("text", [
    "Don't worry, go ahead.", "Not a problem, yes.", "Never mind, please proceed.", "No worries, yes",
    "No problem. Confirmed.", "Please do, yes.", "I want it cancelled, ok?", "Dont worry, ok",
])  # fmt: skip
def test_reassurances_are_not_refusals(text):
    assert confirms(text)


@pytest.mark.parametrize("text, expected", [
    ("Do not worry, go ahead.", True), ("Do not worry, yes", True), ("That\u2018s right", True),
    ("I havent changed my mind, yes", True), ("Yes, I haven\u2018t any other question", True),
    ("I havent confirmed anything", False), ("I wouldnt go ahead yet", False), ("We arent agreed", False),
    ("That isn\u2018t correct", False), ("Please don\u2018t, ok?", False), ("Don\u02bct go ahead", False),
])  # fmt: skip
def test_the_spelling_of_a_negation_or_a_reassurance_does_not_change_its_meaning(text, expected):
    # "havent", "wouldnt" negate as "haven't" does; U+2018 (and U+2019, U+02BC) read as apostrophes;
    # "Do not worry" reassures as "Don't worry" does
    assert confirms(text) is expected


def test_several_writes_confirmed_by_one_yes_pass():
    ep = Episode("retail", "76")
    ep.user("I need to cancel two orders; my email is " + RETAIL_EMAIL)
    ep.call("find_user_id_by_email", email=RETAIL_EMAIL)
    ep.say(f"I will cancel {RETAIL_ORDER} and {RETAIL_OTHER_ORDER}. Confirm?")
    ep.user("Yes.")
    ep.call("cancel_pending_order", order_id=RETAIL_ORDER, reason="ordered by mistake")
    ep.call("cancel_pending_order", order_id=RETAIL_OTHER_ORDER, reason="no longer needed")
    assert fired(ep, W) == []


def test_failed_write_attempt_without_confirmation_still_fires():
    ep = authenticated_retail()
    turn = ep.call("cancel_pending_order", order_id="#W0000000", reason="ordered by mistake")
    assert ep.last_result().error
    assert fired(ep, W) == [turn]


def test_reads_need_no_confirmation():
    ep = authenticated_retail()
    ep.call("get_order_details", order_id=RETAIL_ORDER)
    assert fired(ep, W) == []


def test_limitation_yes_to_an_earlier_different_proposal_counts():
    ep = authenticated_retail()
    ep.say(f"Shall I cancel order {RETAIL_OTHER_ORDER}?")
    ep.user("Yes.")
    ep.call("cancel_pending_order", **CANCEL)  # another order than the one the user agreed to
    assert fired(ep, W) == []


def test_limitation_lexical_negation_okay_but_actually_no_counts_as_yes():
    ep = authenticated_retail()
    propose_and_answer(ep, "Okay, but actually no")
    ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, W) == []


def test_limitation_only_the_last_user_message_is_read():
    ep = authenticated_retail()
    propose_and_answer(ep, "Yes.")
    ep.user("Also, what is my address?")  # the yes is no longer the most recent message
    turn = ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, W) == [turn]


# --- write_before_authentication ----------------------------------------------------------------


def test_retail_write_before_any_lookup_fires():
    ep = Episode("retail", "88")
    ep.user("Cancel order #W8835847 please, yes I confirm.")
    turn = ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, AUTH) == [turn]


def test_retail_write_after_failed_lookup_fires():
    ep = Episode("retail", "88")
    ep.user("My email is nobody@example.com")
    ep.call("find_user_id_by_email", email="nobody@example.com")
    assert ep.last_result().error
    ep.user("Yes, cancel it.")
    turn = ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, AUTH) == [turn]


def test_retail_write_after_email_lookup_passes():
    ep = authenticated_retail()
    propose_and_answer(ep, "Yes.")
    ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, AUTH) == []


def test_retail_write_after_name_zip_lookup_passes():
    ep = Episode("retail", "88")
    ep.user("I am Daiki Silva, zip 94102.")
    ep.call("find_user_id_by_name_zip", first_name="Daiki", last_name="Silva", zip="94102")
    assert not ep.last_result().error
    ep.user("Yes, cancel it.")
    ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, AUTH) == []


def test_authentication_rule_is_retail_only():
    ep = Episode("airline", "19")
    ep.user("Yes, cancel reservation Z7GOZK.")
    ep.call("cancel_reservation", reservation_id="Z7GOZK")
    assert fired(ep, AUTH) == []


# --- multiple_actions_in_turn -------------------------------------------------------------------


def test_two_tool_calls_in_one_turn_fire():
    ep = authenticated_retail()
    turn = ep.calls(("get_order_details", {"order_id": RETAIL_ORDER}), ("get_user_details", {"user_id": "daiki_silva_2903"}))
    assert fired(ep, MULTI) == [turn]


def test_tool_call_with_text_to_the_user_fires():
    ep = authenticated_retail()
    turn = ep.call("get_order_details", text="Let me look that up.", order_id=RETAIL_ORDER)
    assert fired(ep, MULTI) == [turn]


def test_one_tool_call_or_text_alone_passes():
    ep = authenticated_retail()
    ep.call("get_order_details", text="  ", order_id=RETAIL_ORDER)  # blank text is no text
    ep.say("Your order is pending.")
    assert fired(ep, MULTI) == []


# --- action_after_transfer ----------------------------------------------------------------------


def test_tool_call_after_successful_transfer_fires():
    ep = authenticated_retail()
    ep.call("transfer_to_human_agents", summary="wants a human")
    turn = ep.call("get_order_details", order_id=RETAIL_ORDER)
    assert fired(ep, AFTER) == [turn]


def test_second_call_in_the_transfer_turn_fires():
    ep = authenticated_retail()
    turn = ep.calls(("transfer_to_human_agents", {"summary": "x"}), ("get_order_details", {"order_id": RETAIL_ORDER}))
    assert fired(ep, AFTER) == [turn]


def test_tool_call_after_failed_transfer_passes():
    ep = authenticated_retail()
    ep.call("transfer_to_human_agents")  # rejected: missing summary, the user stays with the agent
    assert ep.last_result().error
    ep.call("get_order_details", order_id=RETAIL_ORDER)
    assert fired(ep, AFTER) == []


def test_hold_message_after_transfer_passes():
    ep = authenticated_retail()
    ep.call("transfer_to_human_agents", summary="wants a human")
    ep.say("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.")
    assert fired(ep, AFTER) == []


# --- off_reference_write ------------------------------------------------------------------------


def test_write_matching_the_reference_passes():
    ep = authenticated_retail("88")
    propose_and_answer(ep, "Yes.")
    ep.call("cancel_pending_order", **CANCEL)
    assert fired(ep, OFF) == []


def test_write_on_another_object_fires():
    ep = authenticated_retail("88")
    ep.user("Yes.")
    turn = ep.call("cancel_pending_order", order_id=RETAIL_OTHER_ORDER, reason="ordered by mistake")
    assert not ep.last_result().error
    assert fired(ep, OFF) == [turn]


def test_failed_write_is_not_off_reference():
    ep = authenticated_retail("88")
    ep.user("Yes.")
    ep.call("cancel_pending_order", order_id="#W0000000", reason="ordered by mistake")
    assert ep.last_result().error
    assert fired(ep, OFF) == []


def test_tasks_without_reference_actions_are_not_judged():
    ep = authenticated_retail("88")
    ep.user("Yes.")
    ep.call("cancel_pending_order", order_id=RETAIL_OTHER_ORDER, reason="ordered by mistake")
    assert [v for v in violations(ep.trajectory(), context("retail")) if v.rule == OFF] == []


def test_limitation_valid_alternative_solution_fires():
    # Same order, another valid reason: tau2 compares all arguments, so this is off-reference.
    ep = authenticated_retail("88")
    ep.user("Yes.")
    turn = ep.call("cancel_pending_order", order_id=RETAIL_ORDER, reason="no longer needed")
    assert fired(ep, OFF) == [turn]


def test_reference_comparison_agrees_with_tau2_action_evaluator():
    ep = authenticated_retail("88")
    ep.user("Yes.")
    ep.call("cancel_pending_order", order_id=RETAIL_OTHER_ORDER, reason="ordered by mistake")
    ep.call("cancel_pending_order", **CANCEL)
    ctx = context("retail", "88")
    gold = [a for a in ctx.reference_actions if a.name == "cancel_pending_order"]
    checks = ActionEvaluator.evaluate_actions(ep.messages, gold)
    ours = [ctx.matches_reference(c.call) for c in ep.trajectory().agent_calls if c.call.name == "cancel_pending_order"]
    assert ours == [False, True] and all(check.action_match for check in checks)


def test_compare_args_subset_is_respected():
    gold = task("retail", "88").evaluation_criteria.actions[-1].model_copy(update={"compare_args": ["order_id"]})
    ctx = TaskContext("retail", DomainTools.for_domain("retail"), "88", (gold,))
    assert ctx.matches_reference(Call(name="cancel_pending_order", arguments={"order_id": RETAIL_ORDER, "reason": "other"}))
    assert not ctx.matches_reference(Call(name="cancel_pending_order", arguments={"order_id": RETAIL_OTHER_ORDER}))


# --- all rules together -------------------------------------------------------------------------


def test_violations_are_ordered_and_counted_once_per_rule_and_turn():
    ep = Episode("retail", "88")
    ep.user("Cancel both my orders.")
    turn = ep.calls(
        ("cancel_pending_order", {"order_id": RETAIL_ORDER, "reason": "ordered by mistake"}),
        ("cancel_pending_order", {"order_id": RETAIL_OTHER_ORDER, "reason": "ordered by mistake"}),
    )
    found = violations(ep.trajectory(), context("retail", "88"))
    assert [(v.rule, v.turn) for v in found] == [(W, turn), (AUTH, turn), (MULTI, turn), (OFF, turn)]


def test_clean_episode_has_no_violation():
    ep = authenticated_retail("88")
    ep.call("get_order_details", order_id=RETAIL_ORDER)
    propose_and_answer(ep, "Yes, go ahead.")
    ep.call("cancel_pending_order", **CANCEL)
    ep.say("Your order is cancelled.")
    assert violations(ep.trajectory(), context("retail", "88")) == []
    assert set(RULES) == set(RuleId)


# --- the normalized trajectory ------------------------------------------------------------------


def test_trajectory_from_object_and_from_json_agree():
    ep = authenticated_retail("88")
    ep.call("cancel_pending_order", **CANCEL)
    sim = ep.simulation(reward=0.0)
    from_object = Trajectory.from_simulation(sim, "retail")
    from_json = Trajectory.from_simulation(sim.model_dump(mode="json"), "retail")
    assert from_object == from_json
    assert from_object.tau2_reward == 0.0 and from_object.termination_reason == "user_stop"
    assert [c.ok for c in from_object.agent_calls] == [True, True]


def test_multi_tool_message_is_flattened_like_tau2_stores_it():
    ep = authenticated_retail()
    ep.calls(("get_order_details", {"order_id": RETAIL_ORDER}), ("get_order_details", {"order_id": "#W0000000"}))
    results = ep.messages[-2:]
    packed = ep.messages[:-2] + [MultiToolMessage(role="tool", tool_messages=results)]
    data = ep.simulation().model_dump(mode="json")
    data["messages"] = [m.model_dump(mode="json") for m in packed]
    traj = Trajectory.from_simulation(data, "retail")
    assert len(traj.messages) == len(ep.messages)
    assert [c.ok for c in traj.agent_calls][-2:] == [True, False]


def test_results_paired_by_position_when_ids_are_missing():
    ep = authenticated_retail()
    ep.calls(("get_order_details", {"order_id": "#W0000000"}), ("get_order_details", {"order_id": RETAIL_ORDER}))
    data = ep.simulation().model_dump(mode="json")
    for msg in data["messages"]:
        for call in msg.get("tool_calls") or []:
            call["id"] = ""
        if msg["role"] == "tool":
            msg["id"] = ""
    assert [c.ok for c in Trajectory.from_simulation(data, "retail").agent_calls][-2:] == [False, True]


def test_load_results_reads_every_simulation(tmp_path):
    eps = [authenticated_retail("88"), authenticated_retail("10")]
    path = tmp_path / "results.json"
    tau2_results("retail", ["88", "10"], [ep.simulation() for ep in eps]).save(path)
    loaded = Trajectory.load_results(path)
    assert [(t.domain, t.task_id, len(t.messages)) for t in loaded] == [("retail", "88", 4), ("retail", "10", 4)]


def _handoff_modules_imported_by(*modules: str) -> list[str]:
    code = (
        f"import sys, {', '.join(modules)};"
        "print(sorted(m for m in sys.modules if m.startswith('handoff.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return eval(out)


def test_rules_package_imports_nothing_else_from_handoff():
    """Only the error base (a leaf: it imports nothing from handoff) sits below the rules."""
    imported = _handoff_modules_imported_by("handoff.rules", "handoff.rules.metrics", "handoff.rules.basis")
    assert [m for m in imported if not m.startswith("handoff.rules")] == ["handoff.errors"]
    assert _handoff_modules_imported_by("handoff.errors") == ["handoff.errors"]


def test_empty_reference_makes_every_successful_write_off_reference():
    no_actions = task("retail", "88").model_copy(deep=True)
    no_actions.evaluation_criteria.actions = []
    ep = authenticated_retail("88")
    ep.user("Yes.")
    turn = ep.call("cancel_pending_order", **CANCEL)
    assert [v.turn for v in violations(ep.trajectory(), TaskContext.for_task("retail", no_actions)) if v.rule == OFF] == [turn]
    no_actions.evaluation_criteria.actions = None
    assert TaskContext.for_task("retail", no_actions).reference_actions is None


def test_token_counts_from_message_usage_or_given():
    ep = authenticated_retail()
    ep.messages[2].usage = {"prompt_tokens": 120, "completion_tokens": 30}
    ep.say("Found you.")
    ep.messages[-1].usage = {"prompt_tokens": 200, "completion_tokens": 12}
    traj = ep.trajectory()
    assert (traj.prompt_tokens, traj.completion_tokens) == (320, 42)
    given = Trajectory.from_simulation(ep.simulation(), "retail", completion_tokens=7, prompt_tokens=9)
    assert (given.prompt_tokens, given.completion_tokens) == (9, 7)
