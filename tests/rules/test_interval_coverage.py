"""Coverage at small n (issue 46's done-when, seeded and small; bench/bench_intervals.py has the large
tables): 20 tasks of 1-4 trials with task rates of ICC 0.45, 95% intervals of the real functions
(handoff.testing.coverage) cover at least 0.93 (two identical agents through `handoff compare`:
tests/report/test_compare_handoff.py)."""

from __future__ import annotations

import pytest

from handoff.testing.coverage import Design, clustered_wilson_coverage, paired_coverage

RUNS = 1000


@pytest.mark.parametrize("rate", [0.05, 0.5])
def test_clustered_wilson_covers_at_20_tasks_and_icc_045(rate):
    tally = clustered_wilson_coverage(Design(tasks=20, rate=rate, icc=0.45), RUNS, seed=1)
    assert tally.given == RUNS and tally.coverage >= 0.93


@pytest.mark.parametrize("rate, shift", [(0.05, 0.02), (0.5, 0.2)])
def test_the_paired_interval_covers_at_20_tasks_and_icc_045(rate, shift):
    """B's mean `shift` above A's; an interval is given unless fewer than 2 tasks vary (at rate 0.05
    about a fifth of the runs); of those given, >= 0.93 cover A - B."""
    tally, _ = paired_coverage(Design(tasks=20, rate=rate, icc=0.45, shift=shift), RUNS, seed=2)
    assert tally.given >= 0.7 * RUNS and tally.coverage >= 0.93
