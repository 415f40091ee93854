"""`handoff leaderboard`: one row per checkpoint across runs and imports, with n and intervals, the
tasks each row rests on, rows of other task sets marked, --common restricting all to the shared
tasks, and an HTML table that sorts (headless Chromium). On real data: the five tau2 files of
../shared, each imported into a run of its own, and a scripted sweep make one table of six rows."""

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


def submission(path: Path) -> tuple[str, str]:
    """A shared file's run name (its submission: the name's part before `__`) and checkpoint (its model)."""
    source = path.name.split("__")[0]
    return source, source.split("_")[0]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Each real file of ../shared imported into a run of its own, and a scripted sweep: six runs."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} (the shared real trajectories) is absent")
    files = sorted(SHARED.glob("*.json.gz"))
    assert len(files) == 5  # what shared holds: four airline files and ToolOrchestra's retail one
    root = tmp_path_factory.mktemp("real-board")
    imports = []
    for path in files:
        run, checkpoint = submission(path)
        assert main(["import", str(path), "--run-dir", str(root / run), "--checkpoint", checkpoint]) == 0
        imports.append(root / run)
    sweep = root / "sweep"
    proc = subprocess.run([sys.executable, "-m", "handoff", "sweep", "engine=scripted", "domain=[airline]",
                           "tasks.per_kind=null", "tasks.limit=2", "workers.processes=1", "logger.mode=disabled",
                           "cluster.num_cpus=2", f"run_dir={sweep}"], capture_output=True, text=True, timeout=600,
                          env=os.environ.copy())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return imports, sweep


REAL_ROWS = [  # run:checkpoint, domain and tasks of each file (ToolOrchestra: all 114 attributed)
    ("claude-sonnet-4-5_aide-platform_2025-10-31:claude-sonnet-4-5", "airline", 50),
    ("gpt-4.1-sft_feature-gym:gpt-4.1-sft", "airline", 20),
    ("gpt-4.1_feature-gym:gpt-4.1", "airline", 20),
    ("qwen2.5-7b_feature-gym:qwen2.5-7b", "airline", 50),
    ("toolorchestra_nvidia_2025-12-02:toolorchestra", "retail", 114),
    ("sweep:smollm2-135m-instruct", "airline", 2),
]


@pytest.mark.ray
@pytest.mark.slow
def test_five_imported_real_files_and_a_sweep_make_one_table(real, capsys):
    imports, sweep = real
    assert main(["leaderboard", *map(str, imports), str(sweep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.split()[:3] == ["run:checkpoint", "step", "domains"] for line in lines) == 1  # one table
    rows = [line.split() for line in lines if any(label in line for label, _, _ in REAL_ROWS)]
    assert [(r[1], r[3], int(r[4])) for r in rows] == REAL_ROWS  # a row per checkpoint
    assert all(r[0] == "*" for r in rows)  # each marked: no two share their tasks with every other
    assert lines[-1].startswith("* rests on other tasks than the rest (all rows share 0)")  # airline and retail
    assert main(["leaderboard", *map(str, imports), str(sweep), "--common"]) == 2  # no task in common
    assert "no task in common" in capsys.readouterr().err


@pytest.mark.ray
@pytest.mark.slow
def test_a_real_pair_on_the_same_tasks_is_unmarked_and_common_pairs_it_with_the_sweep(real, capsys):
    imports, sweep = real
    pair = [run for run in imports if run.name.startswith("gpt-4.1")]
    assert main(["leaderboard", *map(str, pair)]) == 0
    out = capsys.readouterr().out
    assert "Every row rests on the same 20 tasks." in out and not any(l.startswith("*") for l in out.splitlines())
    rows = board(capsys, *pair, sweep)["rows"]
    # imported without --step, each file is a set at step 0: the runs in the order given
    assert [r["checkpoint"] for r in rows] == ["gpt-4.1-sft", "gpt-4.1", "smollm2-135m-instruct"]
    assert [r["differs"] for r in rows] == [True, True, False]  # the sweep's 2 tasks are in the test split
    common = board(capsys, *pair, sweep, "--common")["rows"]
    assert [len(r["tasks"]) for r in common] == [2, 2, 2] and not any(r["differs"] for r in common)


@pytest.mark.ray
@pytest.mark.slow
def test_the_real_board_sorts_in_chromium(real, tmp_path, capsys):
    imports, sweep = real
    page = tmp_path / "board.html"
    rows = board(capsys, *imports, sweep, "--html", page)["rows"]
    assert page.read_text().count("<p id='tasks-") == 6
    for order, key in (("accuracy", lambda r: r["metrics"]["handoff"]["accuracy"]["value"]),
                       ("-tasks", lambda r: len(r["tasks"]))):  # numbers, not strings: 114 > 50 > 20 > 2
        shown = browser.Elements(browser.dom(page, f"sort={order}"))
        labels = [e["text"] for e in shown.found if e["tag"] == "td" and e.get("data-sort", "").count(":") == 1]
        expected = sorted(rows, key=key, reverse=order.startswith("-"))
        assert labels == [f"{r['run']}:{r['checkpoint']}" for r in expected], order
