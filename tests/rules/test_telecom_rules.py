"""The rules on telecom dialogues, each with a positive and a negative example (docs/rules.md, "Telecom")."""

from __future__ import annotations

from handoff.rules import Label, RewardWeights, score_episode
from handoff.rules.context import TaskContext
from handoff.rules.trajectory import TRANSFER_TOOL, Call, Msg, Trajectory
from handoff.tasks import get_task
from tests.rules.test_tried_before_handoff import ROAMING, calls
from tests.support.agent import call, run

NO = Label(should_transfer=False, rule="no_transfer")
LOOKUP = calls(1, "assistant", "get_customer_by_phone", phone_number="555-123-2002")
REFUEL = {"customer_id": "C1001", "line_id": "L1002", "gb_amount": 2.0}


def violations(*parts: list[Msg]) -> list[tuple[str, int]]:
    messages = [Msg(role="assistant", content="Hi!"), Msg(role="user", content="My data does not work.")]
    for part in parts:
        messages += part
    traj = Trajectory(task_id=ROAMING, domain="telecom", termination_reason="agent_stop", messages=messages)
    ctx = TaskContext.for_task("telecom", get_task("telecom", ROAMING))
    return [(v.rule.value, v.turn) for v in score_episode(traj, NO, ctx, RewardWeights.load()).violations]


def say(role: str, text: str) -> list[Msg]:
    return [Msg(role=role, content=text)]


def test_identification_before_a_write():
    assert ("write_before_authentication", 2) in violations(calls(1, "assistant", "enable_roaming", customer_id="C1001",
                                                                    line_id="L1002"))
    failed = calls(1, "assistant", "get_customer_by_phone", error=True, phone_number="000")
    assert ("write_before_authentication", 4) in violations(failed, calls(2, "assistant", "enable_roaming",
                                                                           customer_id="C1001", line_id="L1002"))
    assert not [v for v in violations(LOOKUP, calls(2, "assistant", "enable_roaming", customer_id="C1001",
                                                    line_id="L1002")) if v[0] == "write_before_authentication"]


def test_confirmation_only_where_telecoms_policy_asks_for_it():
    refuel = calls(2, "assistant", "refuel_data", **REFUEL)
    assert ("write_without_confirmation", 5) in violations(LOOKUP, say("user", "How much would it cost?"), refuel)
    assert not [v for v in violations(LOOKUP, say("user", "Yes, go ahead."), refuel)
                if v[0] == "write_without_confirmation"]
    roaming = calls(2, "assistant", "enable_roaming", customer_id="C1001", line_id="L1002")  # no cost, no question
    assert not [v for v in violations(LOOKUP, say("user", "I am in France."), roaming)
                if v[0] == "write_without_confirmation"]


def test_one_action_a_turn_and_none_after_the_transfer():
    both = [Msg(role="assistant", content="Checking.", tool_calls=[Call(id="x", name="get_customer_by_phone",
                                                                         arguments={"phone_number": "555-123-2002"})]),
            Msg(role="tool", id="x", content="ok")]
    assert ("multiple_actions_in_turn", 2) in violations(both)
    assert not [v for v in violations(LOOKUP) if v[0] == "multiple_actions_in_turn"]
    transfer = calls(9, "assistant", TRANSFER_TOOL, summary="SIM locked")
    assert ("action_after_transfer", 6) in violations(LOOKUP, transfer, LOOKUP)
    assert not [v for v in violations(LOOKUP, transfer) if v[0] == "action_after_transfer"]


def test_off_reference_writes_are_the_agents_only():
    right = calls(2, "assistant", "refuel_data", **REFUEL)
    wrong = calls(2, "assistant", "refuel_data", **{**REFUEL, "gb_amount": 1.0})
    yes = say("user", "Yes, please.")
    assert ("off_reference_write", 5) in violations(LOOKUP, yes, wrong)
    assert not [v for v in violations(LOOKUP, yes, right) if v[0] == "off_reference_write"]
    users_own = calls(3, "user", "toggle_data")  # a user write outside the reference: not the agent's
    assert not [v for v in violations(LOOKUP, users_own) if v[0] == "off_reference_write"]


def test_format_kinds_on_telecom_a_user_tool_is_no_agent_tool():
    locked = "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]"
    result = run([call("toggle_airplane_mode", {}), "Done."], ["My phone has no service.", "###STOP###"],
                 domain="telecom", task_id=locked)
    assert [(e.kind.value, e.turn) for e in result.format_events] == [("unknown_tool", 2)]
    fine = run([call("get_customer_by_phone", {"phone_number": "555-123-2002"}), "Found you."],
               ["My phone has no service.", "###STOP###"], domain="telecom", task_id=locked)
    assert fine.format_events == []


def test_who_asked_for_the_human_in_a_telecom_dialogue():
    from handoff.rules import attribute

    asked = Trajectory(task_id=ROAMING, domain="telecom", termination_reason="agent_stop", messages=[
        Msg(role="assistant", content="Hi!"), Msg(role="user", content="This is useless, let me talk to a human agent."),
        *calls(1, "assistant", TRANSFER_TOOL, summary="asked")])
    assert attribute(asked).handoff_initiator.value == "user"
    unprompted = Trajectory(task_id=ROAMING, domain="telecom", termination_reason="agent_stop", messages=[
        Msg(role="assistant", content="Hi!"), Msg(role="user", content="My data is slow abroad."),
        *calls(1, "assistant", TRANSFER_TOOL, summary="slow data")])
    assert attribute(unprompted).handoff_initiator.value == "agent"
