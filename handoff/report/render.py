"""`handoff report`: report/report.md and report/report.html (the same Markdown rendered by
markdown-it) with the plots of handoff.report.plots, readable without W&B, and the episode pages
(handoff.report.episodes): every number in the tables links to the episodes behind it."""

from __future__ import annotations

from html import escape
from pathlib import Path

from handoff.records import write_atomic
from handoff.report import episodes as pages
from handoff.report.adaptive import adaptive_result, markdown_lines
from handoff.report.cost_view import cost_section
from handoff.report.imported import (
    attribution_lines,
    drift_lines,
    episodes_note,
    left_out_warnings,
    replay_error_lines,
)
from handoff.report.over_training import PAGE as TASK_GRID
from handoff.report.over_training import write_task_grid
from handoff.report.plots import all_plots
from handoff.report.reducer import ALL, GroupMetrics, Reduction
from handoff.report.text import (
    LABEL_NOTE,
    dominant_rule,
    shown_domains,
    shown_slices,
    truncation_notes,
    write_text_report,
)
from handoff.rules.label import display_name
from handoff.rules.metrics import ANY, Interval
from handoff.rules.violations import STYLE_RULES, SUBSTANTIVE
from handoff.rundir import ImportSection, RunDir

# Headline columns: the value picked from a slice's metrics, and the index filter behind it.
HEADLINE = {
    "accuracy": (lambda m: m.handoff.accuracy, {}),
    "precision": (lambda m: m.handoff.precision, {"outcome": pages.TRANSFERRED}),
    "recall": (lambda m: m.handoff.recall, {"outcome": pages.SHOULD_TRANSFER}),
    "F1": (lambda m: m.handoff.f1, {"outcome": pages.NOT_CORRECT_NO_TRANSFER}),
    "tau2 reward": (lambda m: m.tau2_reward, {"sort": "tau2"}),
    "pass^1": (lambda m: m.pass_hat_k.get(1), {"sort": "tau2"}),
    "reward": (lambda m: m.reward, {"sort": "reward"}),
    "substantive violations": (lambda m: m.violation_rate.get(SUBSTANTIVE), {"violation": pages.SUBSTANTIVE_RULES}),
    **{"style violations" + "'" * i: (lambda m, r=r: m.violation_rate.get(r.value), {"violation": r.value})
       for i, r in enumerate(STYLE_RULES)},  # multiple_actions_in_turn (the note under the table says so)
    "format err./100 turns": (lambda m: m.format_errors_per_100_turns["any"], {"format": "any"}),
}
HEADLINE_DIGITS = 2  # the headline's 14 columns fit 1,400 px; the sections below have 3 digits

