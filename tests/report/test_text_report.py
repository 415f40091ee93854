"""The run in plain text (handoff.report.text): the headline a sweep or an import ends with, and
report.txt, which `handoff report --print` prints: numbers a terminal shows without links, the label
they judge against, the substantive violations apart from the style rule, and why turns were cut."""

from __future__ import annotations

import pytest

from handoff.cli import main
from handoff.report import reduce_run
from handoff.report.reducer import ALL
from handoff.report.text import TRUNCATION_NOTE, dominant_rule, headline, headline_row, rate, shown_slices
from handoff.rules.metrics import Interval
from handoff.rundir import RunDir
from handoff.testing.synthetic import Behavior, sample_tasks, write_run

CHECKPOINTS = {"good": (100, Behavior(correct_handoff=0.95, violation=0.3)), "bad": (200, Behavior(correct_handoff=0.2))}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("text") / "run", CHECKPOINTS, sample_tasks(3), shard_size=10)


@pytest.fixture(scope="module")
def one_domain(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("text1") / "run", {"solo": (0, Behavior())},
                     sample_tasks(2, domains=("retail",)), shard_size=10)


def test_report_print_is_report_txt_with_no_link_and_every_slice_row(run, capsys):
    assert main(["report", str(run), "--print"]) == 0
    out = capsys.readouterr().out
    assert out == RunDir(run).report_txt.read_text()
    assert "](" not in out and "episodes/index.html#" not in out  # plain numbers, no Markdown links
    assert "against the task label" in out
    reduction = reduce_run(run)
    lines = out.splitlines()
    for g in reduction.slices() + [reduction.group(m) for m, _ in reduction.checkpoints()]:
        cells = headline_row(g)
        assert any(line.split() == " ".join(cells).split() for line in lines), cells
    good = reduction.group("good").metrics
    assert rate(good.handoff.precision) in out and f"{good.handoff.precision.k}/{good.handoff.precision.n}" in out


def test_report_without_print_lists_report_txt_beside_report_md(run, capsys):
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"report_txt: {RunDir(run).report_txt}" in out and f"report_md: {RunDir(run).report_md}" in out


def test_a_one_domain_run_has_no_all_row(one_domain):
    reduction = reduce_run(one_domain)
    assert [g.domain for g in shown_slices(reduction)] == ["retail"]
    rows = [line.split()[:3] for line in headline(reduction) if line.startswith("solo ")]
    assert rows == [["solo", "0", "retail"]]


def test_headline_shows_substantive_apart_and_names_the_dominant_rule(run):
    reduction = reduce_run(run)
    good = reduction.group("good")
    substantive = good.metrics.violation_rate["substantive"]
    assert substantive.k  # the synthetic "good" writes without confirmation in about 30% of episodes
    text = "\n".join(headline(reduction))
    assert f"good / all: substantive {rate(substantive, interval=False)}" in text
    rule, iv = dominant_rule(good.metrics)
    assert f"most frequent: {rule} (substantive)" in text and iv.k == max(
        v.k for k, v in good.metrics.violation_rate.items() if k not in ("any", "substantive"))
    style = good.metrics.violation_rate["multiple_actions_in_turn"]
    assert f"style multiple_actions_in_turn {rate(style, interval=False)}" in text


def test_no_violation_names_no_rule(one_domain):
    g = reduce_run(one_domain).group("solo", "retail")
    clean = g.metrics.model_copy(update={"violation_rate": {k: iv.model_copy(update={"k": 0, "value": 0.0})
                                                             for k, iv in g.metrics.violation_rate.items()}})
    assert dominant_rule(clean) is None


def test_truncated_turns_are_explained_only_where_they_happened(one_domain):
    reduction = reduce_run(one_domain)
    assert "context_window_exceeded" not in "\n".join(headline(reduction))
    g = reduction.group("solo", "retail")
    n = g.metrics.n_episodes
    cut = Interval(value=1.0, lo=0.5, hi=1.0, n=n, k=n)
    g.metrics = g.metrics.model_copy(update={"termination": {"context_window_exceeded": cut}})
    text = "\n".join(headline(reduction))
    assert TRUNCATION_NOTE.format(k=n, n=n, where="solo / retail") in text and "256" in text


def test_rate_says_n_a_where_undefined():
    assert rate(Interval(value=None, lo=None, hi=None, n=0, k=0)) == "n/a 0/0"
    assert rate(Interval(value=0.5, lo=0.1, hi=0.9, n=4, k=2)) == "0.50 [0.10,0.90] 2/4"
    assert rate(None) == "n/a"


def test_an_empty_run_says_so(tmp_path):
    reduction = reduce_run(write_run(tmp_path / "run", {"x": (0, Behavior())}, {"retail": []}, shard_size=10))
    assert headline(reduction) == ["No episodes scored yet: nothing to show."]
    assert ALL not in [g.domain for g in shown_slices(reduction)]


def test_report_md_shows_substantive_and_style_apart_and_the_dominant_rule(run, capsys):
    from handoff.report.episodes import SUBSTANTIVE_RULES
    from handoff.report.render import fmt, linked

    assert main(["report", str(run)]) == 0
    capsys.readouterr()
    md = RunDir(run).report_md.read_text()
    assert "| substantive violations | style violations |" in md and "| violations |" not in md
    assert "style violations: `multiple_actions_in_turn` (a tool call with text beside it)" in md
    good = reduce_run(run).group("good")
    substantive = good.metrics.violation_rate["substantive"]
    assert linked(fmt(substantive, 2), checkpoint="good", domain="all", violation=SUBSTANTIVE_RULES) in md
    rule, iv = dominant_rule(good.metrics)
    assert f"- good: the most frequent violation is `{rule}` (a substantive rule), in " in md
    assert "against the task label" in md
    assert "`override:no_transfer`: should transfer: hand-checked, overrides no_transfer" in md  # a rule's display name
    assert SUBSTANTIVE_RULES.split("|") == ["write_without_confirmation", "write_before_authentication",
                                            "action_after_transfer", "off_reference_write"]
