"""Flips in `handoff compare`: the tasks whose outcome differs between side A and side B
(docs/reports.md, "Compare").

A task (domain, task id) both sides ran *flips* on hand-off correctness when the share of its
trials with a correct hand-off (handoff.rules.outcome: correct hand-off or correct no-transfer)
differs between A and B, and separately on tau2 success when the share of its trials that tau2
counts as successful differs, and on hand-off correctness under the episode label
(`handoff_episode`: the task's label, or 1 after a user request). With one trial per task:
correct in one, not in the other. A flip is
"better in A" when A's share is the higher. Each flip lists every trial's outcome on both sides.
Beside each kind's counts, the two-sided exact sign test of "better in A" against "better in B"
(ties, the tasks that did not flip, left out).
"""

from __future__ import annotations

from collections import defaultdict
from html import escape
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from tau2.metrics.agent_metrics import is_successful

from handoff.records import write_atomic
from handoff.report.episodes import natural_key, slug
from handoff.report.reducer import score_run
from handoff.report.transcripts import page, transcripts_of
from handoff.rules import EpisodeScore
from handoff.rules.intervals import sign_test
from handoff.rules.label import display_name
from handoff.rundir import RunDir
from handoff.scoring import Scorer

Kind = Literal["handoff", "handoff_episode", "tau2_success"]
TITLES = {"handoff": "hand-off correctness", "handoff_episode": "hand-off correctness (episode label)",
          "tau2_success": "tau2 success"}
SHOWN = 5  # flips listed in the terminal table, per kind


class TrialOutcome(BaseModel):
    trial: int | None
    outcome: str
    episode_outcome: str | None = None  # against the episode label (docs/metrics.md, "Episode labels")
    episode_rule: str | None = None  # the episode label's rule (the task's, or user_request)
    handoff_turn: int | None
    tau2_reward: float | None
    tau2_success: bool


class Flip(BaseModel):
    kind: Kind
    domain: str
    task_id: str
    rule: str
    better: Literal["A", "B"]
    a: list[TrialOutcome]
    b: list[TrialOutcome]


def _trial(s: EpisodeScore) -> TrialOutcome:
    return TrialOutcome(trial=s.trial, outcome=s.outcome.value, episode_outcome=s.episode_outcome.value,
                        episode_rule=s.episode_rule,
                        handoff_turn=s.handoff_turn,
                        tau2_reward=s.tau2_reward, tau2_success=is_successful(s.tau2_reward or 0.0))


def _share(trials: list[TrialOutcome], kind: Kind) -> float:
    correct = ("correct_handoff", "correct_no_transfer")
    good = [t.tau2_success if kind == "tau2_success" else _outcome(t, kind) in correct for t in trials]
    return sum(good) / len(good)


def _outcome(t: TrialOutcome, kind: Kind) -> str | None:
    return t.episode_outcome if kind == "handoff_episode" else t.outcome


def _by_task(scores: list[EpisodeScore]) -> dict[tuple[str, str], list[EpisodeScore]]:
    tasks = defaultdict(list)
    for s in scores:
        tasks[(s.domain, s.task_id)].append(s)
    return tasks


def find_flips(a_scores: list[EpisodeScore], b_scores: list[EpisodeScore]) -> list[Flip]:
    """Every flip of both kinds on the tasks both sides ran, by kind, domain and task id."""
    a_tasks, b_tasks = _by_task(a_scores), _by_task(b_scores)
    flips = []
    for kind in TITLES:
        for key in sorted(a_tasks.keys() & b_tasks.keys(), key=lambda k: (k[0], natural_key(k[1]))):
            a = [_trial(s) for s in sorted(a_tasks[key], key=lambda s: s.trial or 0)]
            b = [_trial(s) for s in sorted(b_tasks[key], key=lambda s: s.trial or 0)]
            share_a, share_b = _share(a, kind), _share(b, kind)
            if share_a != share_b:
                flips.append(Flip(kind=kind, domain=key[0], task_id=key[1], rule=a_tasks[key][0].label.rule,
                                  better="A" if share_a > share_b else "B", a=a, b=b))
    return flips


def _outcomes(trials: list[TrialOutcome], kind: Kind) -> str:
    if kind == "tau2_success":
        return " ".join("success" if t.tau2_success else "fail" for t in trials)
    return " ".join(str(_outcome(t, kind)) for t in trials)


