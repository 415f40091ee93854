"""The metrics of docs/metrics.md over a set of EpisodeScores, each with a 95% interval.

Proportions and means of values in [0, 1] (tau2 reward, pass^k, F1 as TP / (TP + (FP + FN) / 2)) get
Wilson score intervals, at the cluster-robust effective sample size when a task has several trials
(clustered_wilson); unbounded means (reward, turns, tokens) a t interval over tasks
(handoff.rules.intervals). Every statistic is a ratio of per-task sums (a mean is sum/count, F1 is
2TP / (2TP + FP + FN)), which is what lets one linearisation serve them all and pair two runs.
pass^k is tau2's own (tau2.metrics.agent_metrics): per task C(c, k) / C(n, k), averaged over tasks.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel
from tau2.metrics.agent_metrics import is_successful, pass_hat_k

from handoff.rules.events import FormatKind
from handoff.rules.intervals import (
    MIN_TASKS,
    MIN_VARYING_TASKS,
    cr1_variance,
    design_effect,
    linearised,
    ratio_interval,
    t_interval,
    t_quantile,
)
from handoff.rules.outcome import Outcome, OutcomeDetail
from handoff.rules.score import EpisodeScore
from handoff.rules.violations import STYLE_RULES, SUBSTANTIVE, RuleId

Z95 = 1.959963984540054
ANY = "any"

TaskKey = tuple[str, str]
Ratio = Callable[[EpisodeScore], tuple[float, float]]  # an episode's (numerator, denominator)


class Interval(BaseModel):
    """A value with its 95% interval; `k` / `n` are the counts behind a proportion (n alone: the
    episodes, turns or tasks it is computed over), `tasks` the tasks they come from. value is None
    when n is 0; lo and hi are None where the data give no interval (a single task)."""

    value: float | None
    lo: float | None
    hi: float | None
    n: int
    k: int | None = None
    tasks: int | None = None


class Confusion(BaseModel):
    tp: int
    fp: int
    tn: int
    fn: int


class HandoffMetrics(BaseModel):
    confusion: Confusion
    precision: Interval
    recall: Interval
    f1: Interval
    accuracy: Interval


class Metrics(BaseModel):
    n_episodes: int
    n_tasks: int
    handoff: HandoffMetrics
    outcomes: dict[str, Interval] = {}
    transfer_rate_by_rule: dict[str, Interval]
    handoff_turn_by_rule: dict[str, Interval] = {}
    tau2_reward: Interval
    tau2_success: Interval
    pass_hat_k: dict[int, Interval]
    reward: Interval
    violation_rate: dict[str, Interval]
    format_errors_per_100_turns: dict[str, Interval]
    termination: dict[str, Interval]
    assistant_turns: Interval
    completion_tokens: Interval
    n_unevaluated: int
    # Under the episode label (EpisodeScore.episode_should_transfer; docs/metrics.md, "Episode labels")
    # and who asked for the human (handoff.rules.attribution).
    handoff_episode: HandoffMetrics | None = None
    outcomes_episode: dict[str, Interval] = {}
    outcome_details: dict[str, Interval] = {}
    outcome_details_episode: dict[str, Interval] = {}
    transfer_rate_by_episode_rule: dict[str, Interval] = {}
    handoff_initiator: dict[str, Interval] = {}
    user_ended_for_transfer: Interval | None = None
    user_request_offscript: Interval | None = None  # the user simulator's, over the episodes whose scenario is known
    handoff_delay_by_rule: dict[str, Interval] = {}  # median agent turns from the known need to the hand-off
    handoff_after_write: Interval | None = None  # hand-offs with episode label 1 made after a write
    handoff_summary_complete: Interval | None = None  # hand-offs whose summary names the ids touched
    unneeded_handoff_after_trying: Interval | None = None  # unneeded hand-offs made after a reference action


class Difference(BaseModel):
    """A - B of one metric. `n_tasks`: the shared tasks where it counts an episode on either side;
    `n_varying_tasks`: those on which A and B differ (their sums num, den on the task); `n_episodes_a/b`:
    the episodes it counts (for precision the transfers, for recall the should-transfer episodes:
    the positives). `too_few`: under MIN_TASKS tasks or MIN_VARYING_TASKS varying ones, no interval.
    `p`: the two-sided p-value of the paired t test of diff = 0."""

    a: float | None
    b: float | None
    diff: float | None
    lo: float | None
    hi: float | None
    n_tasks: int = 0
    n_varying_tasks: int = 0
    n_episodes_a: int = 0
    n_episodes_b: int = 0
    p: float | None = None
    too_few: bool = False


class PairedComparison(BaseModel):
    """Run A minus run B on the tasks both ran (intervals: paired t over those tasks)."""

    n_tasks: int
    n_episodes_a: int
    n_episodes_b: int
    metrics: dict[str, Difference]


def wilson(k: float, n: int, z: float = Z95) -> Interval:
    if n == 0:
        return Interval(value=None, lo=None, hi=None, n=0, k=_count(k))
    return _bounded(k / n, k, n, _wilson_at(k / n, n, z))


def _count(k: float) -> int | None:
    """k as the count of a proportion (None for a fractional sum, as of rewards)."""
    return int(k) if float(k).is_integer() else None


def _wilson_at(p: float, n: float, z: float) -> tuple[float, float]:
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def clustered_wilson(k: Sequence[float], n: Sequence[float], z: float = Z95) -> Interval:
    """sum(k) / sum(n) for k[j] of n[j] in task j (k[j] may be a sum of values in [0, 1]), with a
    Wilson interval that respects tasks. With one trial per task it is plain Wilson. Otherwise it is
    Wilson at the effective sample size sum(n) / deff with t on J - 1 degrees of freedom in place of
    z (Korn & Graubard 1998), deff the design effect of handoff.rules.intervals.design_effect: the
    intra-task correlation that the cluster-robust variance J / (J - 1) sum_j (k_j - p n_j)^2 /
    sum(n)^2 of the J tasks shows (the sandwich variance of an intercept-only regression clustered by
    task, CR1), shrunk toward tau2's 0.5 while the rarer outcome is scarce. Continuous in the counts;
    one task gives no interval."""
    ks, ns = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    ks, ns = ks[ns > 0], ns[ns > 0]
    total_k, total_n, tasks = float(ks.sum()), float(ns.sum()), len(ns)
    if not tasks:
        return Interval(value=None, lo=None, hi=None, n=0, k=0, tasks=0)
    p = total_k / total_n
    if ns.max() <= 1:  # independent trials: plain Wilson
        return _bounded(p, total_k, total_n, _wilson_at(p, total_n, z), tasks)
    if tasks == 1:
        return Interval(value=p, lo=None, hi=None, n=_count(total_n) or 0, k=_count(total_k), tasks=1)
    deff = design_effect(ks, ns)
    return _bounded(p, total_k, total_n, _wilson_at(p, total_n / deff, t_quantile(tasks - 1)), tasks)


def _bounded(p: float, k: float, n: float, interval: tuple[float, float], tasks: int | None = None) -> Interval:
    """A proportion's Interval, its ends exact at 0 and 1 where floating point would miss them."""
    lo, hi = interval
    return Interval(value=p, lo=0.0 if k == 0 else lo, hi=1.0 if k == n else hi, n=_count(n) or 0, k=_count(k),
                    tasks=tasks)


