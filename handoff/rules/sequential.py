"""Anytime-valid comparison of two checkpoints: a confidence sequence (CS) for the paired,
task-clustered difference of a bounded per-episode metric (docs/metrics.md, "Anytime-valid paired
comparison").

Observations come in rounds: in each, one per task, the task's mean paired difference over the
round's trials (X in [-1, 1] for a metric in [0, 1]; Y = (X + 1) / 2 in [0, 1] below), tasks in a
fixed order. The CS is the hedged-capital betting CS of Waudby-Smith & Ramdas (2024), "Estimating
means of bounded random variables by betting", JRSS B 86(1): for each candidate mean m
two gamblers bet on Y_i > m and on Y_i < m,
    K+_t(m) = prod_i (1 + lambda+_i(m) (Y_i - m)),   K-_t(m) = prod_i (1 - lambda-_i(m) (Y_i - m)),
with bets fixed before they see Y_i, and m leaves the CS once (K+ + K-) / 2 reaches 1 / alpha.
Here a round's bet is one lambda per m, fixed before the round. The tasks' own means mu_i differ
(tau2's episodes correlate within a task), but over a complete round, with m the mean over tasks
of their true differences, E prod (1 + lambda (Y_i - m)) = prod (1 + lambda (mu_i - m)) <=
exp(lambda sum (mu_i - m)) = 1: at every round's end the hedged capital of the true m is still a
nonnegative supermartingale, and by Ville's inequality it never reaches 1 / alpha with probability
>= 1 - alpha. So the CS covers that mean after every round at once: it is valid however often it is
looked at, and its running intersection over rounds too. The estimand is the difference on these
tasks (each weighted equally), not on tasks the benchmark lacks.

A round's bet is WSR's predictable plug-in for the observations there will be at its end, from the
variance of the rounds before (a prior variance PRIOR_VARIANCE = 1/16 counted as one observation),
truncated as WSR do: lambda+-(m) = min(sqrt(2 log(2 / alpha) / (sigmahat^2 n)), 0.75 / m or
0.75 / (1 - m)). Any bet fixed before the round keeps the CS valid; the prior only sets how much
round 1, which has no variance to go by, stakes (1/4, the largest a [0, 1] variable can have, left
a clear gap undecided after two rounds in 5% of sweeps; docs/benchmarks.md). Candidate means are a
grid of GRID points; the CS is widened to the next point outside on either side.

One-sided (`one_sided=True`, what the adaptive sweep decides with): K+ and K- are not averaged;
each end is a one-sided bound at `confidence` on its own (lo: the lowest m K+ has not excluded,
K+_t(m) < 1 / alpha at every round; hi: the same with K-), with log(1 / alpha) in the bet. Each
end misses with probability <= alpha by Ville's inequality; the interval as a whole holds with
probability >= 1 - 2 alpha.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel
from tau2.metrics.agent_metrics import is_successful

from handoff.rules.score import EpisodeScore

TRUNCATION = 0.75
PRIOR_VARIANCE = 1 / 16
GRID = 4001
EpisodeKey = tuple[str, str, int]  # (domain, task id, trial)
Value = Callable[[EpisodeScore], float | None]  # an episode's metric in [0, 1]; None: not counted

COUNTED_BY_LABEL: dict[str, Callable[[bool], bool]] = {"handoff_recall": lambda should_transfer: should_transfer}
"""The metrics that count only the episodes of some task labels: which (by the label's should_transfer).
The others count every episode."""

METRICS: dict[str, Value] = {
    "handoff_accuracy": lambda s: float(s.correct_handoff),
    "handoff_recall": lambda s: float(s.transferred) if COUNTED_BY_LABEL["handoff_recall"](s.label.should_transfer)
    else None,
    "tau2_success": lambda s: float(is_successful(s.tau2_reward or 0.0)),
    "tau2_reward": lambda s: s.tau2_reward or 0.0,
}
"""The metrics a CS can compare: means of a per-episode value in [0, 1]. (F1 is no such mean, and
the ADR-004 reward is not bounded by construction.)"""


class SequenceBound(BaseModel):
    """A CS's value at the last observation: `estimate` (the mean observation), `lo`, `hi`; `n`
    observations. lo/hi are the range's ends when n is 0. `crossed`: the ends crossed (every mean
    excluded, a (1 - confidence) event); lo and hi are then the estimate, and nothing is decided on them."""

    estimate: float | None
    lo: float
    hi: float
    n: int
    crossed: bool = False


def confidence_sequence(rounds: Sequence[Sequence[float]], confidence: float,
                        one_sided: bool = False) -> SequenceBound:
    """The CS (module docstring) for the mean paired difference after the last round, from the
    observations (each in [-1, 1]) of every round in order: the running intersection of its value
    after each round. `one_sided`: each end is a one-sided bound at `confidence` (lo from K+ alone,
    hi from K- alone; the interval as a whole at 2 confidence - 1)."""
    if not rounds:
        return SequenceBound(estimate=None, lo=-1, hi=1, n=0)
    return sequence_bounds(rounds, confidence, one_sided)[-1]


def sequence_bounds(rounds: Sequence[Sequence[float]], confidence: float,
                    one_sided: bool = False) -> list[SequenceBound]:
    """The CS after each round."""
    if any(abs(x) > 1 + 1e-12 for xs in rounds for x in xs):
        raise ValueError("paired differences must lie in [-1, 1]")
    alpha = 1 - confidence
    threshold = math.log(1 / alpha)
    m = np.linspace(0.0, 1.0, GRID)
    log_up, log_down = np.zeros(GRID), np.zeros(GRID)
    below, above = np.ones(GRID, dtype=bool), np.ones(GRID, dtype=bool)  # not excluded from below / above
    seen: list[float] = []
    out = []
    for xs in rounds:
        ys = (np.asarray(xs, dtype=float) + 1) / 2
        lam = plug_in_bet(seen, len(seen) + len(ys), alpha, one_sided)
        with np.errstate(divide="ignore"):
            up, down = np.minimum(lam, TRUNCATION / m), np.minimum(lam, TRUNCATION / (1 - m))
        deviation = ys[:, None] - m[None, :]
        log_up += np.log1p(up * deviation).sum(axis=0)
        log_down += np.log1p(-down * deviation).sum(axis=0)
        kept_below, kept_above = not_excluded(log_up, log_down, threshold, one_sided)
        below, above = below & kept_below, above & kept_above
        seen += ys.tolist()
        out.append(_bound(m, below, above, seen))
    return out


def not_excluded(log_up: np.ndarray, log_down: np.ndarray, threshold: float,
                 one_sided: bool) -> tuple[np.ndarray, np.ndarray]:
    """The means that the capitals (log) have not excluded from below and from above: each one-sided
    end on its own capital, or both on the hedged capital (the mean of the two)."""
    if one_sided:
        return log_up < threshold, log_down < threshold
    hedged = np.logaddexp(log_up, log_down) - math.log(2) < threshold
    return hedged, hedged


def _bound(m: np.ndarray, below: np.ndarray, above: np.ndarray, seen: list[float]) -> SequenceBound:
    """lo: the lowest m that K+ (or the hedged capital) has not excluded, widened one grid point
    outward; hi: the highest that K- has not."""
    if not seen:
        return SequenceBound(estimate=None, lo=-1.0, hi=1.0, n=0)
    mean = float(np.mean(seen))
    low, high = np.nonzero(below)[0], np.nonzero(above)[0]
    if not low.size or not high.size or low[0] > high[-1]:  # empty: a (1 - confidence) event; say so
        return SequenceBound(estimate=2 * mean - 1, lo=2 * mean - 1, hi=2 * mean - 1, n=len(seen), crossed=True)
    lo, hi = m[max(low[0] - 1, 0)], m[min(high[-1] + 1, GRID - 1)]
    return SequenceBound(estimate=2 * mean - 1, lo=2 * lo - 1, hi=2 * hi - 1, n=len(seen))


def plug_in_bet(seen: Sequence[float], n_after: int, alpha: float, one_sided: bool = False) -> float:
    """A round's lambda before truncation, from the observations (in [0, 1]) before it, for
    `n_after` observations at its end: WSR's plug-in sqrt(2 log(2 / alpha) / (variance n)), or
    sqrt(2 log(1 / alpha) / (variance n)) for one-sided bounds."""
    variance = _variance(seen)
    return math.sqrt(2 * math.log((1 if one_sided else 2) / alpha) / (variance * max(n_after, 1)))


def _variance(seen: Sequence[float]) -> float:
    """The observations' variance, with a prior (mean 1/2, variance PRIOR_VARIANCE) counted as one."""
    mean = (0.5 + sum(seen)) / (1 + len(seen))
    return (PRIOR_VARIANCE + sum((y - mean) ** 2 for y in seen)) / (1 + len(seen))


