"""The adaptive rounds' decision at its edges (issue 46): crossed ends decide nothing, a `tied` or
`worse` verdict names the best it was measured against, and a tie in the mean goes to the first
checkpoint whatever the order of the episodes."""

from __future__ import annotations

from handoff.rules.sequential import confidence_sequence, decide

TASKS = [("retail", str(t)) for t in range(30)]


def _values(per_round: list[float]) -> dict:
    return {(d, t, trial): v for trial, v in enumerate(per_round) for d, t in TASKS}


def test_crossed_ends_leave_the_checkpoint_undecided():
    """A checkpoint right on every task in round 1 and wrong on every task after: the one-sided
    ends cross (every mean excluded). The point estimate (-0.5) would have called it worse."""
    rounds = [[1.0] * 30] + [[-1.0] * 30] * 3
    cs = confidence_sequence(rounds, 0.95, one_sided=True)
    assert cs.crossed and cs.lo == cs.hi == cs.estimate == -0.5
    assert not confidence_sequence(rounds[:1], 0.95, one_sided=True).crossed
    values = {"best": _values([0.0, 1.0, 1.0, 1.0]), "drifting": _values([1.0, 0.0, 0.0, 0.0])}
    verdicts = decide(values, {}, 4, margin=0.05, confidence=0.95, round_trials=1)
    assert verdicts["drifting"].status == "undecided" and verdicts["drifting"].vs_best.crossed


def test_a_verdict_names_the_best_it_was_measured_against():
    values = {"a": _values([1.0, 1.0]), "b": _values([1.0, 1.0]), "c": _values([0.0, 0.0])}
    verdicts = decide(values, {}, 2, margin=0.3, confidence=0.95, round_trials=1)
    assert verdicts["a"].status == "best" and verdicts["a"].against is None
    assert (verdicts["b"].status, verdicts["b"].against) == ("tied", "a")
    assert (verdicts["c"].status, verdicts["c"].against) == ("worse", "a")
    later = decide(values | {"a": _values([1.0, 1.0, 0.0])}, verdicts, 3, 0.3, 0.95, 1)
    assert later["b"] == verdicts["b"]  # a decided verdict keeps the best it was measured against


def test_a_tie_in_the_mean_goes_to_the_first_checkpoint_in_any_episode_order():
    """0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1 differ in floating point; their exact sums do not."""
    keys = [("retail", "0", 0), ("retail", "1", 0), ("retail", "2", 0)]
    forward, backward = dict(zip(keys, (0.1, 0.2, 0.3))), dict(zip(keys, (0.3, 0.2, 0.1)))
    assert sum(forward.values()) > sum(backward.values())  # the plain sum would make forward the best
    verdicts = decide({"backward": backward, "forward": forward}, {}, 1, 0.05, 0.95, 1)
    assert verdicts["backward"].status == "best" and verdicts["backward"].mean == verdicts["forward"].mean
    assert decide({"forward": forward, "backward": backward}, {}, 1, 0.05, 0.95, 1)["forward"].status == "best"
