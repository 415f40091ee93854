"""What a checkpoint's episodes cost (docs/metrics.md, "Cost"): per episode, per tau2 success and per
correct hand-off decision, in API dollars (litellm's price), engine-seconds and GPU-seconds, each
with a 95% interval; plus token and wall-time means. From the `usage.cost` that shards record since
schema version 2; a run from before has none (every value n/a, never 0).

Cost per success is the ratio estimator sum(cost) / sum(success) over the same episodes: a cheap
agent that fails fast is not cheap per success. Its interval is the delta method's (linearized
z_i = c_i - R s_i; se = sqrt(sum z_i^2 / (n (n - 1))) / mean(s)); none while there is no success.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel
from tau2.metrics.agent_metrics import is_successful

from handoff.records import Cost
from handoff.rules.metrics import Z95, Interval
from handoff.scoring import ScoredEpisode

NO_COST = "n/a: recorded before shard schema version 2 (no cost fields)"
UNITS: dict[str, Callable[[Cost], float | None]] = {
    "usd": lambda c: c.usd,
    "engine_s": lambda c: c.engine_s,
    "gpu_s": lambda c: c.gpu_s,
}
SUCCESSES: dict[str, Callable[[ScoredEpisode], bool]] = {
    "tau2_success": lambda e: is_successful(e.score.tau2_reward or 0.0),
    "correct_handoff": lambda e: e.score.correct_handoff,
}


class CostStat(BaseModel):
    """One unit of cost over a slice: total, per episode, per tau2 success, per correct hand-off."""

    total: float | None
    per_episode: Interval
    per_tau2_success: Interval
    per_correct_handoff: Interval
    note: str | None = None  # why the values are None (no cost recorded, a model litellm has no price for)


class CostMetrics(BaseModel):
    n_costed: int  # episodes with cost fields (a resumed old run may mix)
    usd: CostStat
    engine_s: CostStat
    gpu_s: CostStat
    mean_tokens: dict[str, float | None]  # agent_prompt, agent_cached, agent_completion, user_prompt, user_completion
    mean_wall_s: dict[str, float | None]  # agent, user, tool


def _none(n: int) -> Interval:
    return Interval(value=None, lo=None, hi=None, n=n)


def mean_interval(values: list[float]) -> Interval:
    n = len(values)
    if n == 0:
        return _none(0)
    mean = sum(values) / n
    if n == 1:
        return Interval(value=mean, lo=None, hi=None, n=1)
    half = Z95 * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return Interval(value=mean, lo=max(0.0, mean - half), hi=mean + half, n=n)


def ratio_interval(costs: list[float], wins: list[bool]) -> Interval:
    """sum(costs) / sum(wins) with the delta method's interval (module docstring); k: the successes."""
    n, k = len(costs), sum(wins)
    if k == 0:
        return Interval(value=None, lo=None, hi=None, n=n, k=0)
    ratio = sum(costs) / k
    if n == 1:
        return Interval(value=ratio, lo=None, hi=None, n=n, k=k)
    z = [c - ratio * w for c, w in zip(costs, wins)]
    se = math.sqrt(sum(v * v for v in z) / (n * (n - 1))) / (k / n)
    return Interval(value=ratio, lo=max(0.0, ratio - Z95 * se), hi=ratio + Z95 * se, n=n, k=k)


def cost_stat(costed: list[ScoredEpisode], unit: str, note: str | None = None) -> CostStat:
    values = [UNITS[unit](e.cost) for e in costed]
    if not costed or any(v is None for v in values):
        reason = note or next((_why(e.cost) for e in costed if UNITS[unit](e.cost) is None), NO_COST)
        return CostStat(total=None, per_episode=_none(len(costed)), per_tau2_success=_none(len(costed)),
                        per_correct_handoff=_none(len(costed)), note=reason)
    wins = {name: [won(e) for e in costed] for name, won in SUCCESSES.items()}
    return CostStat(total=sum(values), per_episode=mean_interval(values),
                    per_tau2_success=ratio_interval(values, wins["tau2_success"]),
                    per_correct_handoff=ratio_interval(values, wins["correct_handoff"]))


def _why(cost: Cost) -> str:
    return cost.no_price or "unknown"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def cost_metrics(episodes: list[ScoredEpisode]) -> CostMetrics:
    costed = [e for e in episodes if e.cost is not None]
    tokens = {"agent_prompt": [e.score.prompt_tokens for e in costed],
              "agent_cached": [e.cost.agent_cached_tokens for e in costed],
              "agent_completion": [e.score.completion_tokens for e in costed],
              "user_prompt": [e.cost.user_prompt_tokens for e in costed]}
    return CostMetrics(n_costed=len(costed), **{unit: cost_stat(costed, unit) for unit in UNITS},
                       mean_tokens={k: _mean(v) for k, v in tokens.items()},
                       mean_wall_s={p: _mean([getattr(e.cost, f"{p}_s") for e in costed]) for p in ("agent", "user", "tool")})
