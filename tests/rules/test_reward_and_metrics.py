"""The reward (ADR-004) and the metrics (docs/metrics.md), against hand-computed values and
against tau2's own pass^k."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from tau2.data_model.simulation import RewardInfo, SimulationRun
from tau2.metrics.agent_metrics import compute_metrics as tau2_compute_metrics

from handoff.rules import (
    FormatEvent,
    FormatKind,
    Label,
    RewardWeights,
    RuleId,
    score_episode,
)
from handoff.rules.metrics import compute_metrics, paired_difference, wilson
from handoff.rules.score import EpisodeScore
from tests.support.episodes import (
    CANCEL,
    RETAIL_ORDER,
    Episode,
    authenticated_retail,
    context,
    tau2_results,
)

SHOULD = Label(should_transfer=True, rule="gold_transfer_action")
SHOULD_NOT = Label(should_transfer=False, rule="no_transfer")
DEFAULT = RewardWeights.load()


def transfer_episode(summary: str | None = "needs a human") -> Episode:
    ep = Episode("retail", "10")
    ep.user("I want a human agent.")
    ep.call("transfer_to_human_agents", **({"summary": summary} if summary else {}))
    ep.say("YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.")
    return ep


# --- weights ------------------------------------------------------------------------------------


def test_weights_load_by_name_and_path(tmp_path):
    assert RewardWeights.load("default") == DEFAULT
    path = tmp_path / "w.yaml"
    path.write_text(DEFAULT.model_dump_json())  # JSON is YAML
    assert RewardWeights.load(path) == DEFAULT
    assert RewardWeights.load("tau2_only").handoff.false_positive == 0.0


def test_weights_must_cover_every_rule_and_kind():
    data = DEFAULT.model_dump(mode="json")
    del data["violations"]["off_reference_write"]
    with pytest.raises(ValueError, match="no weight for off_reference_write"):
        RewardWeights.model_validate(data)


def test_weights_reject_unknown_keys_and_missing_files(tmp_path):
    data = DEFAULT.model_dump(mode="json") | {"bonus": 1.0}
    with pytest.raises(ValueError, match="bonus"):
        RewardWeights.model_validate(data)
    with pytest.raises(ValueError, match="cannot read reward weights"):
        RewardWeights.load(tmp_path / "missing.yaml")


# --- reward -------------------------------------------------------------------------------------


def test_correct_transfer_earns_the_true_positive_weight():
    s = score_episode(transfer_episode().trajectory(reward=1.0), SHOULD, context("retail", "10"), DEFAULT)
    assert s.transferred and s.violations == [] and s.format_errors == []
    assert s.reward == pytest.approx(1.0 * 1.0 + DEFAULT.handoff.true_positive)


def test_unneeded_transfer_costs_the_false_positive_weight():
    s = score_episode(transfer_episode().trajectory(reward=0.0), SHOULD_NOT, context("retail", "10"), DEFAULT)
    assert s.reward == pytest.approx(DEFAULT.handoff.false_positive)


def test_missed_transfer_costs_the_false_negative_weight():
    ep = Episode("retail", "10")
    ep.user("I want a human agent.")
    ep.say("I can help you myself.")
    s = score_episode(ep.trajectory(reward=0.0), SHOULD, context("retail", "10"), DEFAULT)
    assert not s.transferred and s.reward == pytest.approx(DEFAULT.handoff.false_negative)


def test_reward_and_label_agree_on_a_failed_transfer_call():
    # tau2 rejected the call (no summary), but the call is the decision: a true positive.
    ep = transfer_episode(summary=None)
    s = score_episode(ep.trajectory(reward=0.0), SHOULD, context("retail", "10"), DEFAULT)
    assert s.transferred and s.reward_terms.handoff == DEFAULT.handoff.true_positive


def test_penalties_are_weighted_counts():
    ep = Episode("retail", "88")
    ep.user("Cancel my order.")
    ep.call("cancel_pending_order", **CANCEL)  # no confirmation, no authentication
    s = score_episode(ep.trajectory(reward=1.0), SHOULD_NOT, context("retail", "88"), DEFAULT)
    assert {v.rule for v in s.violations} == {RuleId.WRITE_WITHOUT_CONFIRMATION, RuleId.WRITE_BEFORE_AUTHENTICATION}
    penalty = DEFAULT.violations[RuleId.WRITE_WITHOUT_CONFIRMATION] + DEFAULT.violations[RuleId.WRITE_BEFORE_AUTHENTICATION]
    assert s.reward_terms.penalty == pytest.approx(penalty)
    assert s.reward == pytest.approx(1.0 - penalty)


def test_penalty_is_capped():
    ep = authenticated_retail()
    for _ in range(8):
        ep.call("no_such_tool")
    s = score_episode(ep.trajectory(reward=0.0), SHOULD_NOT, context("retail", "88"), DEFAULT)
    assert s.reward_terms.format_errors == pytest.approx(8 * DEFAULT.format_errors[FormatKind.UNKNOWN_TOOL])
    assert s.reward_terms.penalty == DEFAULT.max_penalty and s.reward == -DEFAULT.max_penalty


def test_tau2_only_weights_give_the_tau2_reward():
    ep = Episode("retail", "88")
    ep.user("Cancel my order.")
    ep.call("cancel_pending_order", **CANCEL)
    s = score_episode(ep.trajectory(reward=1.0), SHOULD, context("retail", "88"), RewardWeights.load("tau2_only"))
    assert s.reward == 1.0


def test_unevaluated_episode_counts_tau2_reward_as_zero():
    s = score_episode(authenticated_retail().trajectory(reward=None), SHOULD_NOT, context("retail", "88"), DEFAULT)
    assert s.tau2_reward is None and s.reward == 0.0


def test_assistant_turns_skip_the_greeting_and_count_a_dropped_turn():
    ep = authenticated_retail()  # greeting, user, lookup call, tool result
    ep.say("Found you.")
    traj = ep.trajectory([FormatEvent(kind=FormatKind.TRUNCATED_GENERATION, turn=len(ep.messages))])
    s = score_episode(traj, SHOULD_NOT, context("retail", "88"), DEFAULT)
    assert s.n_assistant_turns == 3 and s.n_messages == len(ep.messages)


# --- metrics ------------------------------------------------------------------------------------


def score(task_id: str, transferred: bool, should: bool, tau2: float | None = 1.0, trial: int = 0, **extra) -> EpisodeScore:
    terms = {"task": tau2 or 0.0, "handoff": 0, "violations": 0, "format_errors": 0, "penalty": 0}
    fields = {
        "task_id": task_id, "domain": "retail", "trial": trial, "transferred": transferred,
        "label": SHOULD if should else SHOULD_NOT, "violations": [], "format_errors": [], "tau2_reward": tau2,
        "reward": tau2 or 0.0, "reward_terms": terms, "termination_reason": "user_stop",
        "n_assistant_turns": 4, "n_messages": 10,
    }  # fmt: skip
    return EpisodeScore.model_validate(fields | extra)


def wilson_roots(k: float, n: float, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson's interval as the roots of (p - q)^2 = z^2 q (1 - q) / n."""
    p = k / n
    roots = np.roots([1 + z * z / n, -(2 * p + z * z / n), p * p])
    return float(min(roots)), float(max(roots))