def paired_observations(a: Mapping[EpisodeKey, float | None], b: Mapping[EpisodeKey, float | None],
                        round_trials: int, max_trials: int = 1 << 30) -> list[list[float]]:
    """A - B per round and task: the mean difference over the round's trials of a task, tasks in
    (domain, task id) order, for the rounds whose trials both checkpoints have for every task (a
    round in progress is left out). Episodes valued None (not counted by the metric, e.g. recall's
    negative tasks) leave their task out of that round. The last round may be cut at max_trials."""
    tasks = sorted({(d, t) for d, t, _ in a} & {(d, t) for d, t, _ in b})
    rounds: list[list[float]] = []
    for first in range(0, max_trials, round_trials):
        trials = range(first, min(first + round_trials, max_trials))
        keys = [[(d, t, trial) for trial in trials] for d, t in tasks]
        if not tasks or not all(k in a and k in b for task in keys for k in task):
            return rounds
        rounds.append([sum(a[k] - b[k] for k in task) / len(trials) for task in keys
                       if all(a[k] is not None and b[k] is not None for k in task)])
    return rounds


Status = Literal["best", "tied", "worse", "undecided"]


class Verdict(BaseModel):
    """A checkpoint's standing against the best after a round (handoff.sweep.adaptive): `best`
    (the highest mean of those still running), `tied` (its CS against the best lies above -margin:
    within the margin of the best, or better), `worse` (its CS lies below -margin), `undecided`
    (neither, or the CS's ends crossed). `vs_best` is that CS (None for the best) and `against` the
    checkpoint that was the best when it was measured; `round` (1-based) and `episodes` are those
    at the decision, or so far while it is undecided or the best."""

    status: Status
    mean: float | None
    vs_best: SequenceBound | None = None
    against: str | None = None
    round: int
    episodes: int