def share(scores: Sequence[EpisodeScore], hit: Callable[[EpisodeScore], bool],
          among: Callable[[EpisodeScore], bool] = lambda s: True) -> Interval:
    """The share of the episodes `among` that `hit`, with clustered_wilson's interval over tasks."""
    return _task_share((s, float(hit(s)), 1.0) for s in scores if among(s))


def _task_share(items) -> Interval:
    """clustered_wilson over (episode, k, n) triples summed per task."""
    by_task: dict[TaskKey, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for s, k, n in items:
        counts = by_task[(s.domain, s.task_id)]
        counts[0] += k
        counts[1] += n
    ks = [c[0] for c in by_task.values()]
    return clustered_wilson(ks, [c[1] for c in by_task.values()])


def _tau2_reward(s: EpisodeScore) -> float:
    return s.tau2_reward or 0.0  # not evaluated counts as a failure, as a premature ending does


def _cell(s: EpisodeScore) -> tuple[bool, bool]:
    return s.transferred, s.label.should_transfer


def _episode_cell(s: EpisodeScore) -> tuple[bool, bool]:
    return s.transferred, s.episode_should_transfer


def _error_turns(s: EpisodeScore) -> int:
    """Turns with at least one format error."""
    return len({e.turn for e in s.format_errors})


def _f1_terms(s: EpisodeScore, cell: Callable[[EpisodeScore], tuple[bool, bool]] = _cell) -> tuple[float, float]:
    """F1 = 2TP / (2TP + FP + FN), summed episode by episode."""
    transferred, should = cell(s)
    tp = 2.0 * (transferred and should)
    return tp, tp + (transferred != should)


def _f1_share(cell: tuple[bool, bool]) -> tuple[float, float]:
    """An episode's (hit, weight) in F1 = TP / (TP + (FP + FN) / 2)."""
    transferred, should = cell
    return (1.0, 1.0) if transferred and should else (0.0, 0.5 * (transferred != should))


# Ratios shared by the metrics and the paired comparison.
RATIOS: dict[str, Ratio] = {
    "tau2_reward": lambda s: (_tau2_reward(s), 1.0),
    "reward": lambda s: (s.reward, 1.0),
    "handoff_accuracy": lambda s: (float(s.correct_handoff), 1.0),
    "handoff_f1": _f1_terms,
    "handoff_episode_accuracy": lambda s: (float(s.episode_correct_handoff), 1.0),
    "handoff_episode_f1": lambda s: _f1_terms(s, _episode_cell),
    "violation_rate_any": lambda s: (float(bool(s.violations)), 1.0),
    f"violation_rate_{SUBSTANTIVE}": lambda s: (float(any(v.rule not in STYLE_RULES for v in s.violations)), 1.0),
    **{f"violation_rate/{rule.value}": (lambda s, r=rule: (float(any(v.rule is r for v in s.violations)), 1.0))
       for rule in RuleId},
    "format_errors_per_100_turns_any": lambda s: (100.0 * _error_turns(s), float(s.n_assistant_turns)),
    "assistant_turns": lambda s: (float(s.n_assistant_turns), 1.0),
    "completion_tokens": lambda s: (float(s.completion_tokens), 1.0),
}


class _TaskArrays:
    """Per-task sums of an episode ratio over tasks in a fixed order, and which tasks vary."""

    def __init__(self, by_task: dict[TaskKey, list[EpisodeScore]]):
        self.by_task = by_task

    def sums(self, ratio: Ratio) -> tuple[np.ndarray, np.ndarray]:
        pairs = [[ratio(s) for s in trials] for trials in self.by_task.values()]
        num = np.array([math.fsum(p[0] for p in task) for task in pairs], dtype=float)
        den = np.array([math.fsum(p[1] for p in task) for task in pairs], dtype=float)
        return num, den

    def counted(self, ratio: Ratio) -> int:
        return sum(ratio(s)[1] > 0 for trials in self.by_task.values() for s in trials)

    def mean(self, ratio: Ratio) -> Interval:
        """sum(num) / sum(den) over the tasks with its t interval; `n` the tasks."""
        num, den = self.sums(ratio)
        if not den.sum():
            return Interval(value=None, lo=None, hi=None, n=len(num), tasks=len(num))
        lo, hi = ratio_interval(num, den)
        return Interval(value=float(num.sum() / den.sum()), lo=lo, hi=hi, n=len(num), tasks=int((den > 0).sum()))

    def bounded_mean(self, ratio: Ratio) -> Interval:
        """The mean of a value in [0, 1] over the counted episodes, clustered Wilson; `n` the episodes."""
        return clustered_wilson(*self.sums(ratio))


def compute_metrics(scores: Sequence[EpisodeScore], ks: Sequence[int] | None = None) -> Metrics:
    """All metrics of docs/metrics.md. `ks`: the k of pass^k (default 1 .. the fewest trials any
    task has, as tau2 does)."""
    by_task = _by_task(scores)
    tasks = _TaskArrays(by_task)
    success = share(scores, lambda s: is_successful(_tau2_reward(s)))
    return Metrics(
        n_episodes=len(scores),
        n_tasks=len(by_task),
        handoff=_handoff(scores, tasks),
        outcomes=_outcomes(scores),
        transfer_rate_by_rule=_transfer_rates(scores),
        handoff_turn_by_rule=_handoff_turns(scores),
        tau2_reward=tasks.bounded_mean(RATIOS["tau2_reward"]),
        tau2_success=success,
        pass_hat_k=_same_as_success(_pass_hat_k(by_task, ks), success),
        reward=tasks.mean(RATIOS["reward"]),
        violation_rate=_violation_rates(scores),
        format_errors_per_100_turns=_format_rates(scores),
        termination=_terminations(scores),
        assistant_turns=tasks.mean(RATIOS["assistant_turns"]),
        completion_tokens=tasks.mean(RATIOS["completion_tokens"]),
        n_unevaluated=sum(s.tau2_reward is None for s in scores),
        **_attributed(scores, tasks),
    )


def paired_difference(a_scores: Sequence[EpisodeScore], b_scores: Sequence[EpisodeScore]) -> PairedComparison:
    """A - B for each RATIOS metric and every hand-off metric under both labels (handoff_ratios)
    over the tasks both runs have, with a paired t interval over those tasks (paired_interval)."""
    a_tasks, b_tasks = _by_task(a_scores), _by_task(b_scores)
    shared = sorted(a_tasks.keys() & b_tasks.keys())
    side_a = _TaskArrays({k: a_tasks[k] for k in shared})
    side_b = _TaskArrays({k: b_tasks[k] for k in shared})
    ratios = RATIOS | handoff_ratios([s for k in shared for s in a_tasks[k] + b_tasks[k]])
    metrics = {name: _difference(side_a, side_b, ratio) for name, ratio in ratios.items()}
    return PairedComparison(
        n_tasks=len(shared),
        n_episodes_a=sum(len(a_tasks[k]) for k in shared),
        n_episodes_b=sum(len(b_tasks[k]) for k in shared),
        metrics=metrics,
    )


def handoff_ratios(scores: Sequence[EpisodeScore]) -> dict[str, Ratio]:
    """Every hand-off metric as a ratio, under the task label (`handoff_...`) and the episode label
    (`handoff_episode_...`): precision, recall, the transfer rate per label rule of these scores,
    and the share of each outcome class and split class (accuracy and F1 are in RATIOS)."""
    out: dict[str, Ratio] = {}
    views = (("handoff", _cell, lambda s: s.label.rule, lambda s: s.outcome, lambda s: s.outcome_detail()),
             ("handoff_episode", _episode_cell, lambda s: s.episode_rule, lambda s: s.episode_outcome,
              lambda s: s.outcome_detail(episode=True)))
    for prefix, cell, rule_of, outcome_of_, detail_of in views:
        out[f"{prefix}_precision"] = lambda s, c=cell: (float(all(c(s))), float(c(s)[0]))
        out[f"{prefix}_recall"] = lambda s, c=cell: (float(all(c(s))), float(c(s)[1]))
        for rule in sorted({rule_of(s) for s in scores}):
            out[f"{prefix}_transfer_rate/{rule}"] = lambda s, r=rule, of=rule_of: (float(s.transferred and of(s) == r),
                                                                                  float(of(s) == r))
        for o in Outcome:
            out[f"{prefix}_outcome/{o.value}"] = lambda s, o=o, of=outcome_of_: (float(of(s) is o), 1.0)
        for d in OutcomeDetail:
            if d.value not in {o.value for o in Outcome}:  # the correct classes are above
                out[f"{prefix}_outcome/{d.value}"] = lambda s, d=d, of=detail_of: (float(of(s) is d), 1.0)
    return out


def _difference(side_a: _TaskArrays, side_b: _TaskArrays, ratio: Ratio) -> Difference:
    (num_a, den_a), (num_b, den_b) = side_a.sums(ratio), side_b.sums(ratio)
    varying = int(((num_a != num_b) | (den_a != den_b)).sum())  # discordant: A and B differ on the task
    counts = {"n_varying_tasks": varying, "n_episodes_a": side_a.counted(ratio), "n_episodes_b": side_b.counted(ratio)}
    return paired_interval(num_a, den_a, num_b, den_b, varying).model_copy(update=counts)


def paired_interval(num_a: np.ndarray, den_a: np.ndarray, num_b: np.ndarray, den_b: np.ndarray,
                    varying: int) -> Difference:
    """sum(num_a) / sum(den_a) - sum(num_b) / sum(den_b) over paired tasks (arrays in one task order)
    with the paired t interval of the per-task linearised differences on J - 1 degrees of freedom, J
    the tasks counting an episode on either side. Under MIN_TASKS such tasks or MIN_VARYING_TASKS
    tasks on which A and B differ (`varying`), no interval and no p (too_few)."""
    a = float(num_a.sum() / den_a.sum()) if den_a.sum() else None
    b = float(num_b.sum() / den_b.sum()) if den_b.sum() else None
    counted = (den_a > 0) | (den_b > 0)
    tasks = int(counted.sum())
    if a is None or b is None:  # e.g. the precision of a side that never transferred: no difference
        return Difference(a=a, b=b, diff=None, lo=None, hi=None, n_tasks=tasks)
    if tasks < MIN_TASKS or varying < MIN_VARYING_TASKS:
        return Difference(a=a, b=b, diff=a - b, lo=None, hi=None, n_tasks=tasks, too_few=True)
    z = linearised(num_a[counted], den_a[counted]) - linearised(num_b[counted], den_b[counted])
    lo, hi, p = t_interval(a - b, cr1_variance(z), tasks)
    return Difference(a=a, b=b, diff=a - b, lo=lo, hi=hi, n_tasks=tasks, p=p)


def _by_task(scores: Sequence[EpisodeScore]) -> dict[TaskKey, list[EpisodeScore]]:
    by_task: dict[TaskKey, list[EpisodeScore]] = defaultdict(list)
    for s in scores:
        by_task[(s.domain, s.task_id)].append(s)
    return dict(sorted(by_task.items()))


def _handoff(scores: Sequence[EpisodeScore], tasks: _TaskArrays, cell=_cell) -> HandoffMetrics:
    cells = Counter(cell(s) for s in scores)
    tp, fp, tn, fn = cells[True, True], cells[True, False], cells[False, False], cells[False, True]
    return HandoffMetrics(
        confusion=Confusion(tp=tp, fp=fp, tn=tn, fn=fn),
        precision=share(scores, lambda s: cell(s)[1], among=lambda s: cell(s)[0]),
        recall=share(scores, lambda s: cell(s)[0], among=lambda s: cell(s)[1]),
        f1=_f1(tasks, cell),
        accuracy=share(scores, lambda s: cell(s)[0] == cell(s)[1]),
    )


def _f1(tasks: _TaskArrays, cell) -> Interval:
    """F1 = TP / (TP + (FP + FN) / 2), a share of weighted episodes (a hit weighs 1, an error 1/2):
    clustered Wilson, `n` the episodes F1 counts (TP + FP + FN), value None where it counts none."""
    f1 = clustered_wilson(*tasks.sums(lambda s: _f1_share(cell(s))))
    return f1.model_copy(update={"n": tasks.counted(lambda s: _f1_terms(s, cell)), "k": None})


def _transfer_rates(scores: Sequence[EpisodeScore], rule_of=lambda s: s.label.rule) -> dict[str, Interval]:
    rules = sorted({rule_of(s) for s in scores})
    return {rule: share(scores, lambda s: s.transferred, among=lambda s, r=rule: rule_of(s) == r) for rule in rules}


def _attributed(scores: Sequence[EpisodeScore], tasks: _TaskArrays) -> dict:
    """The hand-off metrics under the episode label, the outcome classes split by who asked, and the
    share of hand-offs each initiator started (Metrics' fields from handoff_episode on)."""
    def initiated(s):
        return s.handoff_initiator is not None

    return {
        "handoff_episode": _handoff(scores, tasks, _episode_cell),
        "outcomes_episode": {o.value: share(scores, lambda s, o=o: s.episode_outcome is o) for o in Outcome},
        "outcome_details": {d.value: share(scores, lambda s, d=d: s.outcome_detail() is d) for d in OutcomeDetail},
        "outcome_details_episode": {d.value: share(scores, lambda s, d=d: s.outcome_detail(episode=True) is d)
                                    for d in OutcomeDetail},
        "transfer_rate_by_episode_rule": _transfer_rates(scores, lambda s: s.episode_rule),
        "handoff_initiator": {i: share(scores, lambda s, i=i: s.handoff_initiator == i, among=initiated)
                              for i in ("user", "agent_offer", "agent")},
        "user_ended_for_transfer": share(scores, lambda s: s.user_ended_for_transfer),
        "user_request_offscript": share(scores, lambda s: bool(s.user_request_offscript),
                                        among=lambda s: s.user_request_offscript is not None),
        **_handoff_quality(scores),
    }


def _handoff_quality(scores: Sequence[EpisodeScore]) -> dict:
    """Timeliness (per episode rule and `any`) and quality of the hand-offs (handoff.rules.handoff_quality)."""
    delays: dict[str, list[int]] = defaultdict(list)
    for s in scores:
        if s.handoff_delay is not None:
            delays[s.episode_rule].append(s.handoff_delay)
            delays[ANY].append(s.handoff_delay)
    return {
        "handoff_delay_by_rule": {rule: median_interval(d) for rule, d in sorted(delays.items())},
        "handoff_after_write": share(scores, lambda s: s.write_before_handoff, among=lambda s: (
            s.transferred and s.episode_should_transfer and s.write_before_handoff is not None)),
        "handoff_summary_complete": share(scores, lambda s: s.summary_complete,
                                          among=lambda s: s.summary_complete is not None),
        "unneeded_handoff_after_trying": share(scores, lambda s: s.tried_before_handoff, among=lambda s: (
            s.outcome == Outcome.UNNEEDED_HANDOFF and s.tried_before_handoff is not None)),
    }


def _outcomes(scores: Sequence[EpisodeScore]) -> dict[str, Interval]:
    return {o.value: share(scores, lambda s, o=o: s.outcome == o) for o in Outcome}


def median_interval(values: Sequence[float], z: float = Z95) -> Interval:
    """The median with its distribution-free 95% interval [x(j), x(n + 1 - j)] (order statistics):
    j is the largest rank with P(Binomial(n, 1/2) < j) <= 2.5%, exactly up to n = 1,000, else by
    the normal approximation. With n < 6 it is the whole sample. `n` is the number of values."""
    xs = sorted(values)
    n = len(xs)
    if not n:
        return Interval(value=None, lo=None, hi=None, n=0)
    rank = max(1, _median_rank(n, z))
    return Interval(value=float(statistics.median(xs)), lo=float(xs[rank - 1]), hi=float(xs[n - rank]), n=n)


def _median_rank(n: int, z: float) -> int:
    if n > 1000:
        return math.floor(n / 2 - z * math.sqrt(n) / 2)
    below, total, j = 0, 2**n, 0  # below = sum of C(n, i) for i < j, in exact integers
    while 40 * (below + math.comb(n, j)) <= total:
        below += math.comb(n, j)
        j += 1
    return j


def _handoff_turns(scores: Sequence[EpisodeScore]) -> dict[str, Interval]:
    """Median agent turn of the hand-off per label rule and over all rules (`any`), over the
    episodes that transferred."""
    by_rule: dict[str, list[int]] = defaultdict(list)
    for s in scores:
        if s.handoff_turn is not None:
            by_rule[s.label.rule].append(s.handoff_turn)
            by_rule[ANY].append(s.handoff_turn)
    return {rule: median_interval(turns) for rule, turns in sorted(by_rule.items())}


def _pass_hat_k(by_task: dict[TaskKey, list[EpisodeScore]], ks: Sequence[int] | None) -> dict[int, Interval]:
    """Per k, the mean over tasks of tau2's pass^k, Wilson over the tasks (each one observation in [0, 1])."""
    if not by_task:
        return {}
    fewest = min(len(trials) for trials in by_task.values())
    out = {}
    for k in ks or range(1, fewest + 1):
        if k > fewest:
            raise ValueError(f"pass^{k} needs at least {k} trials per task; some task has {fewest}")
        per_task = [
            pass_hat_k(len(trials), sum(is_successful(_tau2_reward(s)) for s in trials), k)
            for trials in by_task.values()
        ]
        out[k] = clustered_wilson(per_task, [1.0] * len(per_task))
    return out


def _same_as_success(pass_k: dict[int, Interval], success: Interval) -> dict[int, Interval]:
    """pass^1 is tau2 success when every task has as many trials: then both show success's interval,
    so that one quantity never reads with two intervals."""
    one = pass_k.get(1)
    if one is not None and one.value is not None and success.value is not None and math.isclose(one.value, success.value):
        pass_k[1] = success.model_copy(update={"value": one.value})
    return pass_k


def _violation_rates(scores: Sequence[EpisodeScore]) -> dict[str, Interval]:
    fired = lambda s: {v.rule for v in s.violations}
    rates = {rule.value: share(scores, lambda s, r=rule: r in fired(s)) for rule in RuleId}
    rates[ANY] = share(scores, lambda s: bool(s.violations))
    rates[SUBSTANTIVE] = share(scores, lambda s: any(v.rule not in STYLE_RULES for v in s.violations))
    return rates


def _format_rates(scores: Sequence[EpisodeScore]) -> dict[str, Interval]:
    def rate(errors: Callable[[EpisodeScore], int]) -> Interval:
        return _per_100(_task_share((s, min(errors(s), s.n_assistant_turns), s.n_assistant_turns) for s in scores))

    kinds = {kind.value: (lambda s, k=kind: sum(e.kind == k for e in s.format_errors)) for kind in FormatKind}
    return {name: rate(errors) for name, errors in (kinds | {ANY: _error_turns}).items()}


def _per_100(rate: Interval) -> Interval:
    scale = lambda x: None if x is None else 100.0 * x
    return rate.model_copy(update={"value": scale(rate.value), "lo": scale(rate.lo), "hi": scale(rate.hi)})


def _terminations(scores: Sequence[EpisodeScore]) -> dict[str, Interval]:
    reasons = sorted({s.termination_reason for s in scores})
    return {reason: share(scores, lambda s, r=reason: s.termination_reason == r) for reason in reasons}
