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
    PRIOR_VARIANCE,
    confidence_sequence,
    decide,
    paired_observations,
    sequence_bounds,
)


def _reference_bets(seen: list[float], n_after: int, m: float, alpha: float, one_sided: bool) -> tuple[float, float]:
    """A round's (lambda+, lambda-) at m, written out: WSR's plug-in bet from the variance of the
    earlier observations and a prior counted as one, truncated at 0.75 / m and 0.75 / (1 - m)."""
    mean = (0.5 + sum(seen)) / (len(seen) + 1)
    variance = PRIOR_VARIANCE
    for y in seen:
        variance += (y - mean) ** 2
    variance /= len(seen) + 1
    lam = math.sqrt(2 * math.log((1 if one_sided else 2) / alpha) / (variance * n_after))
    return (min(lam, 0.75 / m) if m > 0 else lam), (min(lam, 0.75 / (1 - m)) if m < 1 else lam)


def _reference_capital(rounds: list[list[float]], m: float, alpha: float, one_sided: bool = False):
    """Over rounds, the most of (K+ + K-) / 2 at the candidate mean m of Y = (X + 1) / 2, or (one
    sided) the most of K+ and of K-, loop by loop."""
    up = down = 1.0
    seen, most, most_up, most_down = [], 0.0, 0.0, 0.0
    for xs in rounds:
        ys = [(x + 1) / 2 for x in xs]
        lam_up, lam_down = _reference_bets(seen, len(seen) + len(ys), m, alpha, one_sided)
        for y in ys:
            up *= 1 + lam_up * (y - m)
            down *= 1 - lam_down * (y - m)
        seen += ys
        most, most_up, most_down = max(most, (up + down) / 2), max(most_up, up), max(most_down, down)
    return (most_up, most_down) if one_sided else most


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


def test_one_sided_ends_are_where_k_plus_and_k_minus_alone_stay_below_one_over_alpha():
    """decide's sequences: lo where K+ alone, hi where K- alone stays below 1/alpha (the same
    loop-by-loop capital), each narrower than the hedged sequence's end at the same confidence."""
    rng = np.random.default_rng(5)
    rounds = [list(rng.choice([-1.0, 0.0, 0.0, 0.0, 1.0], size=25)) for _ in range(3)]
    cs = confidence_sequence(rounds, 0.95, one_sided=True)
    grid = np.linspace(0, 1, GRID)
    capitals = [_reference_capital(rounds, m, 0.05, one_sided=True) for m in grid]
    low = [2 * m - 1 for m, (up, _) in zip(grid, capitals, strict=True) if up < 20]
    high = [2 * m - 1 for m, (_, down) in zip(grid, capitals, strict=True) if down < 20]
    step = 2 / (GRID - 1)
    assert cs.lo == pytest.approx(low[0] - step) and cs.hi == pytest.approx(high[-1] + step)
    hedged = confidence_sequence(rounds, 0.95)
    assert hedged.lo < cs.lo < cs.estimate < cs.hi < hedged.hi


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
    misses the mean at some look in at most alpha of the runs, and so does each end of the one-sided
    one (a fixed-n interval looked at 8 times misses far more often)."""
    rng = np.random.default_rng(7)
    n_tasks, n_rounds, runs, alpha = 30, 8, 100, 0.1
    p_b = rng.uniform(0.3, 0.8, n_tasks)
    p_a = np.clip(p_b + rng.uniform(-0.05, 0.15, n_tasks), 0, 1)
    truth = float(np.mean(p_a - p_b))
    missed = naive_missed = low_missed = high_missed = 0
    for _ in range(runs):
        rounds = [list((rng.random(n_tasks) < p_a).astype(float) - (rng.random(n_tasks) < p_b))
                  for _ in range(n_rounds)]
        missed += any(not (b.lo <= truth <= b.hi) for b in sequence_bounds(rounds, 1 - alpha))
        one_sided = sequence_bounds(rounds, 1 - alpha, one_sided=True)
        low_missed += any(truth < b.lo for b in one_sided)
        high_missed += any(truth > b.hi for b in one_sided)
        naive_missed += any(abs(np.mean(rounds[:r]) - truth) > 1.645 * np.std(rounds[:r]) / math.sqrt(r * n_tasks)
                            for r in range(1, n_rounds + 1))
    assert missed / runs <= alpha and low_missed / runs <= alpha and high_missed / runs <= alpha
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


def _known_answer(seed: int, accuracy: dict[str, float], trials: int) -> dict:
    """The known-answer agents' hand-off accuracy (engine.script.accuracy: right iff the episode
    seed's draw falls below the checkpoint's accuracy, one draw per episode for all) over 128 tasks."""
    from handoff.engine.scripted import seed_draw
    from handoff.sweep.plan import episode_seed

    draws = {("retail", str(t), k): seed_draw(episode_seed(seed, "retail", str(t), k))
             for t in range(128) for k in range(trials)}
    return {c: {key: float(u < p) for key, u in draws.items()} for c, p in accuracy.items()}


@pytest.mark.parametrize("seed", [2, 12, 34])
def test_the_done_when_checkpoints_are_decided_within_a_quarter_of_the_budget(seed):
    """Accuracies 0.55, 0.70, 0.85, 0.85, margin 0.05, confidence 0.95, rounds of 1 trial (of
    max_trials 8): after 2 rounds the 0.55 and 0.70 ones are worse and neither 0.85 is, the two
    0.85s (the same episodes) never told apart. In these seeds the hedged sequence with the bet's
    prior variance 1/4 (the one before) left 0.70 undecided after round 2: a third round, 3/8 > 1/3."""
    accuracy = {"c055": 0.55, "c070": 0.70, "c085a": 0.85, "c085b": 0.85}
    values = _known_answer(seed, accuracy, 2)
    first = decide({c: {k: v for k, v in vs.items() if k[2] == 0} for c, vs in values.items()}, {}, 1,
                   0.05, 0.95, 1, 8)
    second = decide(values, first, 2, 0.05, 0.95, 1, 8)
    assert {c: v.status for c, v in second.items()} == {"c055": "worse", "c070": "worse", "c085a": "best",
                                                       "c085b": "tied"}
    assert second["c085b"].vs_best.lo <= 0 <= second["c085b"].vs_best.hi


def test_two_identical_checkpoints_are_never_told_apart():
    """The same episodes (the known-answer double at one accuracy): every paired difference is 0, so
    the capital at 0 stays exactly 1 and 0 never leaves the sequence, hedged or one-sided, at any
    round; with margin 0 neither is ever decided."""
    values = _known_answer(0, {"a": 0.85, "b": 0.85}, 8)
    pairs = paired_observations(values["a"], values["b"], 1)
    assert len(pairs) == 8 and all(x == 0 for xs in pairs for x in xs)
    for one_sided in (False, True):
        for confidence in (0.5, 0.95):
            assert all(b.lo < 0 < b.hi for b in sequence_bounds(pairs, confidence, one_sided))
    verdicts = {}
    for r in range(1, 9):
        verdicts = decide({c: {k: v for k, v in vs.items() if k[2] < r} for c, vs in values.items()}, verdicts, r,
                          0.0, 0.95, 1, 8)
        assert [v.status for v in verdicts.values()] == ["best", "undecided"]
