"""Telecom everywhere a domain goes after the sweep: the reducer, the report and its episode pages, W&B's
per-domain run, `handoff export`, `handoff score` and `handoff compare` (issue 47)."""

from __future__ import annotations

import json
import re

import pytest
from tau2.data_model.simulation import Results

from handoff.cli import main
from handoff.report import finish_run, reduce_run
from handoff.report.wandb_log import TABLE_COLUMNS, run_id
from handoff.rundir import RunDir, RunPaths
from handoff.tasks.ids import task_slug
from handoff.testing.synthetic import Behavior, sample_tasks, write_run
from handoff.testing.wandb_offline import offline_runs
from tests.support.wandb_env import isolate_wandb

CHECKPOINTS = {"good": (100, Behavior(correct_handoff=0.95)), "bad": (200, Behavior(correct_handoff=0.2))}


@pytest.fixture(autouse=True)
def wandb_env(monkeypatch, tmp_path):
    isolate_wandb(monkeypatch, tmp_path / "wandb-home")


@pytest.fixture
def run(tmp_path):
    tasks = sample_tasks(6, ("telecom",))
    assert any("|" in t for t in tasks["telecom"])
    return write_run(tmp_path / "run", CHECKPOINTS, tasks, shard_size=4), tasks["telecom"]


def test_a_telecom_run_reports_logs_exports_scores_and_compares(run, capsys):
    run_dir, tasks = run
    paths = finish_run(run_dir)
    assert "wandb_errors" not in paths
    reduction = reduce_run(run_dir)
    assert {g.domain for g in reduction.groups} == {"telecom", "all"}
    assert "| good | 100 | telecom |" in (RunPaths(run_dir).root / "report" / "report.md").read_text()
    pages = {p.name for p in (RunPaths(run_dir).root / "report" / "episodes" / "transcripts").glob("*/*.html")}
    assert {f"good__telecom__{task_slug(t)}__0.html" for t in tasks} <= pages

    (logged,) = offline_runs(RunPaths(run_dir).wandb, run_id(RunDir(run_dir), "telecom"))
    rows = logged["history"]
    assert len(rows) == 2 and all("handoff/f1" in row for row in rows)
    assert not [k for row in rows for k in row if any(t in k for t in tasks) or "[" in k or "|" in k]
    (table, *_) = sorted(logged["dir"].glob("files/media/table/episodes_*.table.json"))
    ids = {r[TABLE_COLUMNS.index("task_id")] for r in json.loads(table.read_text())["data"]}
    assert ids == set(tasks), "the table holds the ids themselves"

    capsys.readouterr()
    assert main(["export", str(run_dir)]) == 0
    exported = sorted(capsys.readouterr().out.split())
    assert [p.rsplit("/", 1)[1] for p in exported] == ["bad__telecom.json", "good__telecom.json"]
    results = Results.load(exported[1])
    assert results.info.environment_info.domain_name == "telecom" and len(results.simulations) == len(tasks)
    assert main(["score", exported[1]]) == 0
    scored = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    reduced = {e.score.task_id: e.score for e in reduction.episodes if e.model == "good"}
    assert {row["task_id"]: row["reward"] for row in scored} == {t: s.reward for t, s in reduced.items()}

    assert main(["compare", str(run_dir), "--a", "good", "--b", "bad", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["result"]["n_tasks"] == len(tasks) and cmp["result"]["metrics"]["handoff_accuracy"]["diff"] > 0
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", run_id(RunDir(run_dir), "telecom"))
