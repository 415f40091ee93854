"""Proportions' intervals that respect tasks (handoff.rules.metrics.clustered_wilson): plain Wilson
with one trial per task, the cluster-robust (CR1) sandwich variance of a regression clustered by
task otherwise, and a coverage that Wilson over episodes lacks when trials of a task correlate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from handoff.rules.metrics import Z95, clustered_wilson, compute_metrics, wilson
from tests.rules.test_reward_and_metrics import score


def _reference(k: list[int], n: list[int]) -> tuple[float, float]:
    """CR1 variance of an intercept-only least-squares fit with errors clustered by task, then the
    Wilson interval at n_eff = p(1 - p) / variance as the roots of (p - q)^2 = z^2 q (1 - q) / n_eff."""
    y = np.concatenate([[1.0] * kj + [0.0] * (nj - kj) for kj, nj in zip(k, n)])
    groups = np.repeat(np.arange(len(n)), n)
    x = np.ones((len(y), 1))
    p = float(np.linalg.lstsq(x, y, rcond=None)[0][0])
    residual = y - p
    bread = np.linalg.inv(x.T @ x)
    meat = sum(np.outer(x[groups == g].T @ residual[groups == g], x[groups == g].T @ residual[groups == g])
               for g in range(len(n)))
    variance = float((bread @ meat @ bread)[0, 0]) * len(n) / (len(n) - 1)
    n_eff = min(len(y), p * (1 - p) / variance)
    a = 1 + Z95**2 / n_eff
    roots = np.roots([a, -(2 * p + Z95**2 / n_eff), p * p])
    return float(min(roots)), float(max(roots))


def test_one_trial_per_task_is_plain_wilson():
    assert clustered_wilson([1, 0, 1, 1, 0], [1, 1, 1, 1, 1]) == wilson(3, 5)
    assert clustered_wilson([], []) == wilson(0, 0)


def test_several_trials_get_the_cluster_robust_interval():
    k, n = [4, 0, 3, 4, 1, 2], [4, 4, 4, 4, 4, 3]
    got = clustered_wilson(k, n)
    assert (got.k, got.n, got.value) == (14, 23, pytest.approx(14 / 23))
    assert (got.lo, got.hi) == pytest.approx(_reference(k, n), abs=1e-9)
    plain = wilson(14, 23)
    assert got.lo < plain.lo and got.hi > plain.hi  # correlated trials: wider than Wilson over episodes
    independent = clustered_wilson([2, 2, 2, 2], [4, 4, 4, 4])  # no spread between tasks: no wider
    assert (independent.lo, independent.hi) == pytest.approx((wilson(8, 16).lo, wilson(8, 16).hi))
    none = clustered_wilson([0, 0, 0], [4, 4, 4])  # p = 0: the tasks are the observations
    assert none.lo == 0.0 and none.hi == pytest.approx(wilson(0, 3).hi)


def test_it_covers_where_wilson_over_episodes_does_not():
    """40 tasks of 8 trials, task success rates Beta(1, 1) (an ICC of 1/3): Wilson over the 320
    episodes misses the mean often; the clustered interval about as often as 95% allows."""
    rng = np.random.default_rng(11)
    runs, tasks, trials = 400, 40, 8
    clustered = plain = 0
    for _ in range(runs):
        rates = rng.beta(1, 1, tasks)
        k = rng.binomial(trials, rates)
        truth = 0.5
        got = clustered_wilson(list(k), [trials] * tasks)
        clustered += got.lo <= truth <= got.hi
        w = wilson(int(k.sum()), tasks * trials)
        plain += w.lo <= truth <= w.hi
    assert clustered / runs >= 0.92 and plain / runs < 0.8


def test_metrics_with_several_trials_use_it():
    scores = [score(str(t), trial % 2 == 0 if t < 3 else True, True, trial=trial)
              for t in range(6) for trial in range(4)]
    recall = compute_metrics(scores).handoff.recall
    assert recall.value == pytest.approx(18 / 24) and recall.n == 24
    assert (recall.lo, recall.hi) == pytest.approx(_reference([2, 2, 2, 4, 4, 4], [4] * 6))
    assert math.isclose(compute_metrics(scores[::4]).handoff.recall.lo, wilson(6, 6).lo)