PairConfidence = Callable[[str, str], float]
"""(checkpoint, the best it is compared with) -> the confidence of that comparison's one-sided ends."""


def bonferroni(checkpoints: int, confidence: float) -> PairConfidence:
    """A fixed set's split: 1 - alpha / (checkpoints - 1) for every pair."""
    per_pair = 1 - (1 - confidence) / max(checkpoints - 1, 1)
    return lambda checkpoint, best: per_pair


def spending_weight(rank: int) -> float:
    """The share of alpha of a checkpoint's `rank`-th other checkpoint (1-based, in arrival order):
    6 / (pi^2 rank^2), which sums to 1 over rank = 1, 2, ... (Basel)."""
    return 6 / (math.pi ** 2 * rank * rank)


def arrival_spending(arrival: Sequence[str], confidence: float) -> PairConfidence:
    """A set that grows (docs/metrics.md, "A set that grows"): checkpoint c compared with b at
    1 - alpha spending_weight(rank), rank b's place among the checkpoints other than c in arrival
    order. Fixed by the arrival order alone (never by outcomes), and c's shares over every other
    checkpoint there is or will be sum to at most alpha, however many arrive."""
    index = {name: i for i, name in enumerate(arrival, 1)}

    def pair(checkpoint: str, best: str) -> float:
        i, j = index[checkpoint], index[best]
        return 1 - (1 - confidence) * spending_weight(j if j < i else j - 1)
    return pair


def decide(values: Mapping[str, Mapping[EpisodeKey, float | None]], previous: Mapping[str, Verdict],
           round_: int, margin: float, confidence: float, round_trials: int,
           max_trials: int = 1 << 30, pair_confidence: PairConfidence | None = None) -> dict[str, Verdict]:
    """Every checkpoint's Verdict after round `round_` (1-based) from its episodes' values
    (episode_values). Those decided tied or worse before keep their verdict; of the others the one
    of highest mean is the best (the first in `values` on a tie), and each other is compared with
    it. Each comparison's CS is one-sided at each end, at confidence 1 - (1 - confidence) /
    (checkpoints - 1) (Bonferroni over the others): `worse` rests on its upper end alone and `tied`
    on its lower end alone, and for a given pair only one of the two can be false (the true
    difference is either below -margin or not), so a checkpoint is falsely decided against any
    best with probability at most 1 - confidence. `pair_confidence` replaces the Bonferroni split
    (arrival_spending: a set that grows). Ends that crossed decide nothing (`undecided`)."""
    verdicts = {c: v for c, v in previous.items() if v.status in ("tied", "worse")}
    running = [c for c in values if c not in verdicts]
    means = {c: _mean(values[c]) for c in values}
    best = max(running, key=lambda c: -math.inf if means[c] is None else means[c])
    pair_confidence = pair_confidence or bonferroni(len(values), confidence)
    for c in running:
        episodes = sum(v is not None for v in values[c].values())
        if c == best:
            verdicts[c] = Verdict(status="best", mean=means[c], round=round_, episodes=episodes)
            continue
        pairs = paired_observations(values[c], values[best], round_trials, max_trials)
        cs = confidence_sequence(pairs, pair_confidence(c, best), one_sided=True)
        verdicts[c] = Verdict(status=_status(cs, margin), mean=means[c], vs_best=cs, against=best, round=round_,
                              episodes=episodes)
    return {c: verdicts[c] for c in values}


def _status(cs: SequenceBound, margin: float) -> Status:
    if cs.crossed:
        return "undecided"
    return "worse" if cs.hi < -margin else "tied" if cs.lo > -margin else "undecided"


def _mean(values: Mapping[EpisodeKey, float | None]) -> float | None:
    """The mean of the counted values, exactly rounded (math.fsum): equal multisets give equal
    means whatever their order, so a tie for the best goes to the first checkpoint every time."""
    counted = [v for v in values.values() if v is not None]
    return math.fsum(counted) / len(counted) if counted else None
