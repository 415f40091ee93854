"""report/tasks.html for a run of several checkpoints: a task x checkpoint grid of hand-off outcomes
(which tasks flipped over training, and at which step), each cell linking to its episodes'
transcripts. One letter per trial: C correct hand-off, N correct no-transfer, M missed, U unneeded;
a row whose correctness changes between checkpoints is marked with the first step it changed at."""

from __future__ import annotations

from collections import defaultdict
from html import escape
from pathlib import Path

from handoff.records import write_atomic
from handoff.report.episodes import episode_href, natural_key
from handoff.report.reducer import Reduction
from handoff.rules import Outcome
from handoff.rundir import RunDir

PAGE = "tasks.html"  # relative to report/
LETTER = {Outcome.CORRECT_HANDOFF: "C", Outcome.CORRECT_NO_TRANSFER: "N", Outcome.MISSED_HANDOFF: "M",
          Outcome.UNNEEDED_HANDOFF: "U"}
STYLE = """<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:90%;display:block;
max-width:100%;overflow-x:auto}td,th{border:1px solid #ccc;padding:2px 6px;white-space:nowrap;text-align:center}
td.task{text-align:left}a.C,a.N{color:#1d7a36}a.M,a.U{color:#b22a1d;font-weight:600}a{text-decoration:none;margin:0 1px}
tr.flipped td.task{background:#fff3cd}body.only-flipped tr.steady{display:none}</style>"""
TOGGLE = """<script>document.getElementById("only").addEventListener("change",
e => document.body.classList.toggle("only-flipped", e.target.checked));</script>"""

Cell = list[tuple[Outcome, str, int]]  # (outcome, transcript href relative to report/, trial) per trial


def grid(reduction: Reduction) -> dict[tuple[str, str], dict[str, Cell]]:
    """(domain, task) -> checkpoint -> its trials' outcomes and transcript links."""
    out: dict[tuple[str, str], dict[str, Cell]] = defaultdict(lambda: defaultdict(list))
    for shard, eps in reduction.by_shard.items():
        for ep in eps:
            out[(ep.score.domain, ep.score.task_id)][ep.model].append(
                (ep.score.outcome, "episodes/" + episode_href(shard, ep), ep.trial))
    return out


def first_flip(cells: dict[str, Cell], order: list[tuple[str, int]]) -> int | None:
    """The step of the first checkpoint whose share of correct trials differs from the one before."""
    shares = [(step, sum(o.correct for o, *_ in cells[name]) / len(cells[name])) for name, step in order if cells.get(name)]
    return next((step for (_, a), (step, b) in zip(shares, shares[1:]) if a != b), None)


def _cell(cell: Cell) -> str:
    links = "".join(f"<a class='{LETTER[o]}' href='{escape(href, quote=True)}' title='trial {trial}: {o.value}'>"
                    f"{LETTER[o]}</a>" for o, href, trial in sorted(cell, key=lambda c: c[2]))
    return f"<td>{links}</td>" if cell else "<td></td>"


def page(reduction: Reduction) -> str:
    order = reduction.checkpoints()
    cells = grid(reduction)
    rows, flipped = [], 0
    for domain, task in sorted(cells, key=lambda k: (k[0], natural_key(k[1]))):
        step = first_flip(cells[(domain, task)], order)
        flipped += step is not None
        rows.append(f"<tr class='{'flipped' if step is not None else 'steady'}'><td class='task'>{escape(domain)} "
                    f"{escape(task)}</td><td>{'' if step is None else step}</td>"
                    + "".join(_cell(cells[(domain, task)].get(name, [])) for name, _ in order) + "</tr>")
    head = "".join(f"<th>{escape(name)}<br>step {step}</th>" for name, step in order)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Tasks x checkpoints: {escape(reduction.run)}"
            f"</title>{STYLE}</head><body><h1>Tasks x checkpoints: {escape(reduction.run)}</h1>"
            f"<p><a href='report.html'>&larr; report</a> &middot; {len(rows)} tasks, {flipped} flipped (hand-off "
            f"correctness changed between checkpoints) &middot; <label><input type='checkbox' id='only'> only the "
            f"flipped</label></p><p>Task label outcome per trial, each linking to its transcript: C correct "
            f"hand-off, N correct no-transfer, M missed hand-off, U unneeded hand-off.</p>"
            f"<table><thead><tr><th>task</th><th>flipped at step</th>{head}</tr></thead><tbody>{''.join(rows)}"
            f"</tbody></table>{TOGGLE}</body></html>\n")


def write_task_grid(run: RunDir, reduction: Reduction) -> dict[str, Path]:
    """report/tasks.html when the run has several checkpoints (removed otherwise); its path."""
    path = run.report / PAGE
    if len(reduction.checkpoints()) < 2:
        path.unlink(missing_ok=True)
        return {}
    write_atomic(path, page(reduction))
    return {"tasks_grid": path}
