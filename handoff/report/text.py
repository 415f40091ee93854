"""The run in plain text: the headline table a sweep or an import ends with, and report/report.txt
(`handoff report --print RUN`), the report's main tables without links, for a terminal.

The headline has one row per checkpoint and domain (and all domains together when there are
several): hand-off accuracy, precision and recall under the task label with their 95% intervals
and counts, the shares of unneeded and missed hand-offs, who asked for the human, tau2's reward
and the share of episodes with a substantive violation (handoff.rules.violations.STYLE_RULES are
shown apart: they fire in most episodes of every model and tell none apart).
"""

from __future__ import annotations

from handoff.records import write_atomic
from handoff.report.cost_view import cost_section
from handoff.report.reducer import ALL, GroupMetrics, Reduction
from handoff.rules.label import display_name
from handoff.rules.metrics import ANY, Interval
from handoff.rules.violations import STYLE_RULES, SUBSTANTIVE, RuleId
from handoff.rundir import RunDir

LABEL_NOTE = ("Hand-off columns judge the transfer against the task label (should the task be handed "
              "off, docs/metrics.md); the episode label (1 once the user asked) is in report.md.")
TRUNCATED = "context_window_exceeded"
TRUNCATION_NOTE = ("{k} of {n} episodes of {where} ended `context_window_exceeded`: an agent turn reached the "
                   "per-turn token limit (the checkpoint's sampling.max_tokens, 256 in the default sweep), which "
                   "is a truncated_generation format error that ends the episode (docs/agent.md), not a full "
                   "context window.")


def rate(iv: Interval | None, digits: int = 2, interval: bool = True, counts: bool = True) -> str:
    """`0.50 [0.15, 0.85] 2/4`: the value, its 95% interval, the counts behind it; n/a without a value."""
    if iv is None or iv.value is None:
        return "n/a" + (f" 0/{iv.n}" if iv is not None and counts and iv.k is not None else "")
    text = f"{iv.value:.{digits}f}"
    if interval and iv.lo is not None and iv.hi is not None:
        text += f" [{iv.lo:.{digits}f},{iv.hi:.{digits}f}]"
    if counts and iv.k is not None:
        text += f" {iv.k}/{iv.n}"
    return text


def grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows]]


def shown_domains(reduction: Reduction) -> list[str]:
    """The run's domains, then `all` when there are several (one domain's `all` would repeat it)."""
    domains = reduction.domains()
    return domains + ([ALL] if len(domains) > 1 else [])


def shown_slices(reduction: Reduction) -> list[GroupMetrics]:
    """Each checkpoint's slices of shown_domains."""
    wanted = shown_domains(reduction)
    out = []
    for model, _ in reduction.checkpoints():
        for domain in wanted:
            try:
                out.append(reduction.group(model, domain))
            except KeyError:
                continue
    return out


def _asked(m) -> str:
    """Who started the hand-offs: counts of user / agent offer / agent."""
    return "/".join(str((m.handoff_initiator.get(i) or Interval(value=None, lo=None, hi=None, n=0)).k or 0)
                    for i in ("user", "agent_offer", "agent"))


HEADLINE = ["checkpoint", "step", "domain", "episodes", "accuracy", "precision", "recall", "unneeded", "missed",
            "asked u/o/a", "tau2 reward", "substantive viol."]


def headline_row(g: GroupMetrics) -> list[str]:
    m = g.metrics
    return [g.model, str(g.step), g.domain, str(m.n_episodes), rate(m.handoff.accuracy), rate(m.handoff.precision),
            rate(m.handoff.recall), rate(m.outcomes.get("unneeded_handoff"), interval=False),
            rate(m.outcomes.get("missed_handoff"), interval=False), _asked(m),
            rate(m.tau2_reward, counts=False), rate(m.violation_rate.get(SUBSTANTIVE), interval=False)]


def dominant_rule(m) -> tuple[str, Interval] | None:
    """The violation rule that fires in the most episodes, with its rate; None when none fired."""
    rates = [(r.value, m.violation_rate[r.value]) for r in RuleId if r.value in m.violation_rate]
    fired = [(name, iv) for name, iv in rates if iv.k]
    return max(fired, key=lambda kv: kv[1].k) if fired else None


def violations_line(g: GroupMetrics) -> str:
    """The style rules and the substantive rate of a slice, and the rule that dominates."""
    m = g.metrics
    style = ", ".join(f"{r.value} {rate(m.violation_rate.get(r.value), interval=False)}" for r in STYLE_RULES)
    top = dominant_rule(m)
    most = f"; most frequent: {top[0]} ({'style' if RuleId(top[0]) in STYLE_RULES else 'substantive'})" if top else ""
    return (f"  {g.model} / {g.domain}: substantive {rate(m.violation_rate.get(SUBSTANTIVE), interval=False)}; "
            f"style {style}{most}")


