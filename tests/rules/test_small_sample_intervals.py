"""Intervals over tasks at small n (handoff.rules.intervals, issue 46): the paired comparison is the
paired t test on per-task differences (scipy's ttest_rel where a task has one trial), ratios are
linearised per task, F1 and bounded means get clustered Wilson, and no interval rests on one task."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from handoff.rules.intervals import MIN_TASKS, holm, ratio_interval, sign_test
from handoff.rules.metrics import compute_metrics, paired_difference, paired_interval
from tests.rules.test_reward_and_metrics import score


def test_paired_interval_is_scipys_paired_t_test():
    rng = np.random.default_rng(3)
    a, b = rng.random(12), rng.random(12)
    ones = np.ones(12)
    got = paired_interval(a, ones, b, ones, varying=12)
    reference = stats.ttest_rel(a, b)
    assert (got.lo, got.hi) == pytest.approx(tuple(reference.confidence_interval(0.95)))
    assert got.p == pytest.approx(reference.pvalue) and got.diff == pytest.approx(a.mean() - b.mean())


def test_equal_trials_pair_the_task_means():
    """With the same trials in every task the linearised difference of a share is the difference of
    the tasks' shares: the paired t test on them."""
    hits_a, hits_b, trials = np.array([3, 1, 4, 0, 2, 4, 1, 3, 2]), np.array([1, 1, 2, 0, 3, 2, 0, 1, 2]), np.full(9, 4)
    got = paired_interval(hits_a, trials, hits_b, trials, varying=9)
    reference = stats.ttest_rel(hits_a / 4, hits_b / 4).confidence_interval(0.95)
    assert (got.lo, got.hi) == pytest.approx(tuple(reference))


def test_too_few_tasks_or_varying_tasks_give_no_interval():
    ones = np.ones(MIN_TASKS - 1)
    few = paired_interval(ones, ones, np.zeros(MIN_TASKS - 1), ones, varying=MIN_TASKS - 1)
    assert (few.diff, few.lo, few.hi, few.p, few.too_few, few.n_tasks) == (1.0, None, None, None, True, MIN_TASKS - 1)
    ones = np.ones(20)
    flat = paired_interval(np.r_[1.0, np.zeros(19)], ones, np.zeros(20), ones, varying=1)  # one task differs
    assert flat.too_few and flat.lo is None
    enough = paired_interval(np.r_[1.0, 1.0, np.zeros(18)], ones, np.zeros(20), ones, varying=2)
    assert not enough.too_few and enough.lo < 0 < enough.hi  # two of twenty tasks: no difference shown


def test_a_ratio_counts_only_tasks_with_a_denominator():
    """Precision over the tasks that transferred: a task without a transfer on either side is not
    one of its tasks, and one with a transfer on one side only is."""
    a = [score(str(i), i < 9, i % 2 == 0) for i in range(30)]
    b = [score(str(i), i < 7, i % 3 == 0) for i in range(30)]
    precision = paired_difference(a, b).metrics["handoff_precision"]
    assert (precision.n_tasks, precision.n_episodes_a, precision.n_episodes_b) == (9, 9, 7)
    assert not precision.too_few and precision.lo < precision.diff < precision.hi


def test_a_mean_is_scipys_t_interval_over_tasks():
    values = np.array([3.0, 5.0, 4.0, 8.0, 6.0, 5.0])
    lo, hi = ratio_interval(values, np.ones(6))
    reference = stats.t.interval(0.95, 5, loc=values.mean(), scale=stats.sem(values))
    assert (lo, hi) == pytest.approx(reference)
    assert ratio_interval(np.array([3.0]), np.array([1.0])) == (None, None)


def test_all_correct_is_not_a_zero_width_certainty():
    """Issue 46: 80 of 80 correct gave F1 [1, 1]. 20 tasks x 4 trials, every hand-off right: F1,
    accuracy and tau2 reward are 1 with an interval below 1; with no transfer and no need of one, F1
    counts nothing and is n/a."""
    right = [score(str(t), t % 2 == 0, t % 2 == 0, trial=i) for t in range(20) for i in range(4)]
    m = compute_metrics(right)
    for interval in (m.handoff.f1, m.handoff.accuracy, m.tau2_reward):
        assert interval.value == 1.0 and interval.lo < 1.0 == interval.hi and interval.tasks >= 10
    assert m.handoff.f1.n == 40  # the true transfers it counts
    none_needed = compute_metrics([score(str(t), False, False, trial=i) for t in range(20) for i in range(4)])
    assert (none_needed.handoff.f1.value, none_needed.handoff.f1.lo, none_needed.handoff.f1.hi) == (None, None, None)


def test_one_task_gives_a_value_without_an_interval():
    m = compute_metrics([score("only", True, True, tau2=float(i % 2), trial=i) for i in range(8)])
    for interval in (m.tau2_reward, m.reward, m.handoff.recall, m.assistant_turns):
        assert interval.value is not None and (interval.lo, interval.hi, interval.tasks) == (None, None, 1)


def test_holm_and_the_sign_test_match_textbook_values():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert adjusted == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})
    assert sign_test(9, 1) == pytest.approx(2 * 11 / 1024)  # P(X <= 1) + P(X >= 9), X ~ Bin(10, 1/2)
    assert sign_test(0, 0) == 1.0


def test_precision_under_task_labels_gets_an_interval():
    """A task's label is the same for both sides, so its transfers are all right or all wrong: the
    tasks that count are those where A and B differ (here the 10 where only B transferred, wrongly)."""
    a = [score(str(i), i % 2 == 0, i % 2 == 0, trial=t) for i in range(20) for t in range(2)]
    b = [score(str(i), True, i % 2 == 0, trial=t) for i in range(20) for t in range(2)]
    precision = paired_difference(a, b).metrics["handoff_precision"]
    assert (precision.a, precision.b, precision.n_tasks, precision.n_varying_tasks) == (1.0, 0.5, 20, 10)
    assert not precision.too_few and 0 < precision.lo < 0.5 < precision.hi