# Numbers never wrap; a table wider than the page scrolls within itself (display:block), never the page.
HTML_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:1600px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse;font-size:90%;display:block;max-width:100%;overflow-x:auto}}
td,th{{border:1px solid #ccc;padding:2px 6px}}td{{white-space:nowrap}}th{{vertical-align:bottom}}
img{{max-width:100%}}</style></head><body>
{body}</body></html>
"""


def fmt(iv: Interval | None, digits: int = 3) -> str:
    if iv is None or iv.value is None:
        return "n/a"
    if iv.lo is None or iv.hi is None:
        return f"{iv.value:.{digits}f}"
    return f"{iv.value:.{digits}f} [{iv.lo:.{digits}f}, {iv.hi:.{digits}f}]"


def linked(text, **filters) -> str:
    """A table cell linking to the index of the episodes behind it."""
    return f"[{text}]({pages.link(**filters)})"


def table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows] + [""]


def _slices(reduction: Reduction):
    """(checkpoint, step, domain, metrics) for every domain and all domains together."""
    for model, step in reduction.checkpoints():
        for domain in shown_domains(reduction):
            try:
                yield model, step, domain, reduction.group(model, domain).metrics
            except KeyError:
                continue


def _keyed_table(reduction: Reduction, pick, filters, digits: int = 3) -> list[str]:
    """A table with one column per key of a dict of Intervals picked from each slice's metrics;
    `filters(key)` gives the index filter of a column."""
    rows = [(model, step, domain, pick(m)) for model, step, domain, m in _slices(reduction)]
    keys = sorted({k for *_, d in rows for k, iv in d.items() if iv.n})
    if not keys:
        return ["Nothing to show: no episode of this run has one.", ""]
    return table(["checkpoint", "step", "domain", *keys],
                 [[model, step, domain, *(_cell(d.get(k), digits, checkpoint=model, domain=domain, **filters(k)) for k in keys)]
                  for model, step, domain, d in rows])


def _cell(iv: Interval | None, digits: int = 3, **filters) -> str:
    return fmt(iv) if iv is None or iv.value is None else linked(fmt(iv, digits), **filters)


def _slice_link(g: GroupMetrics, text: str) -> str:
    return linked(text, checkpoint=g.model, domain=g.domain)


def _headline_cell(name: str, iv: Interval | None, **filters) -> str:
    """A headline cell; precision's and recall's with the positives they rest on."""
    cell = _cell(iv, HEADLINE_DIGITS, **filters)
    return f"{cell} ({iv.n} pos)" if name in ("precision", "recall") and iv is not None else cell


def _any_or(field: str, key: str) -> dict:
    return {field: "any" if key == ANY else key}


def _episode_label(m) -> dict[str, Interval]:
    """The hand-off headline under the episode label (docs/metrics.md, "Episode labels")."""
    h = m.handoff_episode
    if h is None:
        return {}
    return {"1 precision": h.precision, "2 recall": h.recall, "3 F1": h.f1, "4 accuracy": h.accuracy}


def _quality(m) -> dict[str, Interval]:
    return {k: v for k, v in (("after a write", m.handoff_after_write),
                              ("summary names the ids", m.handoff_summary_complete),
                              ("unneeded, after trying", m.unneeded_handoff_after_trying)) if v is not None}


def _user_simulator(m) -> dict[str, Interval]:
    return {k: v for k, v in (("user_request_offscript", m.user_request_offscript),
                              ("user_ended_for_transfer", m.user_ended_for_transfer)) if v is not None}


# Tables per key: title, the dict picked from a slice's metrics, the index filter of a key (and the
# digits shown, default 3).
SECTIONS = [
    ("Outcome classes (docs/metrics.md)", lambda m: m.outcomes, lambda k: {"outcome": k}),
    ("Transfer rate by label rule", lambda m: m.transfer_rate_by_rule, lambda k: {"rule": k}),
    ("Hand-off under the episode label (the task's, or 1 after a user request; docs/metrics.md)", _episode_label,
     lambda k: {}),
    ("Outcome classes split by who asked for the human, task label", lambda m: m.outcome_details,
     lambda k: {"detail": k}),
    ("Outcome classes split by who asked for the human, episode label", lambda m: m.outcome_details_episode,
     lambda k: {"episode_detail": k}),
    ("Who started the hand-off (share of the hand-offs)", lambda m: m.handoff_initiator, lambda k: {"initiator": k}),
    (("The user simulator, not the agent: requests for a human its scenario never mentions (a change between "
      "checkpoints is the agent provoking it)"), _user_simulator, lambda k: {}),
    ("Agent turn of the hand-off by label rule (median, 95% interval)", lambda m: m.handoff_turn_by_rule,
     lambda k: {"rule": None if k == ANY else k, "outcome": pages.TRANSFERRED, "sort": "turn"}, 1),
    ("Agent turns from the known need (turn 1, or the user's request) to the hand-off, by episode rule (median)",
     lambda m: m.handoff_delay_by_rule, lambda k: {"outcome": pages.TRANSFERRED, "sort": "turn"}, 1),
    ("Hand-off quality: needed hand-offs made after a write; hand-off summaries naming the user and the ids",
     _quality, lambda k: {"outcome": pages.TRANSFERRED}),
    (("Episodes with a policy violation, per rule (substantive: any rule but the style rule "
      "multiple_actions_in_turn, a tool call with text beside it)"), lambda m: m.violation_rate,
     lambda k: {"violation": pages.SUBSTANTIVE_RULES if k == SUBSTANTIVE else k}),
    ("Format errors per 100 assistant turns, per kind", lambda m: m.format_errors_per_100_turns,
     lambda k: _any_or("format", k)),
    ("Termination reasons", lambda m: m.termination, lambda k: {"termination": k}),
]


def imported(section: ImportSection | None) -> list[str]:
    """A run of `handoff import`: what each file gave, and every episode left out or kept although
    its re-evaluated reward differs from the recorded one."""
    if section is None:
        return []
    fate = "kept with the re-evaluated reward" if section.keep_mismatched else "left out of the metrics"
    lines = ["## Imported tau2 files", "",
             (f"Every reward was re-evaluated by tau2's evaluator against its pinned task (the id the file gives, "
              f"checked, or the one recovered). "
              f"Reward mismatches are {fate}; episodes that could not be replayed are left out."
              + ("" if section.curve else " The checkpoints are a set of files, not steps of one training run "
                 "(no --step): no figure draws them as a curve, and W&B logs them as a set.")), ""]
    lines += [f"**Warning: {w}.**\n" for w in drift_lines(section) + left_out_warnings(section)]
    rows = []
    for f in section.files:
        mismatched = sum(m.file == f.path for m in section.reward_mismatches)
        failed = sum(e.file == f.path for e in section.replay_errors)
        untasked = sum(a.file == f.path and a.task_id is None for a in section.attributions)
        rows.append([f"`{Path(f.path).name}`", f.checkpoint, f.agent or "-", f.step, f.domain, f.episodes,
                     f.episodes - mismatched - failed - untasked, mismatched, failed, untasked])
    lines += table(["file", "checkpoint", "agent", "step", "domain", "simulations", "agreed", "mismatched",
                    "failed to replay", "no task"], rows)
    checkpoint = {f.path: f.checkpoint for f in section.files}
    if section.reward_mismatches:
        tasks: dict[tuple, list[str]] = {}  # (checkpoint, recorded, re-evaluated) -> its tasks
        for m in section.reward_mismatches:
            tasks.setdefault((checkpoint[m.file], m.recorded, m.reevaluated), []).append(
                m.task_id if m.trial == 0 else f"{m.task_id} (trial {m.trial})")
        lines += ["### Reward mismatches", ""] + table(
            ["checkpoint", "recorded", "re-evaluated", "episodes", "tasks"],
            [[*key, len(ids), ", ".join(sorted(ids, key=pages.natural_key))] for key, ids in tasks.items()])
    return lines + replay_error_lines(section, table) + attribution_lines(section, table)


def _reachable_tau2_table(reduction: Reduction) -> list[str]:
    """tau2's reward and success with and without the tasks whose gold no policy-following agent reaches."""
    groups = [g for model, _ in reduction.checkpoints() for domain in shown_domains(reduction)
              for g in reduction.groups if (g.model, g.domain, g.rule) == (model, domain, ALL)]
    return ["## tau2 reward without unreachable golds", "",
            "Without the episodes of tasks whose reference solution breaks the policy in a way no correct agent "
            "follows (docs/tasks.md, \"Golds against the policy\"): tau2 scores a correct agent 0 there.", ""] + table(
        ["checkpoint", "step", "domain", "episodes left out", "tau2 reward", "tau2 reward (reachable)",
         "tau2 success", "tau2 success (reachable)"],
        [[g.model, g.step, g.domain, g.n_unreachable, fmt(g.metrics.tau2_reward), fmt(g.tau2_reward_reachable),
          fmt(g.metrics.tau2_success), fmt(g.tau2_success_reachable)] for g in groups])


def _headline_notes(reduction: Reduction) -> list[str]:
    """The label the headline judges against, and the rule each checkpoint breaks most often."""
    lines = [LABEL_NOTE.replace(" is in report.md.", " is below.") + " Substantive violations: any rule but the "
             "style rule; style violations: " + ", ".join(f"`{r.value}`" for r in STYLE_RULES)
             + " (a tool call with text beside it).", ""]
    for model, _ in reduction.checkpoints():
        top = dominant_rule(reduction.group(model).metrics)
        if top is not None:
            kind = "the style rule" if top[0] in {r.value for r in STYLE_RULES} else "a substantive rule"
            lines.append(f"- {model}: the most frequent violation is `{top[0]}` ({kind}), in "
                         f"{linked(fmt(top[1]), checkpoint=model, violation=top[0])} of its episodes.")
    return lines + ["", *truncation_notes(reduction), "", *_rule_legend(reduction)]


def _rule_legend(reduction: Reduction) -> list[str]:
    """What each label rule of the run says (the ids stay as they are in files and filters)."""
    rules = sorted({r for g in reduction.groups for r in
                    [*g.metrics.transfer_rate_by_rule, *g.metrics.transfer_rate_by_episode_rule]})
    return ["Label rules: " + "; ".join(f"`{r}`: {display_name(r)}" for r in rules) + ".", ""] if rules else []


def markdown(run: RunDir, reduction: Reduction, plots: dict[str, Path]) -> str:
    lines = [f"# Hand-off report: {reduction.run}", "",
             f"Run directory `{run.root}`: {reduction.n_episodes} episodes from {len(reduction.shards)} shards"
             f"; corrupt shards: {', '.join(reduction.corrupt_shards) or 'none'}"
             + (f"; not this run's, skipped: {', '.join(reduction.foreign_shards)}" if reduction.foreign_shards else "")
             + f"; failed shards: {', '.join(reduction.failed_shards) or 'none'}"
             + "".join(f"; {name} skipped, left out of every number: {why}"
                       for name, why in sorted(run.manifest.skipped().items())) + ".",
             "Values are given with their 95% interval (docs/metrics.md). Every number links to the episodes "
             f"behind it; [all episodes]({pages.link()}) (filter and sort them there)"
             + (f"; [tasks x checkpoints]({TASK_GRID}) (which tasks flipped, at which step)."
                if len(reduction.checkpoints()) > 1 else "."), "",
             *imported(run.manifest.imported), "## Headline metrics", ""]
    lines += table(["checkpoint", "step", "domain", "episodes", "tasks", *HEADLINE],
                   [[model, step, domain, linked(m.n_episodes, checkpoint=model, domain=domain)
                     + episodes_note(run.manifest.imported, model, domain), m.n_tasks,
                     *(_headline_cell(name, pick(m), checkpoint=model, domain=domain, **f)
                       for name, (pick, f) in HEADLINE.items())]
                    for model, step, domain, m in _slices(reduction)])
    lines += [("Precision and recall rest on the positives shown (`pos`: the transfers, the episodes that should "
               "transfer); a value without an interval rests on one task (docs/metrics.md)."), ""]
    lines += _headline_notes(reduction)
    adaptive = adaptive_result(run)
    lines += markdown_lines(adaptive) if adaptive is not None else []
    lines += _reachable_tau2_table(reduction)
    lines += ["## Cost", "", *cost_section(shown_slices(reduction), table, _slice_link)]
    for title, *section in SECTIONS:
        lines += [f"## {title}", ""] + _keyed_table(reduction, *section)
    lines += ["## Plots", ""] if plots else ["No episodes yet: nothing to plot.", ""]
    if plots and len({step for _, step in reduction.checkpoints()}) < 2:
        lines += ["One checkpoint step: the plots against the step (precision and recall, rates) need two; "
                  "the tables above hold their values.", ""]
    lines += [f"![{name}]({path.relative_to(run.report).as_posix()})\n" for name, path in plots.items()]
    return "\n".join(lines)


def write_report(run_dir: str | Path, reduction: Reduction) -> dict[str, Path]:
    """Write report/report.md, report/report.html, report/plots/*.png and the episode pages
    (report/episodes/); return their paths."""
    from markdown_it import MarkdownIt

    run = RunDir(run_dir)
    imported_set = run.manifest.imported is not None and not run.manifest.imported.curve
    plots = all_plots(reduction, run.plots_dir, curves=not imported_set)
    text = markdown(run, reduction, plots)
    md, html = run.report_md, run.report_html
    write_atomic(md, text)
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)  # names and outputs are untrusted
    write_atomic(html, HTML_PAGE.format(title=escape(f"Hand-off report: {reduction.run}"), body=body))
    return {"report_md": md, "report_html": html, **write_text_report(run, reduction), **write_task_grid(run, reduction),
            **{f"plot_{k}": v for k, v in plots.items()}, **pages.write_episode_pages(run.root, reduction)}
