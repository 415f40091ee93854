"""`handoff leaderboard`: one row per checkpoint across runs and imports, with n and intervals, the
tasks each row rests on, rows of other task sets marked, --common restricting all to the shared
tasks, and an HTML table that sorts (headless Chromium)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from handoff.cli import main
from handoff.report import reduce_run
from handoff.report.text import rate
from handoff.rules.metrics import compute_metrics
from handoff.testing.synthetic import Behavior, sample_tasks, write_run
from tests.support import browser

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real-trajectories"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("board")
    wide = write_run(root / "wide", {"good": (100, Behavior(correct_handoff=0.95)), "bad": (200, Behavior(correct_handoff=0.2))},
                     sample_tasks(2), shard_size=10)
    narrow = write_run(root / "narrow", {"solo": (0, Behavior())}, sample_tasks(2, domains=("retail",)), shard_size=10)
    return wide, narrow


def board(capsys, *args) -> dict:
    assert main(["leaderboard", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_one_row_per_checkpoint_with_n_and_intervals(runs, capsys):
    wide, narrow = runs
    assert main(["leaderboard", str(wide), str(narrow)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    reduction = reduce_run(wide)
    good = reduction.group("good").metrics
    row = next(line for line in lines if "wide:good" in line)
    assert rate(good.handoff.accuracy) in row and rate(good.handoff.recall) in row  # value [interval] k/n
    assert row.split()[:6] == ["*", "wide:good", "100", "airline,retail", str(good.n_tasks), str(good.n_episodes)]
    labels = [word for line in lines for word in line.split()[:2] if word.startswith(("wide:", "narrow:"))]
    assert labels == ["wide:good", "wide:bad", "narrow:solo"]  # runs in the order given, then by step
    assert "* rests on other tasks than the rest" in out


def test_common_restricts_every_row_to_the_shared_tasks(runs, capsys):
    wide, narrow = runs
    plain = board(capsys, wide, narrow)
    common = board(capsys, wide, narrow, "--common")
    shared = {tuple(t) for t in next(r for r in plain["rows"] if r["checkpoint"] == "solo")["tasks"]}
    assert common["shared_tasks"] == plain["shared_tasks"] == len(shared)
    assert all({tuple(t) for t in r["tasks"]} == shared and not r["differs"] for r in common["rows"])
    assert [r["differs"] for r in plain["rows"]] == [True, True, False]  # solo's tasks are all shared
    good = [e.score for e in reduce_run(wide).episodes if e.model == "good" and (e.score.domain, e.score.task_id) in shared]
    row = next(r for r in common["rows"] if r["checkpoint"] == "good")
    assert row["metrics"]["handoff"]["accuracy"] == compute_metrics(good, ks=[1]).handoff.accuracy.model_dump()


def test_same_tasks_everywhere_marks_nothing(runs, capsys):
    wide, _ = runs
    assert main(["leaderboard", str(wide)]) == 0
    out = capsys.readouterr().out
    assert "Every row rests on the same" in out and not any(line.startswith("*") for line in out.splitlines())


def test_a_directory_that_is_no_run_is_refused(tmp_path, capsys):
    assert main(["leaderboard", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_html_sorts_by_a_column_and_lists_each_rows_tasks(runs, tmp_path, capsys):
    wide, narrow = runs
    page = tmp_path / "board.html"
    rows = board(capsys, wide, narrow, "--html", page)["rows"]
    html = page.read_text()
    assert html.count("<p id='tasks-") == 3 and "narrow:solo</b> (" in html
    for order in ("accuracy", "-accuracy"):
        shown = browser.Elements(browser.dom(page, f"sort={order}"))
        labels = [e["text"] for e in shown.found if e["tag"] == "td" and e.get("data-sort", "").count(":") == 1]
        expected = sorted(rows, key=lambda r: r["metrics"]["handoff"]["accuracy"]["value"], reverse=order.startswith("-"))
        assert labels == [f"{r['run']}:{r['checkpoint']}" for r in expected], order


@pytest.mark.ray
@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} (the shared real trajectories) is absent")
def test_imported_real_files_and_a_scripted_sweep_make_one_table(tmp_path, capsys):
    files = sorted(SHARED.glob("gpt-4.1*airline*.json.gz"))
    assert len(files) == 2
    imported = tmp_path / "imported"
    assert main(["import", *map(str, files), "--run-dir", str(imported), "--checkpoint", "gpt-4.1-sft",
                 "--checkpoint", "gpt-4.1"]) == 0
    capsys.readouterr()
    sweep = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "handoff", "sweep", "engine=scripted", "domain=[airline]",
                           "tasks.per_kind=null", "tasks.limit=2", "workers.processes=1", "logger.mode=disabled",
                           "cluster.num_cpus=2", f"run_dir={sweep}"], capture_output=True, text=True, timeout=600,
                          env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = board(capsys, imported, sweep)["rows"]
    # imported without --step, both files are step 0: a set, in name order
    assert [r["checkpoint"] for r in rows] == ["gpt-4.1", "gpt-4.1-sft", "smollm2-135m-instruct"]
    assert [len(r["tasks"]) for r in rows] == [20, 20, 2] and all(r["differs"] for r in rows[:2])
    assert main(["leaderboard", str(imported), str(sweep), "--common"]) == 0
    out = capsys.readouterr().out
    assert "Every row over the" in out and out.count("\n  imported:") == 2
