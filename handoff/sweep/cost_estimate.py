"""The sweep's cost, estimated from its first episodes: once FIRST_EPISODES episodes of a checkpoint
have finished in this run (all it runs, when fewer), its mean cost per episode times the episodes it
has in the plan; the terminal gets a line with that estimate, the whole plan's so far, and their basis.

Units as the report's (handoff.records.cost_units): dollars for a side on an API (litellm's
price; n/a when it has none), engine- and GPU-seconds for a side on the sweep's engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from handoff.records import Cost, cost_units

FIRST_EPISODES = 5


@dataclass
class Estimate:
    """A checkpoint's estimated cost for all its planned episodes (usd None: no price)."""

    episodes: int
    usd: float | None
    engine_s: float
    gpu_s: float
    basis: int  # the episodes the means come from
    no_price: str = ""


@dataclass
class Seen:
    planned: int  # the checkpoint's episodes in the plan
    to_run: int  # in this run
    costs: list[Cost] = field(default_factory=list)


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def estimate(seen: Seen) -> Estimate:
    usd = [c.usd for c in seen.costs]
    note = next((c.no_price for c in seen.costs if c.usd is None), "")
    return Estimate(seen.planned, None if note else mean(usd) * seen.planned,
                    mean([c.engine_s for c in seen.costs]) * seen.planned,
                    mean([c.gpu_s for c in seen.costs]) * seen.planned, len(seen.costs), note)


def figure(x: float, big: float, digits: int) -> str:
    """`x` whole from `big` up (`1,240`), else with `digits` decimals (`0.4`): a small total never reads 0."""
    return f"{x:,.0f}" if x >= big else f"{x:.{digits}f}"


def amounts(usd: float | None, engine_s: float, gpu_s: float, per_episode: bool = False) -> str:
    """`~$1.24` and/or `~492 engine-s, ~0.4 GPU-s` (cost_units' units); per episode `$0.0310`, `12.3 engine-s`."""
    approx = "" if per_episode else "~"
    shown = {"usd": "$ n/a (no price)" if usd is None else f"{approx}${usd:.{4 if per_episode or usd < 1 else 2}f}",
             "engine_s": f"{approx}{figure(engine_s, 100, 1)} engine-s", "gpu_s": f"{approx}{figure(gpu_s, 100, 1)} GPU-s"}
    return ", ".join(shown[u] for u in cost_units(usd, engine_s))


class CostEstimate:
    """Feed it each finished episode's cost (`add`); it answers the terminal line once per checkpoint."""

    def __init__(self, episodes: dict[str, tuple[int, int]], first: int = FIRST_EPISODES):
        """`episodes`: checkpoint name -> (episodes recorded already, episodes in the plan)."""
        self.first = first
        self.seen = {name: Seen(total, total - done) for name, (done, total) in episodes.items()}
        self.estimates: dict[str, Estimate] = {}

    def add(self, name: str, cost: Cost | None) -> str | None:
        seen = self.seen.get(name)
        if seen is None or cost is None or name in self.estimates:
            return None
        seen.costs.append(cost)
        if len(seen.costs) < min(self.first, seen.to_run):
            return None
        self.estimates[name] = estimate(seen)
        return self.line(name)

    def line(self, name: str) -> str:
        e = self.estimates[name]
        per = amounts(None if e.usd is None else e.usd / e.episodes, e.engine_s / e.episodes, e.gpu_s / e.episodes,
                      per_episode=True)
        text = (f"[plan] cost estimate: {name} {amounts(e.usd, e.engine_s, e.gpu_s)} for its {e.episodes} planned "
                f"episodes ({per} per episode, the mean of its first {e.basis} finished)")
        if len(self.seen) > 1:
            text += f"; the plan: {self.plan_total()} ({len(self.estimates)} of {len(self.seen)} checkpoints estimated)"
        return text + (f"; no price: {e.no_price}" if e.no_price else "")

    def plan_total(self) -> str:
        known = list(self.estimates.values())
        usd = None if any(e.usd is None for e in known) else sum(e.usd for e in known)
        return amounts(usd, sum(e.engine_s for e in known), sum(e.gpu_s for e in known))
