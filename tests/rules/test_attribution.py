"""Who asked for the human (handoff.rules.attribution, docs/rules.md "Requests and offers"): user
requests and agent offers of a transfer, per sentence and per episode, with sentences from real
tau2 leaderboard dialogues (../shared/data/real-trajectories, skipped when absent)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from handoff.rules import Initiator, Trajectory, attribute, offers_transfer, requests_human
from handoff.rules.attribution import USER_STOP_TRANSFER, offscript
from handoff.rules.trajectory import TRANSFER_TOOL, Call, Msg

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real-trajectories"
AIRLINE_FILE = "claude-sonnet-4-5_aide-platform_2025-10-31__claude-sonnet-4-5_airline_default_gpt4.1_1trials.json.gz"

REQUESTS = [  # real user simulator sentences first (airline and retail leaderboard files), then made up
    "Could you please transfer me to a human agent to discuss this further?",
    "If you still say I’m Silver, I’d like to speak to a supervisor, please.",  # conditional
    "I’d really appreciate it if you could escalate this or check if there’s any way to do better.",
    "Is there any way to escalate this or speak to a supervisor?",  # a question
    "Yes, please transfer me to someone who can actually help with this.",
    "If it’s possible, I’d appreciate being transferred to a human agent to see if there’s anything else.",
    "Please get me to a human agent who can see if there's any exception or accommodation here.",
    "get me a human rep",
    "Is there anyone else I can speak to, maybe a supervisor?",
    "I want a real person.",
    "Can you connect me with someone higher up?",
    "Yes, please transfer me to a supervisor. ###TRANSFER###",  # the request counts, not the token
    "I insist on speaking to a supervisor.",  # the -ing forms (issue 46, defect 7)
    "Is talking to a manager an option?",
    "I'd prefer chatting with a live agent now.",
]
NOT_REQUESTS = [
    "I really don’t want to be transferred to a human agent.",  # real
    "I’d rather not be transferred.",  # real
    "Don’t transfer me yet.",  # real
    "please hold off on transferring me to a human for now—let's finish the cancellations first",  # real
    "Maybe a supervisor could make an exception?",  # real: a mention, no request verb
    "Hi, I was told by a customer support representative over the phone that a service agent could help me.",  # real
    "I’d like to give up my seat so someone else who needs it can have it.",  # real
    "I’d like to talk to someone about this.",  # real, the opening: "someone" is the agent
    "I'm not talking to a supervisor, I'm talking to you.",  # -ing, negated
    "Thanks for speaking with me about the refund.",  # -ing, no human target
    "No need for a human, thanks.",
    "I don't need a supervisor.",
    "Can you transfer the remaining balance to my gift card?",
    USER_STOP_TRANSFER,
    "",
]
OFFERS = [  # real agent sentences (claude-sonnet-4-5, gpt-4.1-mini) first
    "Would you like me to transfer you to a human agent who may be able to provide additional assistance?",
    "If you'd like, I can transfer you to a human agent who may be able to review your situation.",
    "Would you like me to explore other options, or would you prefer to speak with a human agent about this?",
    "Would you like me to proceed with the transfer?",
    "If you need exact fees or window information, I can connect you with a human agent.",
    "Would you like me to:\n1. **Go ahead with the change now**, or\n2. **Transfer you to a human agent** first?",
    "Shall I transfer you?",
    "Would you like to proceed with speaking to a human agent who can better help you?",  # real (claude-sonnet-4-5)
]
NOT_OFFERS = [
    "This restriction applies even for human agents.",  # real
    "You would need to contact a human agent for further assistance with this matter.",  # real
    "**Even a supervisor or human agent would be bound by the same rule**.",  # real
    "If I were to escalate this to a supervisor or another agent, they would tell you the same thing.",  # real
    "I cannot transfer you to a human agent for this request.",
    "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.",  # an announcement
    "I can transfer the funds to your gift card if you'd like.",
    "Would you like me to proceed with the cancellation?",
]


@pytest.mark.parametrize("text", REQUESTS)
def test_a_user_request_for_a_human_is_found(text):
    assert requests_human(text)


@pytest.mark.parametrize("text", NOT_REQUESTS)
def test_refusals_mentions_and_the_stop_token_are_no_request(text):
    assert not requests_human(text)


@pytest.mark.parametrize("text", OFFERS)
def test_an_agent_offer_of_a_transfer_is_found(text):
    assert offers_transfer(text)


@pytest.mark.parametrize("text", NOT_OFFERS)
def test_mentions_refusals_and_announcements_are_no_offer(text):
    assert not offers_transfer(text)


def test_the_stop_token_is_tau2s():
    from tau2.user.base import TRANSFER

    assert USER_STOP_TRANSFER == TRANSFER


def episode(*turns: tuple[str, str] | str) -> Trajectory:
    """("user", text), ("agent", text), or "transfer" (an agent turn with the transfer call)."""
    messages = [Msg(role="assistant", content="Hi! How can I help you today?")]
    for turn in turns:
        if turn == "transfer":
            messages += [Msg(role="assistant", tool_calls=[Call(id="t", name=TRANSFER_TOOL, arguments={"summary": "x"})]),
                         Msg(role="tool", id="t", content="Transfer successful", requestor="assistant")]
        else:
            role, text = turn
            messages.append(Msg(role="user" if role == "user" else "assistant", content=text))
    return Trajectory(task_id="0", domain="airline", termination_reason="user_stop", messages=messages)


def test_the_initiator_is_whoever_asked_first_and_turns_count_as_the_handoff_turn():
    offer_first = attribute(episode(("user", "Cancel my trip."), ("agent", "I can't. Would you like me to transfer you?"),
                                    ("user", "Yes, transfer me to a human agent."), "transfer"))
    assert offer_first.model_dump() == {"user_request_turn": 2, "agent_offer_turn": 1,
                                        "handoff_initiator": Initiator.AGENT_OFFER, "user_ended_for_transfer": False}
    asked = attribute(episode(("user", "Cancel my trip."), ("agent", "Done?"), ("user", "I want to speak to a manager."),
                              ("agent", "I can transfer you to a supervisor if you'd like."), ("user", "Yes."), "transfer"))
    assert (asked.user_request_turn, asked.agent_offer_turn, asked.handoff_initiator) == (2, 2, Initiator.USER)
    unprompted = attribute(episode(("user", "Cancel my trip."), "transfer"))
    assert (unprompted.user_request_turn, unprompted.handoff_initiator) == (None, Initiator.AGENT)


def test_only_messages_before_the_first_transfer_count_and_no_handoff_has_no_initiator():
    after = attribute(episode(("user", "Cancel my trip."), "transfer", ("user", "Can I speak to a supervisor?"),
                              ("agent", "Would you like me to transfer you?")))
    assert (after.user_request_turn, after.agent_offer_turn, after.handoff_initiator) == (None, None, Initiator.AGENT)
    kept = attribute(episode(("user", "I want a human agent."), ("agent", "I can help you myself.")))
    assert (kept.user_request_turn, kept.handoff_initiator, kept.user_ended_for_transfer) == (1, None, False)


def test_announcing_the_transfer_in_the_calls_turn_is_no_offer():
    traj = episode(("user", "My bag is lost."))
    traj.messages.append(Msg(role="assistant", content="Would you like me to transfer you? I am transferring you.",
                             tool_calls=[Call(id="t", name=TRANSFER_TOOL, arguments={})]))
    assert attribute(traj).agent_offer_turn is None


def test_a_user_who_ends_with_the_transfer_token_is_marked_and_is_no_handoff():
    traj = episode(("user", "Cancel it."), ("agent", "Would you like me to transfer you to a human agent?"),
                   ("user", f"Yes, please transfer me to a human agent. {USER_STOP_TRANSFER}"))
    found = attribute(traj)
    assert found.user_ended_for_transfer and found.handoff_initiator is None
    assert (found.agent_offer_turn, found.user_request_turn) == (1, 2)


def real_airline() -> dict[str, Trajectory]:
    path = REAL / AIRLINE_FILE
    if not path.is_file():
        pytest.skip(f"the shared real trajectories are absent ({path})")
    data = json.loads(gzip.decompress(path.read_bytes()))
    return {s["task_id"]: Trajectory.from_simulation(s, "airline") for s in data["simulations"]}


def test_real_airline_dialogues_are_attributed_as_read_by_hand():
    sims = real_airline()
    found = {task_id: attribute(traj) for task_id, traj in sims.items()}
    # 46: "Is there any way to escalate this or speak to a supervisor?" before the transfer
    assert (found["46"].handoff_initiator, found["46"].user_request_turn) == (Initiator.USER, 2)
    # 31: the agent offered ("Would you like me to transfer you to a human agent ...?"), the user accepted
    assert found["31"].handoff_initiator is Initiator.AGENT_OFFER
    # 3: an offer accepted with ###TRANSFER###, and the agent never called the tool
    assert found["3"].user_ended_for_transfer and found["3"].handoff_initiator is None
    # 35: "I really don’t want to be transferred", twice: no request
    assert found["35"].user_request_turn is None and found["35"].agent_offer_turn is not None
    # 45: transferred with no request and no offer
    assert found["45"].handoff_initiator is Initiator.AGENT


# --- episode labels -------------------------------------------------------------------------------


def test_a_user_request_makes_the_episode_label_one_and_the_reward_can_use_it():
    from handoff.rules import Label, RewardWeights, score_episode
    from handoff.rules.context import TaskContext

    traj = episode(("user", "This is unfair. Can I speak to a supervisor?"), "transfer")
    ctx = TaskContext.for_task("airline", None)
    task_label = Label(should_transfer=False, rule="no_transfer")
    by_task = score_episode(traj, task_label, ctx, RewardWeights.load())
    assert by_task.episode_should_transfer and not by_task.label.should_transfer
    assert by_task.outcome.value == "unneeded_handoff" and by_task.episode_outcome.value == "correct_handoff"
    assert by_task.outcome_detail() == "unneeded_handoff_after_user_request"
    assert by_task.episode_rule == "user_request" and by_task.reward_terms.handoff == -1.0
    by_episode = score_episode(traj, task_label, ctx, RewardWeights.load().model_copy(update={"label": "episode"}))
    assert by_episode.reward_terms.handoff == 1.0 and by_episode.reward - by_task.reward == 2.0
    quiet = score_episode(episode(("user", "Cancel my trip."), ("agent", "Done.")), task_label, ctx, RewardWeights.load())
    assert not quiet.episode_should_transfer and quiet.episode_rule == "no_transfer"


def test_reward_label_must_be_task_or_episode():
    from pydantic import ValidationError

    from handoff.rules import RewardWeights

    assert RewardWeights.load().label == "task" and RewardWeights.load("tau2_only").label == "task"
    with pytest.raises(ValidationError):
        RewardWeights.model_validate(RewardWeights.load().model_dump() | {"label": "user"})


def test_metrics_under_both_labels_and_outcomes_split_by_who_asked():
    from handoff.rules.metrics import compute_metrics
    from tests.rules.test_reward_and_metrics import score

    scores = [
        score("a", True, False, user_request_turn=2, handoff_initiator="user"),  # task FP, episode TP
        score("b", True, False, agent_offer_turn=1, handoff_initiator="agent_offer"),  # FP under both
        score("c", True, False, handoff_initiator="agent"),  # FP under both
        score("d", False, True, user_request_turn=3),  # FN, the request refused
        score("e", False, False, user_request_turn=1),  # task TN, episode FN (refused)
        score("f", False, True),  # FN, not asked
        score("g", True, True, handoff_initiator="agent"),  # TP
    ]
    m = compute_metrics(scores)
    assert m.handoff.confusion.model_dump() == {"tp": 1, "fp": 3, "tn": 1, "fn": 2}
    assert m.handoff_episode.confusion.model_dump() == {"tp": 2, "fp": 2, "tn": 0, "fn": 3}
    assert (m.handoff.recall.value, m.handoff_episode.recall.value) == (pytest.approx(1 / 3), pytest.approx(2 / 5))
    assert {k: v.k for k, v in m.outcome_details.items() if v.k} == {
        "correct_handoff": 1, "correct_no_transfer": 1, "unneeded_handoff_after_user_request": 1,
        "unneeded_handoff_after_agent_offer": 1, "unneeded_handoff_unprompted": 1,
        "missed_handoff_request_refused": 1, "missed_handoff_not_asked": 1}
    assert {k: v.k for k, v in m.outcome_details_episode.items() if v.k} == {
        "correct_handoff": 2, "unneeded_handoff_after_agent_offer": 1, "unneeded_handoff_unprompted": 1,
        "missed_handoff_request_refused": 2, "missed_handoff_not_asked": 1}
    by_rule = {rule: (r.k, r.n) for rule, r in m.transfer_rate_by_episode_rule.items()}
    assert by_rule == {"user_request": (1, 2), "no_transfer": (2, 2), "gold_transfer_action": (1, 3)}
    assert (m.transfer_rate_by_rule["no_transfer"].k, m.transfer_rate_by_rule["no_transfer"].n) == (3, 4)
    assert {k: (v.k, v.n) for k, v in m.handoff_initiator.items()} == {"user": (1, 4), "agent_offer": (1, 4), "agent": (2, 4)}
    assert m.outcomes_episode["missed_handoff"].k == 3


# --- the user simulator's drift -------------------------------------------------------------------


@pytest.mark.parametrize("scenario, request_turn, expected", [
    ("You want a refund for the insurance. You are not happy with the service.", 2, True),
    ("If the agent refuses, ask to speak to a supervisor.", 2, False),
    ("You insist on being transferred to a human agent.", 3, False),
    ("Escalate if needed.", 1, False),
    ("You want a refund for the insurance.", None, False),  # no request: not off script
    (None, 2, None),  # no scenario known
])
def test_a_request_off_script_is_one_the_scenario_never_mentions(scenario, request_turn, expected):
    assert offscript(request_turn, scenario) is expected


def test_real_requests_are_off_script_against_the_pinned_scenarios():
    from handoff.rules import Label, RewardWeights, score_episode
    from handoff.rules.context import TaskContext
    from handoff.tasks import get_task

    sims = real_airline()
    ctx = TaskContext.for_task("airline", get_task("airline", "46"))
    s = score_episode(sims["46"], Label(should_transfer=False, rule="no_transfer"), ctx, RewardWeights.load())
    assert s.user_request_turn == 2 and s.user_request_offscript  # "You want to get a refund for the insurance ..."


# --- timeliness and hand-off quality --------------------------------------------------------------


def retail_handoff(summary: str, *, write: bool = False, request: bool = False) -> Trajectory:
    """Authenticate by email (returns the user id), browse two orders, name one, maybe write, transfer."""
    def call(i, name, **arguments):
        return [Msg(role="assistant", tool_calls=[Call(id=f"c{i}", name=name, arguments=arguments)]),
                Msg(role="tool", id=f"c{i}", content=arguments.pop("_result", "{}"))]
    messages = [Msg(role="assistant", content="Hi!"), Msg(role="user", content="My order #W111 never came.")]
    messages += call(1, "find_user_id_by_email", email="a@b.c", _result="ann_lee_1")  # agent turn 1
    messages += call(2, "get_order_details", order_id="#W111")  # 2
    messages += call(3, "get_order_details", order_id="#W999")  # 3: browsed, never named
    if write:
        messages += call(4, "cancel_pending_order", order_id="#W111", reason="ordered by mistake")
    messages.append(Msg(role="assistant", content="Order #W111 was delivered."))
    messages.append(Msg(role="user", content="Let me speak to a supervisor." if request else "It never came."))
    messages += call(5, "transfer_to_human_agents", summary=summary)
    return Trajectory(task_id="0", domain="retail", termination_reason="agent_stop", messages=messages)


def test_the_delay_counts_from_the_first_turn_or_the_request_and_writes_before_are_seen():
    from handoff.rules import Label, RewardWeights, score_episode
    from handoff.rules.context import TaskContext

    ctx, weights = TaskContext.for_task("retail", None), RewardWeights.load()
    should = Label(should_transfer=True, rule="gold_transfer_action")
    task = score_episode(retail_handoff("ann_lee_1: #W111 lost", write=True), should, ctx, weights)
    assert (task.handoff_turn, task.handoff_delay, task.write_before_handoff, task.summary_complete) == (6, 5, True, True)
    no = Label(should_transfer=False, rule="no_transfer")
    asked = score_episode(retail_handoff("W111 lost", request=True), no, ctx, weights)
    assert (asked.user_request_turn, asked.handoff_turn, asked.handoff_delay) == (5, 5, 0)
    assert asked.summary_complete is False and asked.write_before_handoff is False  # the user id is missing
    unneeded = score_episode(retail_handoff("ann_lee_1 #W111"), no, ctx, weights)
    assert unneeded.handoff_delay is None and unneeded.summary_complete  # #W999 was only browsed
    kept = score_episode(episode(("user", "Cancel it."), ("agent", "Done.")), no, TaskContext.for_task("airline", None), weights)
    assert (kept.handoff_delay, kept.write_before_handoff, kept.summary_complete) == (None, None, None)


def test_timeliness_and_quality_metrics():
    from handoff.rules.metrics import compute_metrics
    from tests.rules.test_reward_and_metrics import score

    scores = [
        score("a", True, True, handoff_turn=3, handoff_delay=2, write_before_handoff=True, summary_complete=True),
        score("b", True, False, handoff_turn=4, user_request_turn=4, handoff_initiator="user", handoff_delay=0,
              write_before_handoff=False, summary_complete=False),
        score("c", True, False, handoff_turn=1, handoff_initiator="agent", write_before_handoff=True,
              summary_complete=True),  # label 0 under both: no delay, not in the write share
        score("d", False, True),
    ]
    m = compute_metrics(scores)
    assert {k: (v.value, v.n) for k, v in m.handoff_delay_by_rule.items()} == {
        "any": (1.0, 2), "gold_transfer_action": (2.0, 1), "user_request": (0.0, 1)}
    assert (m.handoff_after_write.k, m.handoff_after_write.n) == (1, 2)
    assert (m.handoff_summary_complete.k, m.handoff_summary_complete.n) == (2, 3)
