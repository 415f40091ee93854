"""`handoff leaderboard RUN...`: one row per checkpoint across any number of runs and imports, with the
headline metrics (value, 95% interval, k/n), the domains and the number of tasks each row rests on.
Rows whose task sets differ from the others are marked; `common=True` restricts every row to the
tasks all rows ran (a paired view: the same tasks behind every number). The HTML page sorts by any
column and lists each row's tasks.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from pydantic import BaseModel

from handoff.records import write_atomic
from handoff.report.episodes import natural_key
from handoff.report.reducer import reduce_run
from handoff.report.text import grid, rate
from handoff.rules import EpisodeScore
from handoff.rules.metrics import Interval, Metrics, compute_metrics
from handoff.rules.violations import SUBSTANTIVE
from handoff.rundir import RunDir, RunDirError
from handoff.scoring import Scorer

TaskKey = tuple[str, str]
# Column -> the Interval of a row's metrics it shows (and whether it shows k/n)
COLUMNS = {
    "accuracy": (lambda m: m.handoff.accuracy, True),
    "precision": (lambda m: m.handoff.precision, True),
    "recall": (lambda m: m.handoff.recall, True),
    "unneeded": (lambda m: m.outcomes.get("unneeded_handoff"), True),
    "missed": (lambda m: m.outcomes.get("missed_handoff"), True),
    "tau2 reward": (lambda m: m.tau2_reward, False),
    "tau2 success": (lambda m: m.tau2_success, True),
    "substantive viol.": (lambda m: m.violation_rate.get(SUBSTANTIVE), True),
    "reward": (lambda m: m.reward, False),
}


class Row(BaseModel):
    run: str
    checkpoint: str
    step: int
    domains: list[str]
    tasks: list[TaskKey]
    episodes: int
    metrics: Metrics
    differs: bool = False  # its task set is not every other row's

    @property
    def label(self) -> str:
        return f"{self.run}:{self.checkpoint}"


def _run_scores(run_dir: Path) -> dict[tuple[str, int], list[EpisodeScore]]:
    """The scores of each checkpoint (name, step) of a run, reduced incrementally as compare does."""
    run = RunDir(run_dir)
    if not run.exists():
        raise RunDirError(f"{run_dir}: not a run directory (no manifest.json)")
    out: dict[tuple[str, int], list[EpisodeScore]] = {}
    for e in reduce_run(run_dir, Scorer.for_config(run.config)).episodes:
        out.setdefault((e.model, e.step), []).append(e.score.model_copy(update={"trial": e.trial}))
    return out


def _tasks(scores: list[EpisodeScore]) -> set[TaskKey]:
    return {(s.domain, s.task_id) for s in scores}


def rows(run_dirs: list[str | Path], common: bool = False) -> tuple[list[Row], set[TaskKey]]:
    """One Row per checkpoint of every run (in the order given, then by step), and the tasks all
    rows ran. With `common`, each row's metrics are over those tasks only."""
    by_row = {(Path(d).name, name, step): scores for d in run_dirs for (name, step), scores in
              sorted(_run_scores(Path(d)).items(), key=lambda kv: (kv[0][1], kv[0][0]))}
    if not by_row:
        raise RunDirError("no episodes in " + ", ".join(map(str, run_dirs)))
    shared = set.intersection(*(_tasks(s) for s in by_row.values()))
    if common and not shared:
        raise RunDirError("--common: the rows have no task in common")
    out = []
    for (run, name, step), scores in by_row.items():
        tasks = _tasks(scores)
        kept = [s for s in scores if (s.domain, s.task_id) in shared] if common else scores
        out.append(Row(run=run, checkpoint=name, step=step, domains=sorted({s.domain for s in kept}),
                       tasks=sorted(_tasks(kept), key=lambda t: (t[0], natural_key(t[1]))), episodes=len(kept),
                       metrics=compute_metrics(kept, ks=[1]), differs=not common and tasks != shared))
    return out, shared


def _cells(row: Row) -> list[str]:
    return [rate(pick(row.metrics), counts=counts) for pick, counts in COLUMNS.values()]


def text_table(board: list[Row], shared: set[TaskKey], common: bool) -> str:
    """The terminal's table: a row per checkpoint, `*` on rows whose task set differs."""
    header = ["", "run:checkpoint", "step", "domains", "tasks", "episodes", *COLUMNS]
    lines = grid(header, [["*" if r.differs else "", r.label, str(r.step), ",".join(r.domains),
                           str(len(r.tasks)), str(r.episodes), *_cells(r)] for r in board])
    if common:
        note = f"Every row over the {len(shared)} tasks all rows ran (--common): the same tasks behind every number."
    elif any(r.differs for r in board):
        note = (f"* rests on other tasks than the rest (all rows share {len(shared)}): its numbers do not compare "
                "one to one; --common restricts every row to the shared tasks.")
    else:
        note = f"Every row rests on the same {len(shared)} tasks."
    return "\n".join(["Rates: value [95% interval] k/n; hand-off columns against the task label.", "", *lines, "",
                      note])


