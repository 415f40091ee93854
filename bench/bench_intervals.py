"""Coverage of the 95% intervals over tasks, and false "significant" flags of `handoff compare`
(issue 46; docs/benchmarks.md, "Intervals at small n").

1. Coverage (handoff.testing.coverage's designs: J tasks of 1 to 4 trials, Beta task rates of a
   given ICC): for one proportion, the clustered Wilson interval after issue 46
   (handoff.rules.metrics.clustered_wilson) and before (OLD_CLUSTERED_WILSON, a copy of the
   function at b7150e7), the percentile cluster bootstrap over tasks (what compute_metrics used for
   means) and the clustered Wald interval p +- z sqrt(v_CR1); for a paired difference (B's mean
   `shift` above A's, task rates paired by a Gaussian copula of correlation 0.7), the paired t
   interval (handoff.rules.metrics.paired_interval) and before it the paired percentile bootstrap
   (a copy), and the paired clustered Wald interval. "given": the share of runs with an interval
   (the new ones give none on one task, or under 8 tasks / 2 varying tasks for a pair); coverage is
   over the runs given one; zero_width: intervals of zero width, with how many of them the data
   forced (A and B equal on every task, or every task's hits equal).
2. Two identical agents over 20 tasks x 2 trials (half the tasks should transfer; per task, the
   chance of a correct hand-off and of tau2 success drawn with ICC 0.45, each agent drawing its own
   episodes): the share of seeded comparisons with a "significant" primary metric before (the old
   paired bootstrap, every metric uncorrected; and the four primary ones alone) and after
   (handoff.report.compare's Holm over the primary metrics), and any exploratory flag after.

    python -m bench.bench_intervals [--runs 2000] [--pairs 1000] [--max-trials 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

import handoff  # noqa: F401
from bench.common import report
from handoff.report.compare import PRIMARY, primary_p, significance
from handoff.rules.intervals import cr1_variance, linearised
from handoff.rules.label import Label
from handoff.rules.metrics import RATIOS, clustered_wilson, handoff_ratios, paired_difference, paired_interval
from handoff.rules.score import EpisodeScore
from handoff.testing.coverage import Design, Tally, varying_tasks

Z95 = 1.959963984540054
TASKS = (8, 20, 50, 200)
ICCS = (0.0, 0.45)
RATES = (0.05, 0.5)
SHIFT = 0.4  # B's mean is A's + SHIFT x min(rate, 1 - rate): 0.05 -> 0.07, 0.5 -> 0.7


def old_wilson_at(p: float, n: float, z: float) -> tuple[float, float]:
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def old_clustered_wilson(k, n, z: float = Z95) -> tuple[float, float]:
    """handoff.rules.metrics.clustered_wilson at b7150e7 (before issue 46), for comparison only."""
    total_k, total_n = float(sum(k)), float(sum(n))
    if max(n) <= 1:
        return old_wilson_at(total_k / total_n, total_n, z)
    p = total_k / total_n
    ks, ns = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    tasks = len(ns)
    variance = tasks / (tasks - 1) * float(((ks - p * ns) ** 2).sum()) / total_n**2 if tasks > 1 else 0.0
    n_eff = min(total_n, p * (1 - p) / variance) if variance > 0 else (total_n if 0 < p < 1 else tasks)
    lo, hi = old_wilson_at(p, n_eff, z)
    return 0.0 if total_k == 0 else lo, 1.0 if total_k == total_n else hi


def _resamples(tasks: int, n_bootstrap: int = 1000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, tasks, size=(n_bootstrap, tasks))


def _ratio_replicates(num: np.ndarray, den: np.ndarray, samples: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return num[samples].sum(axis=1) / den[samples].sum(axis=1)


def _percentiles(replicates: np.ndarray) -> tuple[float | None, float | None]:
    finite = replicates[np.isfinite(replicates)]
    if not finite.size:
        return None, None
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return float(lo), float(hi)


def cluster_bootstrap(k: np.ndarray, n: np.ndarray) -> tuple[float | None, float | None]:
    """The percentile bootstrap over tasks of sum(k) / sum(n) (compute_metrics' for means before issue 46)."""
    return _percentiles(_ratio_replicates(k, n, _resamples(len(n))))


def old_paired(num_a, den_a, num_b, den_b) -> tuple[float | None, float | None]:
    """handoff.rules.metrics' paired percentile bootstrap at b7150e7 (the same resampled tasks for both)."""
    samples = _resamples(len(den_a))
    return _percentiles(_ratio_replicates(num_a, den_a, samples) - _ratio_replicates(num_b, den_b, samples))


def clustered_wald(k: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    p = k.sum() / n.sum()
    half = Z95 * math.sqrt(cr1_variance(linearised(k, n)))
    return p - half, p + half


def paired_wald(num_a, den_a, num_b, den_b) -> tuple[float, float]:
    diff = num_a.sum() / den_a.sum() - num_b.sum() / den_b.sum()
    half = Z95 * math.sqrt(cr1_variance(linearised(num_a, den_a) - linearised(num_b, den_b)))
    return diff - half, diff + half


@dataclass
class Forced(Tally):
    """A Tally that also counts the zero-width intervals the data force."""

    forced: int = 0

    def add_forced(self, lo, hi, truth, forced: bool) -> None:
        self.add(lo, hi, truth)
        self.forced += int(lo is not None and lo == hi and forced)

    def row(self) -> dict:
        return super().row() | {"zero_width_forced": self.forced}


def one_proportion(design: Design, runs: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    tallies = {name: Forced() for name in ("new_clustered_wilson", "old_clustered_wilson", "cluster_bootstrap",
                                           "clustered_wald")}
    for _ in range(runs):
        hits, trials = design.one_side(rng)
        forced = bool(np.all(hits == 0) or np.all(hits == trials))
        new = clustered_wilson(hits, trials)
        for name, (lo, hi) in (("new_clustered_wilson", (new.lo, new.hi)),
                               ("old_clustered_wilson", old_clustered_wilson(hits, trials)),
                               ("cluster_bootstrap", cluster_bootstrap(hits, trials)),
                               ("clustered_wald", clustered_wald(hits, trials))):
            tallies[name].add_forced(lo, hi, design.rate, forced)
    return {name: t.row() for name, t in tallies.items()}


def paired(design: Design, runs: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    tallies = {name: Forced() for name in ("new_paired_t", "old_paired_bootstrap", "paired_wald")}
    truth = -design.shift
    for _ in range(runs):
        hits_a, hits_b, trials = design.paired(rng)
        forced = bool(np.all(hits_a == hits_b))
        new = paired_interval(hits_a, trials, hits_b, trials, varying_tasks(hits_a, hits_b))
        for name, (lo, hi) in (("new_paired_t", (new.lo, new.hi)),
                               ("old_paired_bootstrap", old_paired(hits_a, trials, hits_b, trials)),
                               ("paired_wald", paired_wald(hits_a, trials, hits_b, trials))):
            tallies[name].add_forced(lo, hi, truth, forced)
    return {name: t.row() for name, t in tallies.items()}


def coverage_tables(runs: int, max_trials: int) -> list[dict]:
    rows = []
    for tasks in TASKS:
        for icc in ICCS:
            for rate in RATES:
                seed = tasks * 1000 + int(icc * 100) * 10 + int(rate * 10)
                one = one_proportion(Design(tasks, rate, icc, max_trials), runs, seed)
                shift = SHIFT * min(rate, 1 - rate)
                pair = paired(Design(tasks, rate, icc, max_trials, shift=shift), runs, seed + 1)
                rows.append({"tasks": tasks, "icc": icc, "rate": rate, **one, **pair})
                print(f"{tasks:4d} {icc:.2f} {rate:.2f} " + " ".join(
                    f"{k}={v['coverage']}/{v['given']}" for k, v in {**one, **pair}.items()), flush=True)
    return rows


SHOULD, SHOULD_NOT = Label(should_transfer=True, rule="gold_transfer_action"), Label(should_transfer=False,
                                                                                     rule="no_transfer")


def _agent(rng, rates: dict[str, np.ndarray], tasks: int, trials: int) -> list[EpisodeScore]:
    """One agent's episodes: task t right with probability rates['right'][t], successful with rates['success'][t]."""
    out = []
    for t in range(tasks):
        should = t % 2 == 0
        for trial in range(trials):
            right, success = rng.random() < rates["right"][t], rng.random() < rates["success"][t]
            reward = float(success)
            out.append(EpisodeScore.model_validate({
                "task_id": str(t), "domain": "retail", "trial": trial, "transferred": should == right,
                "label": SHOULD if should else SHOULD_NOT, "violations": [], "format_errors": [],
                "tau2_reward": reward, "reward": reward, "termination_reason": "user_stop", "n_assistant_turns": 4,
                "n_messages": 10, "reward_terms": {"task": reward, "handoff": 0, "violations": 0,
                                                   "format_errors": 0, "penalty": 0}}))
    return out


def old_flags(a: list[EpisodeScore], b: list[EpisodeScore]) -> dict[str, bool]:
    """Every metric's "significant" before issue 46: the paired bootstrap's interval excludes 0."""
    by_a, by_b = defaultdict(list), defaultdict(list)
    for s in a:
        by_a[s.task_id].append(s)
    for s in b:
        by_b[s.task_id].append(s)
    keys = sorted(by_a)
    flags = {}
    for name, ratio in (RATIOS | handoff_ratios(a + b)).items():
        sums = [np.array([[math.fsum(ratio(s)[i] for s in side[k]) for k in keys] for i in (0, 1)])
                for side in (by_a, by_b)]
        (num_a, den_a), (num_b, den_b) = sums
        if not den_a.sum() or not den_b.sum():
            flags[name] = False
            continue
        lo, hi = old_paired(num_a, den_a, num_b, den_b)
        flags[name] = lo is not None and (lo > 0 or hi < 0)
    return flags


def identical_agents(pairs: int, tasks: int = 20, trials: int = 2, icc: float = 0.45) -> dict:
    design = {"right": Design(tasks, 0.8, icc), "success": Design(tasks, 0.5, icc)}
    counts = defaultdict(int)
    for seed in range(pairs):
        rng = np.random.default_rng(1000 + seed)
        rates = {k: d.rates(rng.random(tasks), d.rate) for k, d in design.items()}
        a, b = _agent(rng, rates, tasks, trials), _agent(rng, rates, tasks, trials)
        before = old_flags(a, b)
        result = paired_difference(a, b)
        after = significance(result, primary_p(result))
        counts["before_any_metric"] += any(before.values())
        counts["before_primary_uncorrected"] += any(before[name] for name in PRIMARY)
        counts["after_primary_holm"] += any(after[name] for name in PRIMARY)
        counts["after_exploratory_any"] += any(v for name, v in after.items() if name not in PRIMARY)
    return {"pairs": pairs, "tasks": tasks, "trials": trials, "icc": icc,
            **{name: round(n / pairs, 4) for name, n in counts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000, help="seeded runs per design")
    parser.add_argument("--pairs", type=int, default=1000, help="identical-agent comparisons")
    parser.add_argument("--max-trials", type=int, default=4, help="trials per task: 1 to this, uniform")
    parser.add_argument("--out")
    args = parser.parse_args()
    started = time.monotonic()
    result = {"runs": args.runs, "max_trials": args.max_trials, "coverage": coverage_tables(args.runs, args.max_trials)}
    if args.pairs:
        result["identical_agents"] = identical_agents(args.pairs)
    report("intervals", result | {"wall_s": round(time.monotonic() - started, 1)}, args.out)


if __name__ == "__main__":
    main()
