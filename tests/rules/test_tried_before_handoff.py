"""Unneeded hand-offs without trying and after trying (telecom's "try your best to resolve the issue
for the user before transferring", measured on every domain): handoff.rules.handoff_quality.tried_before."""

from __future__ import annotations

from handoff.rules import Label, RewardWeights, score_episode
from handoff.rules.context import TaskContext
from handoff.rules.metrics import compute_metrics
from handoff.rules.trajectory import TRANSFER_TOOL, Call, Msg, Trajectory
from handoff.tasks import get_task

ROAMING = "[mobile_data_issue]data_usage_exceeded|user_abroad_roaming_enabled_off[PERSONA:Easy]"  # refuel, roaming
LOCKED = "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]"  # the reference: the transfer alone
NO = Label(should_transfer=False, rule="no_transfer")


def calls(i: int, requestor: str, name: str, error: bool = False, **arguments) -> list[Msg]:
    role = "assistant" if requestor == "assistant" else "user"
    return [Msg(role=role, tool_calls=[Call(id=f"c{i}", name=name, arguments=arguments)]),
            Msg(role="tool", id=f"c{i}", requestor=requestor, error=error, content="Error" if error else "ok")]


def telecom(task_id: str, *before: list[Msg]) -> tuple[Trajectory, TaskContext]:
    messages = [Msg(role="assistant", content="Hi!"), Msg(role="user", content="My data does not work.")]
    for part in before:
        messages += part
    messages += calls(99, "assistant", TRANSFER_TOOL, summary="Please help.")
    traj = Trajectory(task_id=task_id, domain="telecom", termination_reason="agent_stop", messages=messages)
    return traj, TaskContext.for_task("telecom", get_task("telecom", task_id))


def tried(task_id: str, *before: list[Msg]) -> bool | None:
    traj, ctx = telecom(task_id, *before)
    return score_episode(traj, NO, ctx, RewardWeights.load()).tried_before_handoff


def test_a_transfer_before_any_reference_action_is_without_trying():
    assert tried(ROAMING) is False
    assert tried(ROAMING, calls(1, "assistant", "get_customer_by_phone", phone_number="555-123-2002")) is False
    assert tried(ROAMING, calls(1, "user", "check_status_bar")) is False  # a look, not an action of the reference


def test_a_reference_action_of_the_agent_or_the_user_before_the_transfer_is_trying():
    refuel = [a for a in get_task("telecom", ROAMING).evaluation_criteria.actions if a.name == "refuel_data"][0]
    assert tried(ROAMING, calls(1, "assistant", "refuel_data", **refuel.arguments)) is True
    assert tried(ROAMING, calls(1, "user", "toggle_roaming")) is True  # the user's own phone


def test_a_failed_call_a_wrong_requestor_or_a_call_after_the_transfer_is_no_trying():
    refuel = [a for a in get_task("telecom", ROAMING).evaluation_criteria.actions if a.name == "refuel_data"][0]
    assert tried(ROAMING, calls(1, "assistant", "refuel_data", error=True, **refuel.arguments)) is False
    assert tried(ROAMING, calls(1, "assistant", "toggle_roaming")) is False  # the user's action, called by the agent
    traj, ctx = telecom(ROAMING)
    traj.messages.extend(calls(100, "user", "toggle_roaming"))
    assert score_episode(traj, NO, ctx, RewardWeights.load()).tried_before_handoff is False


def test_nothing_to_try_or_no_hand_off_is_not_judged():
    assert tried(LOCKED) is None and tried(LOCKED, calls(1, "user", "toggle_airplane_mode")) is None
    traj, ctx = telecom(ROAMING)
    traj.messages[:] = traj.messages[:2]
    assert score_episode(traj, NO, ctx, RewardWeights.load()).tried_before_handoff is None
    airline = Trajectory(task_id="0", domain="airline", termination_reason="agent_stop",
                         messages=calls(99, "assistant", TRANSFER_TOOL, summary="x"))
    assert score_episode(airline, NO, TaskContext.for_task("airline", None), RewardWeights.load()
                         ).tried_before_handoff is None  # no reference known


def test_the_unneeded_share_after_trying_counts_only_judged_unneeded_hand_offs():
    from tests.rules.test_reward_and_metrics import score

    scores = [score("a", True, False, handoff_turn=1, tried_before_handoff=False),
              score("b", True, False, handoff_turn=3, tried_before_handoff=True),
              score("c", True, False, handoff_turn=3, tried_before_handoff=None),  # nothing to try: left out
              score("d", True, True, handoff_turn=3, tried_before_handoff=False)]  # needed: not in the share
    m = compute_metrics(scores)
    assert (m.unneeded_handoff_after_trying.k, m.unneeded_handoff_after_trying.n) == (1, 2)