def test_wilson_matches_textbook_values():
    assert (wilson(5, 10).lo, wilson(5, 10).hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert (wilson(0, 10).lo, wilson(0, 10).hi) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson(0, 0).value is None


def test_confusion_matrix_and_rates():
    scores = [score("a", True, True), score("b", True, False), score("c", False, True), score("d", False, False), score("e", False, False)]
    m = compute_metrics(scores)
    assert m.handoff.confusion.model_dump() == {"tp": 1, "fp": 1, "tn": 2, "fn": 1}
    assert m.handoff.precision.value == 0.5 and m.handoff.recall.value == 0.5
    assert m.handoff.accuracy.value == pytest.approx(3 / 5) and m.handoff.accuracy.k == 3
    assert m.handoff.f1.value == pytest.approx(0.5)
    assert m.transfer_rate_by_rule["gold_transfer_action"].value == 0.5
    assert m.transfer_rate_by_rule["no_transfer"].value == pytest.approx(1 / 3)


def test_f1_interval_is_wilson_of_the_weighted_counts():
    """F1 = TP / (TP + (FP + FN) / 2): with one trial per task, Wilson at n = TP + (FP + FN) / 2."""
    scores = [score(str(i), i % 3 == 0, i % 2 == 0) for i in range(40)]
    f1 = compute_metrics(scores).handoff.f1
    cells = Counter((s.transferred, s.label.should_transfer) for s in scores)
    tp, errors = cells[True, True], cells[True, False] + cells[False, True]
    assert f1.value == pytest.approx(2 * tp / (2 * tp + errors)) and f1.n == tp + errors
    assert (f1.lo, f1.hi) == pytest.approx(wilson_roots(tp, tp + errors / 2))


def test_rates_per_rule_kind_and_termination():
    bad = score("a", False, False, violations=[{"rule": "multiple_actions_in_turn", "turn": 3}],
                format_errors=[{"kind": "unknown_tool", "turn": 3}, {"kind": "invalid_arguments", "turn": 3}],
                termination_reason="agent_error")  # fmt: skip
    m = compute_metrics([bad, score("b", False, False)])
    assert m.violation_rate["multiple_actions_in_turn"].value == 0.5 and m.violation_rate["any"].k == 1
    assert m.violation_rate["off_reference_write"].value == 0.0
    assert m.violation_rate["substantive"].k == 0  # the style rule alone is no substantive violation
    assert m.format_errors_per_100_turns["unknown_tool"].value == pytest.approx(100 / 8)
    assert m.format_errors_per_100_turns["any"].value == pytest.approx(100 / 8)  # both on one turn
    assert m.termination["agent_error"].k == 1 and m.termination["user_stop"].value == 0.5


def test_pass_hat_k_is_tau2s():
    rewards = {"0": [1, 1, 1], "1": [1, 0, 1], "2": [0, 0, 1], "3": [0, 0, 0]}
    sims = [
        SimulationRun(id=f"{t}-{i}", task_id=t, start_time="", end_time="", duration=0, termination_reason="user_stop",
                      reward_info=RewardInfo(reward=r), messages=[], trial=i)
        for t, rs in rewards.items() for i, r in enumerate(rs)
    ]  # fmt: skip
    expected = tau2_compute_metrics(tau2_results("retail", list(rewards), sims, trials=3))
    ours = compute_metrics([score(s.task_id, False, False, tau2=s.reward_info.reward, trial=s.trial) for s in sims])
    assert {k: v.value for k, v in ours.pass_hat_k.items()} == pytest.approx(expected.pass_hat_ks)
    assert ours.tau2_reward.value == pytest.approx(expected.avg_reward)
    assert ours.pass_hat_k[3].value == pytest.approx(0.25)  # only task "0" succeeds 3 times out of 3


def test_pass_hat_k_needs_enough_trials():
    with pytest.raises(ValueError, match="pass\\^2 needs at least 2 trials"):
        compute_metrics([score("a", False, False)], ks=[2])


def test_paired_difference_over_shared_tasks():
    a = [score(str(i), False, False, tau2=1.0, trial=t) for i in range(30) for t in range(2)]
    b = [score(str(i), False, False, tau2=float(i % 2), trial=t) for i in range(30) for t in range(2)]
    b.append(score("only-in-b", True, False))
    d = paired_difference(a, b)
    assert d.n_tasks == 30 and d.n_episodes_b == 60
    reward = d.metrics["tau2_reward"]
    assert reward.diff == pytest.approx(0.5) and 0 < reward.lo <= 0.5 <= reward.hi
    assert (reward.n_tasks, reward.n_varying_tasks, reward.n_episodes_a, reward.n_episodes_b) == (30, 15, 60, 60)  # B varies on its odd tasks
    same = paired_difference(a, a).metrics["tau2_reward"]  # every reward 1: no task varies, no interval
    assert (same.diff, same.lo, same.hi, same.too_few, same.p) == (0.0, None, None, True, None)


def test_metrics_from_real_scored_episodes():
    ep = authenticated_retail("88")
    ep.user("Yes.")
    ep.call("cancel_pending_order", **CANCEL)
    good = score_episode(ep.trajectory(reward=1.0), SHOULD_NOT, context("retail", "88"), DEFAULT)
    ep2 = Episode("retail", "88")
    ep2.user("Cancel it.")
    ep2.call("cancel_pending_order", order_id=RETAIL_ORDER, reason="no longer needed")
    bad = score_episode(ep2.trajectory(reward=0.0), SHOULD_NOT, context("retail", "88"), DEFAULT)
    m = compute_metrics([good, bad])
    assert m.n_tasks == 1 and m.tau2_reward.value == 0.5
    assert m.violation_rate["off_reference_write"].k == 1 and m.violation_rate["any"].value == 0.5
    assert m.violation_rate["substantive"].k == 1


def test_paired_difference_has_the_substantive_and_each_rules_rate():
    style = [{"rule": "multiple_actions_in_turn", "turn": 1}]
    a = [score(str(i), False, False, violations=style) for i in range(6)]
    b = [score(str(i), False, False, violations=style + [{"rule": "write_without_confirmation", "turn": 2}] * (i % 2))
         for i in range(6)]
    d = paired_difference(a, b).metrics
    assert d["violation_rate/multiple_actions_in_turn"].diff == 0.0 and d["violation_rate_any"].diff == 0.0
    assert d["violation_rate_substantive"].diff == pytest.approx(-0.5)
    assert d["violation_rate/write_without_confirmation"].b == pytest.approx(0.5)


def test_no_style_weights_are_the_default_without_the_style_rule():
    default, no_style = RewardWeights.load("default"), RewardWeights.load("no_style")
    assert no_style.violations[RuleId.MULTIPLE_ACTIONS_IN_TURN] == 0.0 < default.violations[RuleId.MULTIPLE_ACTIONS_IN_TURN]
    changed = {"violations": {**default.violations, RuleId.MULTIPLE_ACTIONS_IN_TURN: 0.0}}
    assert no_style == default.model_copy(update=changed)
