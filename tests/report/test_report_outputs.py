"""`handoff report`, `handoff export` and `handoff compare` on a synthetic run of real tau2 messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tau2.data_model.simulation import Results
from tau2.metrics.agent_metrics import compute_metrics as tau2_metrics

import handoff.report.render
import handoff.scoring
from handoff.cli import main
from handoff.records import read_shard
from handoff.report import finish_run, reduce_run
from handoff.report.episodes import TRANSFERRED
from handoff.report.render import fmt, linked
from handoff.rundir import RunPaths
from handoff.testing.synthetic import Behavior, add_shard, episode, sample_tasks, write_run

CHECKPOINTS = {"good": (100, Behavior(correct_handoff=0.95)), "bad": (200, Behavior(correct_handoff=0.2))}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("outputs") / "run", CHECKPOINTS, sample_tasks(4), shard_size=10)
    _add_twin(run)
    return run


def _add_twin(run):
    """A checkpoint "twin" with the very episodes of "good" but for one hand-off decision."""
    records = [r.model_copy(update={"model": "twin"}) for p in sorted(RunPaths(run).shards_dir.glob("good-*")) for r in read_shard(p)]
    first = records[0]
    for behavior in (Behavior(correct_handoff=0.0), Behavior(correct_handoff=1.0)):
        flipped = episode("twin", first.step, first.domain, first.task_id, first.trial, behavior)
        if flipped.simulation["messages"] != first.simulation["messages"]:
            records[0] = flipped
            break
    add_shard(run, "twin", records)


def _compare(capsys, *args) -> dict:
    assert main(["compare", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_report_writes_markdown_html_and_plots(run, capsys):
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    md = RunPaths(run).report_md.read_text()
    reduction = reduce_run(run)
    for g in reduction.slices():
        m = g.metrics
        where = {"checkpoint": g.model, "domain": g.domain}
        row = (f"| {g.model} | {g.step} | {g.domain} | {linked(m.n_episodes, **where)} | {m.n_tasks} | "
               f"{linked(fmt(m.handoff.accuracy, 2), **where)} | "
               f"{linked(fmt(m.handoff.precision, 2), **where, outcome=TRANSFERRED)} ({m.handoff.precision.n} pos) |")
        assert row in md
    assert "## Hand-off under the episode label" in md and "| user_ended_for_transfer | user_request_offscript |" in md
    good = reduction.group("good")  # airline 9 is in the sample: its gold is unreachable (issue 32)
    assert good.n_unreachable and (f"| good | {good.step} | all | {good.n_unreachable} | {fmt(good.metrics.tau2_reward)} "
                                   f"| {fmt(good.tau2_reward_reachable)} | {fmt(good.metrics.tau2_success)} |") in md
    html = RunPaths(run).report_html.read_text()
    assert "<table>" in html and "<h1>Hand-off report: synthetic</h1>" in html
    for name in ("confusion", "precision_recall", "rates"):
        png = RunPaths(run).plots_dir / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert f'src="plots/{name}.png"' in html and str(png) in out


def test_export_is_read_by_tau2s_own_tools(run, capsys):
    assert main(["export", str(run)]) == 0
    paths = capsys.readouterr().out.split()
    reduction = reduce_run(run)
    assert len(paths) == len(reduction.slices())
    for path in paths:
        results = Results.load(path)
        model, domain = results.info.agent_info.llm, results.info.environment_info.domain_name
        group = reduction.group(model, domain)
        assert len(results.simulations) == group.n_episodes
        assert {s.task_id for s in results.simulations} == {t.id for t in results.tasks}
        assert tau2_metrics(results).avg_reward == pytest.approx(group.metrics.tau2_reward.value)


def test_compare_two_checkpoints_finds_a_real_difference(run, capsys):
    cmp = _compare(capsys, run, "--a", "good", "--b", "bad")
    accuracy = cmp["result"]["metrics"]["handoff_accuracy"]
    assert accuracy["diff"] > 0.5 and accuracy["lo"] > 0 and cmp["significant"]["handoff_accuracy"]
    assert cmp["significant"]["handoff_f1"]
    assert cmp["result"]["n_tasks"] == reduce_run(run).group("good").metrics.n_tasks


def test_compare_finds_no_difference_where_there_is_none(run, capsys):
    cmp = _compare(capsys, run, "--a", "good", "--b", "twin")
    accuracy = cmp["result"]["metrics"]["handoff_accuracy"]
    assert 0 < accuracy["diff"] < 0.05 and accuracy["too_few"]  # one task differs: no interval rests on it
    assert accuracy["n_varying_tasks"] == 1 and accuracy["n_tasks"] == cmp["result"]["n_tasks"]
    assert not any(cmp["significant"].values())


def test_compare_two_runs(run, tmp_path, capsys):
    other = shutil.copytree(run, tmp_path / "other", ignore=shutil.ignore_patterns("reduced", "report", "wandb"))
    cmp = _compare(capsys, run, other, "--a", "bad", "--b", "good", "--domain", "retail")
    assert cmp["a"] == "run:bad:retail" and cmp["b"] == "other:good:retail"
    assert cmp["result"]["metrics"]["handoff_accuracy"]["hi"] < 0 and cmp["significant"]["handoff_accuracy"]


def test_a_run_without_episodes_still_gets_its_files(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    RunPaths(tmp_path).manifest_path.write_text('{"name": "empty", "config": {}}')  # a version-1 manifest
    paths = finish_run(tmp_path)
    assert json.loads(paths["metrics"].read_text())["n_episodes"] == 0
    assert "No episodes yet" in paths["report_md"].read_text() and paths["report_html"].is_file()
    assert not any(name.startswith("plot_") for name in paths) and "wandb_errors" not in paths


def _small_run(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return write_run(tmp_path / "run", {"a": (1, Behavior())}, sample_tasks(1, ("airline",)), shard_size=4)


def test_a_stray_file_in_shards_does_not_fail_the_report(tmp_path, monkeypatch):
    run = _small_run(tmp_path, monkeypatch)
    (RunPaths(run).shards_dir / "notes.jsonl").write_bytes(b"\x00 not a shard\n")
    paths = finish_run(run)
    assert json.loads(paths["metrics"].read_text())["foreign_shards"] == ["notes"]
    assert "not this run's, skipped: notes" in paths["report_md"].read_text()


def test_the_report_is_rewritten_when_the_scorer_or_the_report_code_changes(tmp_path, monkeypatch):
    run, written = _small_run(tmp_path, monkeypatch), []
    real = handoff.report.write_report
    monkeypatch.setattr(handoff.report, "write_report", lambda *args: written.append(1) or real(*args))
    finish_run(run)
    finish_run(run)
    assert len(written) == 1  # the same inputs: reused
    monkeypatch.setattr(handoff.scoring, "rules_sha256", lambda: "an edited rule")  # the same metrics
    finish_run(run)
    assert len(written) == 2
    source, read_bytes = Path(handoff.report.render.__file__), Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda p: read_bytes(p) + b"# edited" * (p == source))
    finish_run(run)
    assert len(written) == 3


@pytest.mark.parametrize("argv, message", [
    (["report", "{tmp}"], "not a run directory"),
    (["compare", "{run}"], "name two different checkpoints"),
    (["compare", "{run}", "{run}", "--a", "good"], "has checkpoints bad, good, twin: name one with --a NAME (side A, "
     "the first run) or --b NAME (side B), e.g. --a bad"),
    (["compare", "{run}", "--a", "good", "--b", "nope"], "no checkpoint 'nope'"),
])
def test_bad_input_is_a_clear_error(run, tmp_path, capsys, argv, message):
    assert main([a.format(tmp=tmp_path, run=run) for a in argv]) == 2
    assert message in capsys.readouterr().err