def truncation_notes(reduction: Reduction) -> list[str]:
    notes = []
    for g in shown_slices(reduction):
        cut = g.metrics.termination.get(TRUNCATED)
        if cut is not None and cut.k and (g.domain != ALL):
            notes.append(TRUNCATION_NOTE.format(k=cut.k, n=cut.n, where=f"{g.model} / {g.domain}"))
    return notes


def headline(reduction: Reduction) -> list[str]:
    """The headline table, the violations per slice and the notes a reader needs to read them."""
    slices = shown_slices(reduction)
    if not slices:
        return ["No episodes scored yet: nothing to show."]
    lines = [LABEL_NOTE, "Rates: value [95% interval] k/n (the sections below: value k/n; report.md has every interval); unneeded and missed are shares of all episodes; "
             "asked u/o/a counts hand-offs started by the user / after an agent offer / by the agent.", ""]
    lines += grid(HEADLINE, [headline_row(g) for g in slices])
    lines += ["", "Episodes with a violation (substantive: confirmation, authentication, off-reference writes, "
              "action after transfer; style: a tool call with text beside it):"]
    lines += [violations_line(g) for g in slices]
    notes = truncation_notes(reduction)
    return lines + (["", *notes] if notes else [])


def _keyed(title: str, reduction: Reduction, pick, name=lambda k: k) -> list[str]:
    """A section: a row per key of the dict of Intervals `pick` gives, a column per slice (value k/n)."""
    slices = shown_slices(reduction)
    picked = [pick(g.metrics) for g in slices]
    keys = list(dict.fromkeys(k for d in picked for k, iv in d.items() if iv.n))
    if not keys:
        return []
    rows = [[name(k), *(rate(d.get(k), interval=False) if d.get(k) else "" for d in picked)] for k in keys]
    return [f"## {title}", "", *grid(["", *(f"{g.model}/{g.domain}" for g in slices)], rows), ""]


def _violation_rates(m) -> dict[str, Interval]:
    order = [SUBSTANTIVE, *(r.value for r in RuleId if r not in STYLE_RULES), *(r.value for r in STYLE_RULES), ANY]
    return {k: m.violation_rate[k] for k in order if k in m.violation_rate}


def _violation_name(key: str) -> str:
    if key in (SUBSTANTIVE, ANY):
        return f"{key} (any {'substantive ' if key == SUBSTANTIVE else ''}rule)"
    return f"{key} ({'style' if RuleId(key) in STYLE_RULES else 'substantive'})"


def plain_report(run: RunDir, reduction: Reduction) -> str:
    """report.txt: the headline, then cost, outcome classes, transfer rates by label rule, violations per
    rule and terminations, in plain text."""
    lines = [f"Hand-off report: {reduction.run}", f"Run directory {run.root}: {reduction.n_episodes} episodes, "
             f"{len(reduction.shards)} shards; failed shards: {', '.join(reduction.failed_shards) or 'none'}", "",
             *headline(reduction), ""]
    lines += ["## Cost", "", *cost_section(shown_slices(reduction), grid)]
    lines += _keyed("Outcome classes (task label)", reduction, lambda m: m.outcomes)
    lines += _keyed("Transfer rate by label rule (task label)", reduction, lambda m: m.transfer_rate_by_rule,
                    lambda k: f"{display_name(k)} [{k}]")
    lines += _keyed("Transfer rate by episode rule (episode label)", reduction,
                    lambda m: m.transfer_rate_by_episode_rule, lambda k: f"{display_name(k)} [{k}]")
    lines += _keyed("Episodes with a policy violation, per rule", reduction, _violation_rates, _violation_name)
    lines += _keyed("Termination reasons", reduction, lambda m: m.termination)
    lines += [f"Every number with links to its episodes: {run.report_md} and {run.report_html}."]
    return "\n".join(lines) + "\n"


def write_text_report(run: RunDir, reduction: Reduction) -> dict:
    """report/report.txt beside report.md; its path."""
    write_atomic(run.report_txt, plain_report(run, reduction))
    return {"report_txt": run.report_txt}


def run_headline(run_dir) -> str:
    """The headline of a reduced run (from reduced/metrics.json), for the end of a sweep or an import."""
    return "\n".join(headline(Reduction.load(run_dir)))
