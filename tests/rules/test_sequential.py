"""The anytime-valid paired comparison (handoff.rules.sequential): its confidence sequence against
a plain transcription of Waudby-Smith & Ramdas's hedged capital, its coverage under repeated looks
with tasks of different means, and the paired, per-round observations it is fed."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from handoff.rules.sequential import (
    GRID,
    TRUNCATION,
    confidence_sequence,
    paired_observations,
    plug_in_bet,
    sequence_bounds,
)


def _reference_capital(rounds: list[list[float]], m: float, alpha: float) -> float:
    """max over rounds of (K+ + K-) / 2 at the candidate mean m of Y = (X + 1) / 2, loop by loop."""
    up = down = 1.0
    seen, most = [], 0.0
    for xs in rounds:
        ys = [(x + 1) / 2 for x in xs]
        lam = plug_in_bet(seen, len(seen) + len(ys), alpha)
        lam_up = min(lam, TRUNCATION / m) if m > 0 else lam
        lam_down = min(lam, TRUNCATION / (1 - m)) if m < 1 else lam
        for y in ys:
            up *= 1 + lam_up * (y - m)
            down *= 1 - lam_down * (y - m)
        seen += ys
        most = max(most, (up + down) / 2)
    return most


def test_the_sequence_is_the_set_where_the_hedged_capital_stays_below_one_over_alpha():
    rng = np.random.default_rng(3)
    rounds = [list(rng.choice([-1.0, 0.0, 0.0, 1.0, -0.5], size=20)) for _ in range(3)]
    cs = confidence_sequence(rounds, 0.9)
    grid = np.linspace(0, 1, GRID)
    kept = [2 * m - 1 for m in grid if _reference_capital(rounds, m, 0.1) < 10]
    step = 2 / (GRID - 1)
    assert cs.lo == pytest.approx(kept[0] - step) and cs.hi == pytest.approx(kept[-1] + step)
    assert cs.lo < cs.estimate < cs.hi and cs.n == 60
    assert cs.estimate == pytest.approx(np.mean([x for xs in rounds for x in xs]))


def test_more_rounds_narrow_it_and_a_clear_gap_excludes_zero():
    rng = np.random.default_rng(0)
    draws = rng.random((4, 100))
    rounds = [list((u < 0.6).astype(float) - (u < 0.8)) for u in draws]  # common random numbers: -0.2
    widths = [confidence_sequence(rounds[:r], 0.95) for r in range(1, 5)]
    assert all(b.hi - b.lo < a.hi - a.lo for a, b in itertools.pairwise(widths))
    assert widths[-1].hi < 0 < widths[0].hi - widths[0].lo
    same = confidence_sequence([[0.0] * 100] * 4, 0.95)
    assert same.lo < 0 < same.hi and same.hi - same.lo < 0.1  # identical checkpoints: never told apart


def test_it_covers_the_mean_over_tasks_at_every_round_at_once():
    """Tasks of different true differences (0.1 apart around the mean), 8 looks: the sequence
    misses the mean at some look in at most alpha of the runs (a fixed-n interval looked at 8 times
    misses far more often)."""
    rng = np.random.default_rng(7)
    n_tasks, n_rounds, runs, alpha = 30, 8, 100, 0.1
    p_b = rng.uniform(0.3, 0.8, n_tasks)
    p_a = np.clip(p_b + rng.uniform(-0.05, 0.15, n_tasks), 0, 1)
    truth = float(np.mean(p_a - p_b))
    missed = naive_missed = 0
    for _ in range(runs):
        rounds = [list((rng.random(n_tasks) < p_a).astype(float) - (rng.random(n_tasks) < p_b))
                  for _ in range(n_rounds)]
        missed += any(not (b.lo <= truth <= b.hi) for b in sequence_bounds(rounds, 1 - alpha))
        naive_missed += any(abs(np.mean(rounds[:r]) - truth) > 1.645 * np.std(rounds[:r]) / math.sqrt(r * n_tasks)
                            for r in range(1, n_rounds + 1))
    assert missed / runs <= alpha
    assert naive_missed > missed


def test_paired_observations_are_per_round_and_task_and_skip_a_round_in_progress():
    a = {("airline", t, trial): 1.0 for t in ("1", "2") for trial in range(5)}
    b = {("airline", t, trial): float(trial % 2) for t in ("1", "2") for trial in range(4)}
    a[("airline", "2", 1)] = None  # not counted by the metric: the task leaves that round
    assert paired_observations(a, b, 2) == [[0.5], [0.5, 0.5]]
    assert paired_observations(a, b, 3) == [[2 / 3]] and paired_observations(a, {}, 1) == []


def test_observations_outside_the_range_are_refused():
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        confidence_sequence([[1.5]], 0.95)


def test_compare_gives_the_anytime_valid_sequence_of_each_metric():
    from handoff.report.compare import sequences
    from tests.rules.test_reward_and_metrics import score

    a = [score(str(t), True, True, trial=k) for t in range(30) for k in range(3)]
    b = [score(str(t), t % 2 == 0, True, trial=k) for t in range(30) for k in range(3)]
    got = sequences(a, b)
    assert set(got) == {"handoff_accuracy", "handoff_recall", "tau2_success", "tau2_reward"}
    assert got["handoff_recall"].estimate == pytest.approx(0.5) and got["handoff_recall"].lo > 0
    assert got["tau2_success"].lo < 0 < got["tau2_success"].hi and got["handoff_accuracy"].n == 90
