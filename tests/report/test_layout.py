"""The report's layout rules: no `all` row repeating a one-domain run, no empty table (a sentence
instead), split outcome classes linking to their class, pass^1 with tau2 success's interval, F1
n/a where it is undefined, and numbers that never wrap (a wide table scrolls within itself)."""

from __future__ import annotations

import re

import pytest

from handoff.report import reduce_run, write_report
from handoff.report.render import HTML_PAGE, fmt
from handoff.rules.metrics import compute_metrics
from handoff.rundir import RunDir
from handoff.testing.synthetic import Behavior, sample_tasks, write_run
from tests.rules.test_reward_and_metrics import score


@pytest.fixture(scope="module")
def one_domain(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("layout") / "run", {"solo": (0, Behavior())},
                    sample_tasks(2, domains=("retail",)), shard_size=10)
    write_report(run, reduce_run(run))
    return RunDir(run)


def test_a_one_domain_run_has_no_all_row_anywhere(one_domain):
    md = one_domain.report_md.read_text()
    assert "| solo | 0 | retail |" in md and "| all |" not in md


def test_a_table_without_values_is_a_sentence(one_domain):
    from handoff.report.render import _keyed_table
    from handoff.rules.metrics import Interval

    reduction = reduce_run(one_domain.root)
    empty = {"x": Interval(value=None, lo=None, hi=None, n=0)}
    assert _keyed_table(reduction, lambda m: empty, lambda k: {}) == ["Nothing to show: no episode of this run has one.", ""]
    assert _keyed_table(reduction, lambda m: m.outcomes, lambda k: {})[0].startswith("| checkpoint |")


def test_one_checkpoint_step_says_why_two_plots_are_missing(one_domain):
    md = one_domain.report_md.read_text()
    assert "One checkpoint step: the plots against the step" in md and "precision_recall.png" not in md


def test_split_outcome_classes_link_to_their_class(one_domain):
    md = one_domain.report_md.read_text()
    task = md.split("## Outcome classes split by who asked for the human, task label")[1].split("\n## ")[0]
    episode = md.split("## Outcome classes split by who asked for the human, episode label")[1].split("\n## ")[0]
    assert "detail=missed_handoff_not_asked" in task and "episode_detail=" not in task
    assert "episode_detail=correct_no_transfer" in episode


def test_pass1_has_tau2_successs_interval():
    failing = [score(str(i), False, False, tau2=0.0) for i in range(5)]
    m = compute_metrics(failing)
    assert m.pass_hat_k[1] == m.tau2_success and m.tau2_success.hi > 0.4  # Wilson [0, 0.43], not [0, 0]
    two_trials = [score(str(i), False, False, tau2=float(t), trial=t) for i in range(4) for t in range(2)]
    m = compute_metrics(two_trials)
    assert (m.pass_hat_k[1].lo, m.pass_hat_k[1].hi) == (m.tau2_success.lo, m.tau2_success.hi)
    assert m.pass_hat_k[2].value == 0.0


def test_f1_is_n_a_where_undefined():
    m = compute_metrics([score(str(i), False, False) for i in range(3)])  # no positive label, no transfer
    assert fmt(m.handoff.f1) == "n/a" and fmt(m.handoff.precision) == "n/a"
    assert m.handoff.accuracy.value == 1.0


def test_numbers_never_wrap_and_wide_tables_scroll_within_themselves():
    style = re.search(r"<style>(.*)</style>", HTML_PAGE, re.S)[1]
    assert "td{{white-space:nowrap}}" in style and "overflow-x:auto" in style and "display:block" in style