def rule_text(f: Flip) -> str:
    """The label rule the flip's outcomes judge against: the task's, or for episode-label outcomes
    the episode rules of its trials (A's and B's may differ: a user request makes it user_request)."""
    if f.kind != "handoff_episode":
        return f"task rule {f.rule}: {display_name(f.rule)}"
    rules = sorted({t.episode_rule or f.rule for t in f.a + f.b})
    return "episode rule " + ", ".join(f"{r}: {display_name(r)}" for r in rules)


def anchor(f: Flip) -> str:
    return slug(f"{f.kind}-{f.domain}-{f.task_id}")


def summary(flips: list[Flip], where: str) -> list[str]:
    """The terminal table's end: flips each way per kind, the first few, and where to read them."""
    lines = []
    for kind, title in TITLES.items():
        of_kind = [f for f in flips if f.kind == kind]
        better_a = sum(f.better == "A" for f in of_kind)
        better_b = len(of_kind) - better_a
        lines.append(f"Flips in {title}: {len(of_kind)} tasks ({better_a} better in A, {better_b} better in B; "
                     f"sign test p = {sign_test(better_a, better_b):.3g})")
        for f in of_kind[:SHOWN]:
            lines.append(f"  {f.domain} {f.task_id} ({rule_text(f)}): A {_outcomes(f.a, kind)} | B {_outcomes(f.b, kind)}")
        if len(of_kind) > SHOWN:
            lines.append(f"  ... {len(of_kind) - SHOWN} more")
    return lines + [where]


def _transcripts(run_dir: Path, checkpoint: str, tasks: set[tuple[str, str]]) -> dict[tuple, str]:
    """The transcripts of a checkpoint's episodes of these tasks, by (domain, task id, trial)."""
    run = RunDir(run_dir)
    with run.reducing():  # scoring may rewrite reduced/scores/, as a sweep finishing this run does
        _, by_shard, _ = score_run(run, Scorer.for_config(run.config))
        wanted = {shard: [ep for ep in eps if ep.model == checkpoint and (ep.score.domain, ep.score.task_id) in tasks]
                  for shard, eps in by_shard.items()}
        return {key[1:]: html for key, html in transcripts_of(run, wanted).items()}


def contents(flips: list[Flip]) -> str:
    """The page's table of contents: per kind, a link to each flipped task's section."""
    parts = ["<nav id='contents'><h2>Contents</h2>"]
    for kind, title in TITLES.items():
        of_kind = [f for f in flips if f.kind == kind]
        if of_kind:
            links = " ".join(f"<a href='#{anchor(f)}'>{escape(f.domain)} {escape(f.task_id)} ({f.better})</a>"
                             for f in of_kind)
            parts.append(f"<p><b>{escape(title)}</b> ({len(of_kind)}; better in A or B): {links}</p>")
    return "".join(parts) + "</nav>"


def write_flips_page(path: str | Path, side_a, side_b, flips: list[Flip]) -> Path:
    """A page with A's and B's transcripts of every flipped task side by side, trial by trial."""
    tasks = {(f.domain, f.task_id) for f in flips}
    a = _transcripts(side_a.run_dir, side_a.checkpoint, tasks)
    b = _transcripts(side_b.run_dir, side_b.checkpoint, tasks)
    sections, seen, label_a, label_b = [], set(), escape(side_a.label), escape(side_b.label)
    for f in flips:
        head = (f"<h2 class='flip' id='{anchor(f)}' data-kind='{f.kind}'>{escape(f.domain)} task {escape(f.task_id)} "
                f"({escape(rule_text(f))}): {TITLES[f.kind]} better in {f.better}</h2>")
        if (f.domain, f.task_id) in seen:  # several kinds flipped: the transcripts are above
            sections.append(head + "<p>(transcripts above)</p>")
            continue
        seen.add((f.domain, f.task_id))
        trials = sorted({t.trial for t in f.a} | {t.trial for t in f.b}, key=lambda t: t or 0)
        rows = "".join(f"<tr><td>{a.get((f.domain, f.task_id, t), '(no episode)')}</td>"
                       f"<td>{b.get((f.domain, f.task_id, t), '(no episode)')}</td></tr>" for t in trials)
        sections.append(f"{head}<table class='sbs'><tr><th>A: {label_a}</th><th>B: {label_b}</th></tr>"
                        f"{rows}</table>")
    body = (f"<h1>Flips: A = {label_a}, B = {label_b}</h1><p>{len(flips)} flips "
            f"(docs/reports.md, Compare).</p>" + contents(flips) + "".join(sections))
    style = "<style>table.sbs{width:100%;table-layout:fixed}table.sbs td{vertical-align:top;width:50%}</style>"
    path = Path(path)
    write_atomic(path, page(f"Flips {side_a.label} vs {side_b.label}", body, head=style))
    return path