SORTER = """<script>
"use strict";
// Click a column to sort (again to reverse); #sort=<column> or #sort=-<column> sorts on load.
const heads = [...document.querySelectorAll("#board th")];
function sortBy(col, desc) {
  const body = document.querySelector("#board tbody"), rows = [...body.rows];
  const key = r => { const v = r.cells[col].dataset.sort; return v === "" ? null : isNaN(+v) ? v : +v; };
  rows.sort((a, b) => { const x = key(a), y = key(b);
    const c = x === y ? 0 : x === null ? 1 : y === null ? -1 : x < y ? -1 : 1; return desc ? -c : c; });
  rows.forEach(r => body.appendChild(r));
  heads.forEach((h, i) => { h.className = i === col ? "sorted" : ""; h.dataset.order = i === col ? (desc ? "desc" : "asc") : ""; });
}
heads.forEach((th, col) => th.addEventListener("click", () => sortBy(col, th.dataset.order !== "desc")));
const wanted = new URLSearchParams(location.hash.slice(1)).get("sort");
if (wanted) { const desc = wanted.startsWith("-"), name = desc ? wanted.slice(1) : wanted;
  const col = heads.findIndex(h => h.textContent === name); if (col >= 0) sortBy(col, desc); }
</script>"""
STYLE = ("<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:90%;"
         "display:block;max-width:100%;overflow-x:auto}"
         "td,th{border:1px solid #ccc;padding:2px 6px;white-space:nowrap}th{cursor:pointer;background:#f0f0f0}"
         "th.sorted{background:#dde8f5}tr.differs td:first-child{color:#b22a1d;font-weight:600}</style>")


def _td(text: str, sort) -> str:
    return f"<td data-sort='{escape('' if sort is None else str(sort), quote=True)}'>{escape(text)}</td>"


def html_page(board: list[Row], shared: set[TaskKey], common: bool) -> str:
    """A page with the table (click a column to sort, again to reverse) and each row's tasks."""
    header = ["", "run:checkpoint", "step", "domains", "tasks", "episodes", *COLUMNS]
    body = []
    for i, r in enumerate(board):
        metrics = [_td(rate(pick(r.metrics), counts=counts), (pick(r.metrics) or Interval(value=None, lo=None, hi=None, n=0)).value)
                   for pick, counts in COLUMNS.values()]
        mark = "*" if r.differs else ""
        body.append(f"<tr class='{'differs' if mark else ''}'>{_td(mark, mark)}{_td(r.label, r.label)}"
                    f"{_td(str(r.step), r.step)}{_td(','.join(r.domains), ','.join(r.domains))}"
                    f"<td data-sort='{len(r.tasks)}'><a href='#tasks-{i}'>{len(r.tasks)}</a></td>"
                    f"{_td(str(r.episodes), r.episodes)}{''.join(metrics)}</tr>")
    tasks = "".join(f"<p id='tasks-{i}'><b>{escape(r.label)}</b> ({len(r.tasks)}): "
                    + escape(", ".join(f"{d} {t}" for d, t in r.tasks)) + "</p>" for i, r in enumerate(board))
    note = escape(text_table(board, shared, common).splitlines()[-1])
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Leaderboard</title>{STYLE}</head><body>"
            f"<h1>Leaderboard</h1><p>Rates: value [95% interval] k/n; hand-off columns against the task label. "
            f"Click a column to sort.</p><table id='board'><thead><tr>"
            + "".join(f"<th>{escape(h)}</th>" for h in header) + f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
            f"<p>{note}</p><h2>The tasks each row rests on</h2>{tasks}{SORTER}</body></html>\n")


def leaderboard(run_dirs: list[str | Path], html: str | Path | None = None, common: bool = False,
                as_json: bool = False) -> str:
    """The table (or JSON) for the terminal; the HTML page written to `html` when given."""
    board, shared = rows(run_dirs, common)
    if html is not None:
        write_atomic(Path(html), html_page(board, shared, common))
    if as_json:
        return json.dumps({"common": common, "shared_tasks": len(shared),
                           "rows": [r.model_dump(mode="json") for r in board]}, indent=1)
    return text_table(board, shared, common) + (f"\nHTML (sortable): {html}" if html is not None else "")
