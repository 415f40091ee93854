"""Alpha spent over a set that grows (docs/metrics.md, "A set that grows"): checkpoint c compared
with the k-th other checkpoint in arrival order at alpha 6 / (pi^2 k^2), so c's shares over every
checkpoint there is or will be sum to at most alpha, however many arrive."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from scipy.special import polygamma

from handoff.rules.sequential import arrival_spending, bonferroni, decide, spending_weight

ALPHA = 0.05


@pytest.mark.parametrize("checkpoints", [1, 2, 3, 10, 50, 1000])
def test_the_weights_sum_to_the_basel_partial_sum_and_never_reach_one(checkpoints):
    """Reference: sum_{k <= n} 1/k^2 = pi^2/6 - trigamma(n + 1), and (exactly, in fractions) the
    partial sum of 1/k^2 below pi^2/6."""
    total = math.fsum(spending_weight(k) for k in range(1, checkpoints + 1))
    reference = 1 - 6 / math.pi ** 2 * float(polygamma(1, checkpoints + 1))
    assert total == pytest.approx(reference, abs=1e-12)
    exact = sum(Fraction(1, k * k) for k in range(1, min(checkpoints, 200) + 1))
    assert float(exact) < math.pi ** 2 / 6 and total < 1


def test_each_checkpoint_spends_at_most_alpha_over_all_the_others_whatever_arrives_later():
    arrival = [f"step{10 * i}" for i in range(1, 51)]
    pair = arrival_spending(arrival, 1 - ALPHA)
    for c in arrival:
        spent = [1 - pair(c, b) for b in arrival if b != c]
        assert math.fsum(spent) <= ALPHA
        assert math.fsum(spent) == pytest.approx(ALPHA * math.fsum(spending_weight(k) for k in range(1, 50)))
        assert spent == sorted(spent, reverse=True)  # the earlier the other arrived, the larger its share
    later = arrival_spending([*arrival, "step510", "step520"], 1 - ALPHA)
    assert all(later(c, b) == pair(c, b) for c in arrival for b in arrival if b != c)  # fixed before arrivals
    assert pair("step20", "step10") == pair("step10", "step20") == 1 - ALPHA * 6 / math.pi ** 2
    assert pair("step30", "step20") == 1 - ALPHA * spending_weight(2)


def test_a_comparison_decides_at_its_own_share():
    """Eight tasks all worse by 1: at the first other's share (alpha 0.030) that is `worse`, at the
    third's (0.0034) not yet; Bonferroni over two checkpoints (alpha 0.05) decides it too. Which
    share a comparison gets follows the arrival order alone."""
    tasks = [("retail", str(t), 0) for t in range(8)]
    values = {"a": {k: 1.0 for k in tasks}, "b": {k: 0.0 for k in tasks}}
    first = arrival_spending(["a", "b"], 1 - ALPHA)
    fourth = arrival_spending(["a", "x", "y", "b"], 1 - ALPHA)  # b arrived fourth
    assert decide(values, {}, 1, 0.0, 1 - ALPHA, 1, pair_confidence=first)["b"].status == "worse"
    assert decide(values, {}, 1, 0.0, 1 - ALPHA, 1, pair_confidence=bonferroni(2, 1 - ALPHA))["b"].status == "worse"
    late = {"a": values["a"], "x": {}, "y": {}, "b": values["b"]}
    assert fourth("b", "a") == 1 - ALPHA * spending_weight(1)  # a arrived first: b's first other
    assert fourth("a", "b") == 1 - ALPHA * spending_weight(3)
    swapped = {"b": values["a"], "x": {}, "y": {}, "a": values["b"]}  # the worse one arrived first
    verdict = decide(swapped, {}, 1, 0.0, 1 - ALPHA, 1, pair_confidence=fourth)["a"]
    assert (verdict.status, verdict.against) == ("undecided", "b") and verdict.vs_best.hi > 0
    assert decide(late, {}, 1, 0.0, 1 - ALPHA, 1, pair_confidence=fourth)["b"].status == "worse"
