"""Cost in the report's views (report.md, report.html, report.txt): one row per checkpoint, domain
and unit with the total, the mean per episode and the cost per tau2 success and per correct hand-off
decision, each with its 95% interval (handoff.report.cost, docs/metrics.md "Cost").

Units shown: dollars where a side ran on an API (its price, or n/a with litellm's reason below the
table), engine-seconds and GPU-seconds where a side ran on the sweep's engines; a slice with neither
(a scripted engine) shows its dollars, 0. A run from before shard schema 2 has no cost fields: one
row of n/a, the reason below, never 0.
"""

from __future__ import annotations

from collections.abc import Callable

from handoff.records import Cost, cost_units
from handoff.report.cost import NO_COST, CostMetrics, CostStat
from handoff.report.reducer import GroupMetrics
from handoff.rules.metrics import Interval

HEADER = ["checkpoint", "step", "domain", "unit", "episodes", "total", "per episode", "per tau2 success",
          "per correct hand-off decision"]
UNIT_LABELS = {"usd": ("dollars", 4), "engine_s": ("engine-s", 1), "gpu_s": ("GPU-s", 1)}  # label, decimals
INTRO = ("Cost per episode: the mean, normal 95% interval. Cost per success: the slice's total over its tau2 "
         "successes (reward 1) or its correct hand-off decisions, delta-method 95% interval, `over k` the "
         "successes it rests on (docs/metrics.md, \"Cost\"). Dollars are litellm's price for API models; local "
         "engines cost engine-seconds and GPU-seconds (0 GPU-s on a CPU engine).")


def shown_units(cost: CostMetrics) -> list[str]:
    return cost_units(cost.usd.total, cost.engine_s.total or 0.0)


def total_line(reduction) -> str:
    """The sweep summary's cost line: each checkpoint's total in its units (as the report's)."""
    parts = []
    for name, _ in reduction.checkpoints():
        cost = reduction.group(name).cost
        if cost is None or cost.n_costed == 0:
            parts.append(f"{name} n/a")
            continue
        shown = {"usd": "$ n/a (no price)" if cost.usd.total is None else f"${cost.usd.total:.4f}",
                 "engine_s": f"{cost.engine_s.total:.1f} engine-s", "gpu_s": f"{cost.gpu_s.total:.1f} GPU-s"}
        parts.append(f"{name} " + ", ".join(shown[u] for u in shown_units(cost)))
    return "cost: " + "; ".join(parts) if parts else ""


def amount(iv: Interval, digits: int) -> str:
    """`0.0250 [0.0150, 0.0350]`, without an interval where there is none; n/a without a value."""
    if iv.value is None:
        return "n/a"
    if iv.lo is None or iv.hi is None:
        return f"{iv.value:.{digits}f}"
    return f"{iv.value:.{digits}f} [{iv.lo:.{digits}f}, {iv.hi:.{digits}f}]"


def per_success(iv: Interval, digits: int) -> str:
    """Cost per success with the successes it rests on; `n/a (no success)` when there is none."""
    if iv.k == 0:
        return "n/a (no success)"
    return amount(iv, digits) + (f" over {iv.k}" if iv.k is not None else "")


def unit_cells(stat: CostStat, unit: str) -> list[str]:
    label, digits = UNIT_LABELS[unit]
    if stat.total is None:
        return [label, "n/a", "n/a", "n/a", "n/a"]
    return [label, f"{stat.total:.{digits}f}", amount(stat.per_episode, digits),
            per_success(stat.per_tau2_success, digits), per_success(stat.per_correct_handoff, digits)]


def slice_rows(g: GroupMetrics, episodes: Callable[[GroupMetrics, str], str]) -> list[list[str]]:
    """The rows of one slice; `episodes(g, text)` renders its episodes cell (a link, in report.md)."""
    cost, where = g.cost, [g.model, str(g.step), g.domain]
    if cost is None or cost.n_costed == 0:
        return [[*where, "-", episodes(g, f"0 of {g.n_episodes}"), "n/a", "n/a", "n/a", "n/a"]]
    counted = str(cost.n_costed) if cost.n_costed == g.n_episodes else f"{cost.n_costed} of {g.n_episodes}"
    rows = []
    for unit in shown_units(cost):
        label, *values = unit_cells(getattr(cost, unit), unit)
        rows.append([*where, label, episodes(g, counted), *values])
    return rows


def notes(slices: list[GroupMetrics]) -> list[str]:
    """Why a value is n/a, once per checkpoint and reason."""
    seen: dict[tuple[str, str], None] = {}
    for g in slices:
        if g.cost is None or g.cost.n_costed == 0:
            seen[(g.model, NO_COST.removeprefix("n/a: "))] = None
            continue
        for unit in shown_units(g.cost):
            stat = getattr(g.cost, unit)
            if stat.total is None and stat.note:
                seen[(g.model, f"{UNIT_LABELS[unit][0]}: {stat.note}")] = None
    return [f"- {model}: {why}" for model, why in seen]


def cost_section(slices: list[GroupMetrics], table: Callable[[list[str], list[list[str]]], list[str]],
                 episodes: Callable[[GroupMetrics, str], str] = lambda g, text: text) -> list[str]:
    """The cost section's lines for `slices` (handoff.report.text.shown_slices): its intro, the table
    `table(header, rows)` renders and the n/a notes."""
    if not slices:
        return []
    rows = [row for g in slices for row in slice_rows(g, episodes)]
    why = notes(slices)
    return [INTRO, "", *table(HEADER, rows), *(["", "Why a value is n/a:", *why] if why else []), ""]


def episode_cost(cost: Cost | None) -> str:
    """One episode's cost, for its transcript page: its units (as the table's), wall time by part and
    cached prompt tokens; n/a with the reason for a record without cost fields."""
    if cost is None:
        return NO_COST
    shown = {"usd": f"$ n/a ({cost.no_price})" if cost.usd is None else f"${cost.usd:.4f}",
             "engine_s": f"{cost.engine_s:.1f} engine-s (agent {cost.agent_engine_s:.1f}, user {cost.user_engine_s:.1f})",
             "gpu_s": f"{cost.gpu_s:.1f} GPU-s"}
    return "; ".join([*(shown[u] for u in cost_units(cost.usd, cost.engine_s)),
                      f"wall time: agent {cost.agent_s:.1f} s, user {cost.user_s:.1f} s, tools {cost.tool_s:.1f} s",
                      f"cached prompt tokens: agent {cost.agent_cached_tokens:,}, user {cost.user_cached_tokens:,}"])


def side_cost(cost: CostMetrics | None) -> str:
    """A checkpoint's cost on one line (`handoff compare`'s text): each unit's total, per episode and per
    success with their intervals; n/a with the reason."""
    if cost is None or cost.n_costed == 0:
        return NO_COST
    parts = []
    for unit in shown_units(cost):
        stat = getattr(cost, unit)
        label, total, per_episode, per_tau2, per_correct = unit_cells(stat, unit)
        why = f" ({stat.note})" if stat.total is None and stat.note else ""
        parts.append(f"{label} {total} in all{why}, {per_episode} per episode, {per_tau2} per tau2 success, "
                     f"{per_correct} per correct hand-off decision")
    return "; ".join(parts)
