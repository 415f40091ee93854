"""The report's step plots read well with one checkpoint as with several: ticks at the steps, an x
span around them (not matplotlib's step ± 0.04), fractions on a 0..1 axis, domains side by side."""

from __future__ import annotations

import pytest

from handoff.report import reduce_run
from handoff.report.plots import PRECISION_RECALL, RATES, all_plots, over_steps_figure
from handoff.testing.synthetic import Behavior, sample_tasks, write_run


def _reduction(tmp_path, checkpoints: dict):
    return reduce_run(write_run(tmp_path / "run", checkpoints, sample_tasks(1)))


@pytest.mark.parametrize("steps", [[0], [120], [100, 200], [0, 50, 200]])
def test_step_axis_shows_the_checkpoints(tmp_path, steps):
    reduction = _reduction(tmp_path, {f"ck{s}": (s, Behavior(correct_handoff=0.8)) for s in steps})
    fig = over_steps_figure(reduction, PRECISION_RECALL, "t")
    for ax in fig.axes:
        lo, hi = ax.get_xlim()
        assert list(ax.get_xticks()) == steps
        assert lo < steps[0] and steps[-1] < hi
        assert hi - lo >= 1 and (hi - lo) <= 2 * max(1, steps[-1] - steps[0], abs(steps[0]) * 0.1)
        assert ax.get_ylim() == (-0.05, 1.05)
        xs = [x for line in ax.get_lines() for x in line.get_xdata()]
        assert all(lo < x < hi for x in xs) and len(set(xs)) > len(steps)  # domains side by side


def test_unbounded_rates_start_at_zero(tmp_path):
    reduction = _reduction(tmp_path, {"only": (0, Behavior(format_error=0.0))})
    fig = over_steps_figure(reduction, RATES, "t")
    per_100 = next(ax for ax in fig.axes if ax.get_title().startswith("format errors"))
    assert per_100.get_ylim()[0] == 0 and per_100.get_ylim()[1] >= 1


def test_one_checkpoint_step_draws_no_one_dot_plots(tmp_path):
    paths = all_plots(_reduction(tmp_path, {"only": (0, Behavior())}), tmp_path / "plots")
    assert sorted(paths) == ["confusion"]  # against the step, one checkpoint is one dot: not drawn
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths.values())
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["confusion.png"]
    two = all_plots(_reduction(tmp_path / "two", {"a": (0, Behavior()), "b": (1, Behavior())}), tmp_path / "plots2")
    assert sorted(two) == ["confusion", "precision_recall", "rates"]
