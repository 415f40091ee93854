"""The exact probability that the done-when's 0.70 checkpoint needs a third round (docs/benchmarks.md,
"Adaptive sweeps with known answers"): with common draws its paired difference with the best (0.85)
is -1 with probability 0.15 and 0 otherwise, so handoff.rules.sequential's capital after two rounds
depends only on the two rounds' counts of -1. This sums the binomial probabilities of the count
pairs after which the sequence's upper end is not yet below -margin, for the bet variants compared
there (the capital over the counts, written as in the module, whose grid, truncation and exclusion
it uses: Y = (X + 1) / 2 is 0 or 1/2).

    python -m bench.adaptive_exact
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom

from handoff.rules.sequential import GRID, TRUNCATION, not_excluded


def third_round(p: float = 0.15, tasks: int = 129, one_sided: bool = True, prior_variance: float = 1 / 16,
                confidence: float = 1 - 0.05 / 3, margin: float = 0.05, kmax: int = 50) -> float:
    alpha = 1 - confidence
    m = np.linspace(0, 1, GRID)
    ks = np.arange(kmax + 1)
    k1, k2 = (g.ravel() for g in np.meshgrid(ks, ks, indexing="ij"))
    prob = binom.pmf(k1, tasks, p) * binom.pmf(k2, tasks, p)
    log_up, log_down = np.zeros((len(k1), GRID)), np.zeros((len(k1), GRID))
    below, above = np.ones_like(log_up, dtype=bool), np.ones_like(log_up, dtype=bool)
    count = total = squares = np.zeros(len(k1))
    threshold = math.log(1 / alpha)
    decided = np.zeros(len(k1), dtype=bool)
    for k in (k1, k2):
        mean = (0.5 + total) / (1 + count)
        variance = (prior_variance + squares - 2 * mean * total + count * mean**2) / (1 + count)
        lam = np.sqrt(2 * math.log((1 if one_sided else 2) / alpha) / (variance * (count + tasks)))[:, None]
        with np.errstate(divide="ignore"):
            up, down = np.minimum(lam, TRUNCATION / m), np.minimum(lam, TRUNCATION / (1 - m))
        for y, n in ((0.0, k), (0.5, tasks - k)):
            log_up += n[:, None] * np.log1p(up * (y - m))
            log_down += n[:, None] * np.log1p(-down * (y - m))
        kept_below, kept_above = not_excluded(log_up, log_down, threshold, one_sided)
        below, above = below & kept_below, above & kept_above
        top = GRID - 1 - np.argmax(above[:, ::-1], axis=1)
        decided |= 2 * m[np.minimum(top + 1, GRID - 1)] - 1 < -margin
        count, total, squares = count + tasks, total + 0.5 * (tasks - k), squares + 0.25 * (tasks - k)
    return float(prob[~decided].sum())


def main() -> None:
    for one_sided, prior in ((False, 0.25), (True, 0.25), (False, 1 / 16), (True, 1 / 16), (True, 1 / 32)):
        print(f"{'one-sided' if one_sided else 'hedged'}, prior variance {prior:g}: "
              f"P(third round) = {third_round(one_sided=one_sided, prior_variance=prior):.4f}", flush=True)
    n, a = 258, 0.05 / 3
    k = next(k for k in range(n) if binom.sf(k - 1, n, 0.05) <= a)
    print(f"most powerful fixed-n test after 2 rounds: fails with probability {binom.cdf(k - 1, n, 0.15):.5f}")


if __name__ == "__main__":
    main()
