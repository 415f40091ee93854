"""Coverage simulations of the intervals over tasks (tests/rules/test_interval_coverage.py, bench/bench_intervals.py).

A design is J tasks, each with 1 to `max_trials` trials (uniform), whose success rates vary between
tasks as Beta(mean, ICC): Beta(a, b) with a + b = (1 - ICC) / ICC has intra-task correlation
1 / (a + b + 1) = ICC (ICC 0: every task has the mean). A paired design draws side B's task rates
from a Gaussian copula of A's (correlation `pairing`), with B's mean `shift` above A's, the same
trials per task on both sides. The truth is the Beta means (a difference for a pair): the
estimand over tasks drawn from the design, which a pooled share estimates since the trials are
drawn apart from the rates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from handoff.rules.metrics import clustered_wilson, paired_interval


@dataclass(frozen=True)
class Design:
    tasks: int
    rate: float
    icc: float
    max_trials: int = 4
    shift: float = 0.0  # side B's mean minus side A's (paired designs)
    pairing: float = 0.7  # the copula correlation of a task's rates on both sides

    def rates(self, uniforms: np.ndarray, mean: float) -> np.ndarray:
        if self.icc == 0:
            return np.full(uniforms.shape, mean)
        total = (1 - self.icc) / self.icc
        return stats.beta.ppf(uniforms, mean * total, (1 - mean) * total)

    def trials(self, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(1, self.max_trials + 1, self.tasks).astype(float)

    def one_side(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(hits, trials) per task."""
        trials = self.trials(rng)
        return rng.binomial(trials.astype(int), self.rates(rng.random(self.tasks), self.rate)).astype(float), trials

    def paired(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hits of A, hits of B, trials) per task."""
        trials = self.trials(rng)
        za = rng.standard_normal(self.tasks)
        zb = self.pairing * za + np.sqrt(1 - self.pairing**2) * rng.standard_normal(self.tasks)
        rate_a = self.rates(stats.norm.cdf(za), self.rate)
        rate_b = self.rates(stats.norm.cdf(zb), self.rate + self.shift)
        n = trials.astype(int)
        return rng.binomial(n, rate_a).astype(float), rng.binomial(n, rate_b).astype(float), trials


@dataclass
class Tally:
    """Intervals that covered the truth, of those given; how many runs gave none."""

    covered: int = 0
    given: int = 0
    runs: int = 0
    zero_width: int = 0

    def add(self, lo: float | None, hi: float | None, truth: float) -> None:
        self.runs += 1
        if lo is None or hi is None:
            return
        self.given += 1
        self.covered += int(lo <= truth <= hi)
        self.zero_width += int(hi == lo)

    @property
    def coverage(self) -> float | None:
        return self.covered / self.given if self.given else None

    def row(self) -> dict:
        return {"coverage": None if self.coverage is None else round(self.coverage, 3),
                "given": round(self.given / self.runs, 3), "zero_width": self.zero_width}


def varying_tasks(hits_a: np.ndarray, hits_b: np.ndarray) -> int:
    """Tasks on which A and B differ (the same trials on both sides: their hits differ)."""
    return int((hits_a != hits_b).sum())


def clustered_wilson_coverage(design: Design, runs: int, seed: int) -> Tally:
    rng, tally = np.random.default_rng(seed), Tally()
    for _ in range(runs):
        hits, trials = design.one_side(rng)
        got = clustered_wilson(hits, trials)
        tally.add(got.lo, got.hi, design.rate)
    return tally


def paired_coverage(design: Design, runs: int, seed: int) -> tuple[Tally, int]:
    """The paired comparison's coverage of A - B = -shift, and how often it was called significant
    (interval excluding 0) in these runs."""
    rng, tally, significant = np.random.default_rng(seed), Tally(), 0
    for _ in range(runs):
        hits_a, hits_b, trials = design.paired(rng)
        d = paired_interval(hits_a, trials, hits_b, trials, varying_tasks(hits_a, hits_b))
        tally.add(d.lo, d.hi, -design.shift)
        significant += d.lo is not None and (d.lo > 0 or d.hi < 0)
    return tally, significant

