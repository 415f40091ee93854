"""report/tasks.html: for a run of several checkpoints, a task x checkpoint grid of hand-off outcomes,
every cell linking to its episode's transcript, rows that flipped marked with the step; none for
a run of one checkpoint."""

from __future__ import annotations

import re

import pytest

from handoff.report import reduce_run, write_report
from handoff.report.episodes import natural_key
from handoff.report.over_training import LETTER
from handoff.rundir import RunDir
from handoff.testing.synthetic import Behavior, sample_tasks, write_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("grid") / "run", {"early": (100, Behavior(correct_handoff=0.2)),
                                                             "late": (300, Behavior(correct_handoff=0.95))},
                    sample_tasks(2), trials=2, shard_size=8)
    write_report(run, reduce_run(run))
    return RunDir(run)


def _rows(html: str) -> dict[str, str]:
    return {m[1]: m[0] for m in re.finditer(r"<tr class='\w+'><td class='task'>([^<]+)</td>.*?</tr>", html)}


def test_every_cell_links_to_its_episodes_in_numeric_task_order(run):
    html = (run.report / "tasks.html").read_text()
    reduction = reduce_run(run.root)
    rows = _rows(html)
    tasks = sorted({(e.score.domain, e.score.task_id) for e in reduction.episodes}, key=lambda k: (k[0], natural_key(k[1])))
    assert list(rows) == [f"{d} {t}" for d, t in tasks]
    for e in reduction.episodes[:20]:
        row = rows[f"{e.score.domain} {e.score.task_id}"]
        links = re.findall(r"<a class='(\w)' href='([^']+)' title='trial (\d+): (\w+)'>", row)
        assert any(href.endswith(f"{e.model}__{e.score.domain}__{e.score.task_id}__{e.trial}.html") and
                   (letter, int(trial), outcome) == (LETTER[e.score.outcome], e.trial, e.score.outcome.value)
                   for letter, href, trial, outcome in links)
        assert all((run.report / href).is_file() for _, href, _, _ in links)
    assert "[tasks x checkpoints](tasks.html)" in run.report_md.read_text()


def test_flipped_rows_name_the_step(run):
    reduction = reduce_run(run.root)
    rows = _rows((run.report / "tasks.html").read_text())
    correct = {}
    for e in reduction.episodes:
        correct.setdefault((e.score.domain, e.score.task_id), {}).setdefault(e.model, []).append(e.score.outcome.correct)
    for (domain, task), by in correct.items():
        flipped = sum(by["early"]) != sum(by["late"])
        row = rows[f"{domain} {task}"]
        assert row.startswith("<tr class='flipped'>" if flipped else "<tr class='steady'>")
        assert ("<td>300</td>" in row) == flipped


def test_only_flipped_toggles_a_class_that_hides_the_steady_rows(run):
    html = (run.report / "tasks.html").read_text()
    assert "body.only-flipped tr.steady{display:none}" in html
    assert 'document.body.classList.toggle("only-flipped", e.target.checked)' in html and "id='only'" in html


def test_one_checkpoint_has_no_grid(tmp_path):
    run = write_run(tmp_path / "run", {"only": (0, Behavior())}, sample_tasks(1), shard_size=8)
    paths = write_report(run, reduce_run(run))
    assert "tasks_grid" not in paths and not (RunDir(run).report / "tasks.html").exists()
