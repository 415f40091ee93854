"""Outcome classes and the hand-off turn (handoff.rules.outcome, docs/metrics.md), and their
metrics: the share of each class and the median hand-off turn per label rule with its interval."""

from __future__ import annotations

import pytest

from handoff.rules import Outcome, RewardWeights, handoff_turn, outcome_of, score_episode
from handoff.rules.metrics import compute_metrics, median_interval
from tests.rules.test_reward_and_metrics import SHOULD, SHOULD_NOT, score
from tests.support.episodes import Episode, authenticated_retail, context


@pytest.mark.parametrize("transferred, should, expected", [
    (True, True, Outcome.CORRECT_HANDOFF), (False, True, Outcome.MISSED_HANDOFF),
    (True, False, Outcome.UNNEEDED_HANDOFF), (False, False, Outcome.CORRECT_NO_TRANSFER)])
def test_every_cell_has_one_class(transferred, should, expected):
    outcome = outcome_of(transferred, should)
    assert outcome is expected
    assert (outcome.transferred, outcome.should_transfer, outcome.correct) == (transferred, should, transferred == should)


def test_handoff_turn_counts_agent_turns_after_the_first_user_message():
    ep = authenticated_retail()  # greeting, user, lookup (agent turn 1), result
    ep.say("Found you. What else?")  # agent turn 2
    ep.user("I want a human.")
    ep.call("transfer_to_human_agents", summary="wants a human")  # agent turn 3
    ep.say("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.")
    s = score_episode(ep.trajectory(), SHOULD, context("retail", "88"), RewardWeights.load())
    assert s.handoff_turn == 3 and s.outcome is Outcome.CORRECT_HANDOFF


def test_first_transfer_counts_and_no_transfer_has_no_turn():
    ep = Episode("retail", "10")
    ep.user("A human, please.")
    ep.call("transfer_to_human_agents", summary="one")
    ep.call("transfer_to_human_agents", summary="again")
    assert handoff_turn(ep.trajectory()) == 1
    quiet = authenticated_retail()
    quiet.say("Done.")
    s = score_episode(quiet.trajectory(), SHOULD, context("retail", "88"), RewardWeights.load())
    assert s.handoff_turn is None and s.outcome is Outcome.MISSED_HANDOFF


def test_median_interval_uses_exact_binomial_ranks():
    ten = median_interval(range(1, 11))  # P(Bin(10, 1/2) <= 1) = 1.1% <= 2.5% < P(<= 2) = 5.5%: ranks 2 and 9
    assert (ten.value, ten.lo, ten.hi, ten.n) == (5.5, 2.0, 9.0, 10)
    hundred = median_interval(range(100))  # textbook ranks 40 and 61
    assert (hundred.lo, hundred.hi) == (39.0, 60.0)
    assert (median_interval([4, 1, 9]).lo, median_interval([4, 1, 9]).hi) == (1.0, 9.0)  # n < 6: the sample's range
    assert median_interval([]).value is None


def test_outcome_shares_and_handoff_turn_per_rule():
    scores = [score("a", True, True, handoff_turn=2), score("b", True, True, handoff_turn=4),
              score("c", False, True), score("d", True, False, handoff_turn=1), score("e", False, False)]
    m = compute_metrics(scores)
    assert {k: v.k for k, v in m.outcomes.items()} == {
        "correct_handoff": 2, "missed_handoff": 1, "unneeded_handoff": 1, "correct_no_transfer": 1}
    assert m.outcomes["correct_handoff"].value == pytest.approx(0.4)
    assert m.handoff_turn_by_rule["gold_transfer_action"].value == 3.0  # the missed one has no turn
    assert m.handoff_turn_by_rule["gold_transfer_action"].n == 2
    assert m.handoff_turn_by_rule["no_transfer"].value == 1.0
    assert m.handoff_turn_by_rule["any"].n == 3 and m.handoff_turn_by_rule["any"].value == 2.0
    assert SHOULD_NOT.rule in m.handoff_turn_by_rule


def test_no_transfer_no_handoff_turn_metric():
    assert compute_metrics([score("a", False, True), score("b", False, False)]).handoff_turn_by_rule == {}
