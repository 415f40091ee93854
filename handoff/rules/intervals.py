"""Small-sample intervals over tasks (docs/metrics.md, "Intervals" and "Paired comparison").

A metric is a ratio of per-task sums, R = sum_j num_j / sum_j den_j (a mean: num the values, den the
episodes; a proportion: num the hits; precision: num the true transfers, den the transfers). Its
variance is the cluster-robust (CR1) one of the linearised ratio, J / (J - 1) sum_j z_j^2 with
z_j = (num_j - R den_j) / sum(den), over the J tasks that count an episode; the interval is Student's
t on J - 1 degrees of freedom (scipy.stats.t). A paired comparison linearises both sides on the same
tasks and takes the per-task differences z_aj - z_bj: a paired t interval on J - 1 degrees of freedom
(with one trial per task and a mean, exactly the textbook paired t test on per-task means).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
MIN_TASKS = 8  # a paired comparison of fewer tasks prints "too few tasks" (docs/metrics.md)
MIN_VARYING_TASKS = 2  # nor one resting on fewer tasks on which the two sides differ
PRIOR_ICC = 0.5  # tau2 episodes' intra-task correlation on published trajectories: 0.4-0.5
PRIOR_WEIGHT = 8.0  # outcomes of the rarer kind that weigh as much as the prior ICC


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided quantile of Student's t on `df` degrees of freedom."""
    return float(stats.t.ppf(0.5 + confidence / 2, df))


def linearised(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Each task's influence on sum(num) / sum(den): (num_j - R den_j) / sum(den)."""
    total = den.sum()
    return (num - num.sum() / total * den) / total


def cr1_variance(z: np.ndarray) -> float:
    """J / (J - 1) sum z_j^2 over J >= 2 tasks' centred influences."""
    tasks = len(z)
    return tasks / (tasks - 1) * float(np.square(z).sum())


def design_effect(k: np.ndarray, n: np.ndarray) -> float:
    """The design effect 1 + (m - 1) rho of a share sum(k) / sum(n) clustered in tasks, m = sum(n^2) /
    sum(n) the size-weighted trials per task. rho is the data's intra-task correlation,
    (v / binomial - 1) / (m - 1) (v the CR1 variance, at least 0), shrunk toward PRIOR_ICC with
    the weight of PRIOR_WEIGHT outcomes against the E = min(successes, failures) the data hold: with
    few of the rarer outcome the correlation cannot be seen (0 successes have no spread; 1 cannot
    show a cluster), so the prior decides; with many, the data. Continuous in the counts, and the
    interval grows with them (tests/rules/test_clustered_intervals.py)."""
    total_k, total_n = float(k.sum()), float(n.sum())
    size = float(np.square(n).sum()) / total_n
    p = total_k / total_n
    binomial = p * (1 - p) / total_n
    observed = max(0.0, (cr1_variance(linearised(k, n)) / binomial - 1) / (size - 1)) if binomial else 0.0
    rarer = min(total_k, total_n - total_k)
    icc = (rarer * observed + PRIOR_WEIGHT * PRIOR_ICC) / (rarer + PRIOR_WEIGHT)
    return 1 + (size - 1) * icc


def t_interval(estimate: float, variance: float, tasks: int) -> tuple[float, float, float]:
    """(lo, hi, two-sided p of estimate = 0) of a t interval on tasks - 1 degrees of freedom."""
    se = math.sqrt(variance)
    half = t_quantile(tasks - 1) * se
    if se == 0:
        return estimate, estimate, 1.0 if estimate == 0 else 0.0
    return estimate - half, estimate + half, float(2 * stats.t.sf(abs(estimate) / se, tasks - 1))


def ratio_interval(num: np.ndarray, den: np.ndarray) -> tuple[float | None, float | None]:
    """The t interval of sum(num) / sum(den) over the tasks with den > 0 (None with fewer than two)."""
    counted = den > 0
    if counted.sum() < 2:
        return None, None
    num, den = num[counted], den[counted]
    lo, hi, _ = t_interval(float(num.sum() / den.sum()), cr1_variance(linearised(num, den)), len(num))
    return lo, hi


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (family-wise error at most the level a p is compared with)."""
    ordered = sorted(p_values, key=lambda name: (p_values[name], name))
    adjusted, running = {}, 0.0
    for rank, name in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p_values[name]))
        adjusted[name] = running
    return adjusted


def sign_test(better_a: int, better_b: int) -> float:
    """Two-sided exact sign test of the tasks better in A against those better in B (1.0 with none)."""
    total = better_a + better_b
    return float(stats.binomtest(better_a, total, 0.5).pvalue) if total else 1.0
