"""The sweep's progress: finished episodes and engine requests (the agent's and the user simulator's
turns) per checkpoint, with a rate and an estimate of the time left; and, from each checkpoint's first
finished episodes, an estimate of the plan's cost (handoff.sweep.cost_estimate), a line once each.

Engine replicas count the requests they serve per checkpoint and role (EngineHost.served); the
driver polls them every few seconds without waiting (`poll`) and reports each finished episode
(`episode_done`). In a terminal, one bar per checkpoint redrawn in place (tqdm; one for all of them
beyond MAX_BARS checkpoints); anywhere else (a
Ray Job's log, a SLURM log, a pipe) a plain line per checkpoint every `every_s` seconds while it
moves, so a log file holds no screen of carriage returns.

The time left: requests left / the request rate. Every step of an episode is one agent or user
message, so the step limit bounds the requests an unfinished episode has left: the upper bound ("<=")
is shown until an episode of the checkpoint has finished, afterwards an estimate ("~") from the
finished episodes' mean. Short episodes finish first, so that mean can fall below what the running
episodes have already made; wherever it leaves less than one request per unfinished episode (each
needs at least one more), it is contradicted and the bound is shown instead.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from handoff.engine.factory import engine_kind
from handoff.sweep.cost_estimate import CostEstimate

POLL_EVERY_S = 2.0
UNANSWERED_S = 30.0  # a replica's counters asked for this long ago (restarting, or its node gone) are asked again
MAX_BARS = 8  # in a terminal; more checkpoints share one bar


@dataclass
class Counts:
    """One checkpoint's progress."""

    episodes_total: int
    episodes_done: int = 0
    requests_done_episodes: int = 0  # requests of the finished episodes (to estimate the rest)
    requests: dict[str, int] = field(default_factory=dict)  # per role (agent, user)
    first_request: float | None = None

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())


def requests_of(record) -> int:
    """Engine requests an episode made, about: its agent and user messages (tau2's SimulationRun)."""
    return sum(m.get("role") in ("assistant", "user") for m in record.simulation.get("messages", []))


def add(into: dict, more: dict) -> dict:
    """Sum nested counters (dicts of numbers) into `into`."""
    for key, value in more.items():
        if isinstance(value, dict):
            add(into.setdefault(key, {}), value)
        else:
            into[key] = into.get(key, 0) + value
    return into


def estimate(c: Counts, max_steps: int, now: float) -> tuple[float | None, float | None, bool]:
    """(requests per minute, seconds left, whether the estimate is an upper bound) for one checkpoint;
    None where there is nothing to go on yet."""
    if c.first_request is None or c.total_requests == 0 or now <= c.first_request:
        return None, None, False
    rate = c.total_requests / (now - c.first_request)
    unfinished = max(0, c.episodes_total - c.episodes_done)
    running = max(0, c.total_requests - c.requests_done_episodes)  # the unfinished episodes' requests so far
    mean = c.requests_done_episodes / c.episodes_done if c.episodes_done else None
    bound = mean is None or (unfinished > 0 and unfinished * mean - running < unfinished)
    left = max(0.0, unfinished * (max_steps if bound else mean) - running)
    return rate * 60, left / rate, bound


def describe(name: str, c: Counts, max_steps: int, now: float) -> str:
    """`name: episodes 2/8, requests 41 (agent 23, user 18), 5.2/min, ~3 min left`."""
    roles = ", ".join(f"{role} {n}" for role, n in sorted(c.requests.items()))
    text = f"{name}: episodes {c.episodes_done}/{c.episodes_total}, requests {c.total_requests}"
    text += f" ({roles})" if roles else ""
    per_min, left, bound = estimate(c, max_steps, now)
    if per_min is not None:
        text += f", {per_min:.1f}/min"
        if c.episodes_done < c.episodes_total:
            text += f", {'<=' if bound else '~'}{_duration(left)} left"
    return text


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


class Progress:
    """Progress of a sweep's checkpoints on `stream` (default stderr)."""

    def __init__(self, episodes: dict[str, tuple[int, int]], max_steps: int, enabled: bool = True,
                 stream: TextIO | None = None, every_s: float = 30.0, clock=time.monotonic):
        """`episodes`: checkpoint name -> (episodes done already, episodes in all)."""
        self.counts = {name: Counts(total, done) for name, (done, total) in episodes.items()}
        self.cost = CostEstimate(episodes)  # the plan's cost from the first episodes: a line each checkpoint
        self.max_steps, self.enabled, self.every_s, self.clock = max_steps, enabled, every_s, clock
        self.stream = stream or sys.stderr
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.bars: dict = {}
        self.printed: dict[str, str] = {}
        self.last_print = self.clock()
        self._served: dict = {}  # replica actor id -> its last counters (EngineHost.served)
        self._pending: dict = {}  # poll ref -> (replica actor id, when asked)
        self._last_poll = 0.0
        self._quiet_since = self.clock()
        self.failures = (0, 0)  # (episode failures, failed shards)

    # -- what happened --------------------------------------------------------------------------
    def episode_done(self, name: str, requests: int | None = None, cost=None) -> None:
        """A finished episode of checkpoint `name`: its engine requests and its cost (handoff.records.Cost)."""
        c = self.counts[name]
        c.episodes_done += 1
        if requests is not None:
            c.requests_done_episodes += requests
        estimate = self.cost.add(name, cost)
        if estimate:
            self.write(estimate)
        self.show()

    def served(self, replica_id, counters: dict) -> None:
        """A replica's counters since it started (EngineHost.served: checkpoint -> role -> counters)."""
        self._served[replica_id] = counters
        for name, roles in self.totals().items():
            c = self.counts.get(name)
            if c is None:
                continue
            c.requests = {role: n["requests"] for role, n in roles.items()}
            if c.first_request is None and c.total_requests:
                c.first_request = self._quiet_since  # the last look that found none (or the start)

    def totals(self) -> dict:
        """Every replica's counters summed: checkpoint -> role -> counters."""
        out: dict = {}
        for counters in self._served.values():
            add(out, counters)
        return out

    def save(self, path: Path) -> None:
        """The engines' counters as JSON (<run>/logs/engines.json): `served` (checkpoint -> role ->
        counters, with each role's prefix-cache hit rate) and each checkpoint's user simulator share of
        the requests, when there are any."""
        served = self.totals()
        if not served:
            return
        share = {}
        for name, roles in served.items():
            for c in roles.values():
                c["prefix_cache_hit_rate"] = round(c["cached_prompt_tokens"] / max(1, c["prompt_tokens"]), 4)
            if "user" in roles:
                share[name] = round(roles["user"]["requests"] / sum(c["requests"] for c in roles.values()), 4)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"served": served, "user_share_of_requests": share}, indent=1) + "\n")

    def set_postfix(self, failures: int = 0, failed_shards: int = 0) -> None:
        self.failures = (failures, failed_shards)

    def poll(self, ray, replicas: list, wait: bool = False) -> None:
        """Ask every replica for its counters every POLL_EVERY_S (all of them now with `wait`) and
        take the answers that are ready, without waiting for the others. A replica that has not
        answered is not asked again until UNANSWERED_S has passed: one that never answers (its
        node gone) holds back its own counts only."""
        now = self.clock()
        if wait or now - self._last_poll >= POLL_EVERY_S:  # each replica with no answer due
            self._last_poll = now
            self._pending = {ref: asked for ref, asked in self._pending.items() if now - asked[1] < UNANSWERED_S}
            due = {rid for rid, _ in self._pending.values()}
            self._pending |= {r.served.remote(): (r._actor_id, now) for r in replicas if r._actor_id not in due}
        if not self._pending:
            return
        ready, _ = ray.wait(list(self._pending), num_returns=len(self._pending), timeout=10 if wait else 0)
        for ref in ready:
            replica, _ = self._pending.pop(ref)
            try:
                self.served(replica, ray.get(ref))
            except Exception:  # noqa: BLE001 - a dead or restarting replica: its last counts stand
                pass
        if wait:
            self._pending.clear()
        if ready:
            self._quiet_since = now
        self.show()

    # -- how it is shown ------------------------------------------------------------------------
    def show(self) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if self.tty:
            self._bars(now)
        elif now - self.last_print >= self.every_s:
            self._lines(now)

    def _failures(self) -> str:
        episodes, shards = self.failures
        return f"; episode failures {episodes}, failed shards {shards}" if episodes or shards else ""

    def _lines(self, now: float, force: bool = False) -> None:
        self.last_print = now
        for name, c in self.counts.items():
            text = describe(name, c, self.max_steps, now) + self._failures()
            if force or (c.total_requests and self.printed.get(name) != text):
                print(f"[progress] {text}", file=self.stream, flush=True)
                self.printed[name] = text

    def _shown(self) -> dict[str, Counts]:
        """A bar per checkpoint, or one for them all when there are more than MAX_BARS."""
        if len(self.counts) <= MAX_BARS:
            return self.counts
        starts = [c.first_request for c in self.counts.values() if c.first_request is not None]
        total = Counts(sum(c.episodes_total for c in self.counts.values()),
                       sum(c.episodes_done for c in self.counts.values()),
                       sum(c.requests_done_episodes for c in self.counts.values()),
                       {}, min(starts) if starts else None)
        for c in self.counts.values():
            add(total.requests, c.requests)
        return {f"{len(self.counts)} checkpoints": total}

    def _bars(self, now: float) -> None:
        from tqdm import tqdm

        for i, (name, c) in enumerate(self._shown().items()):
            bar = self.bars.get(name)
            if bar is None:
                bar = self.bars[name] = tqdm(total=c.episodes_total, initial=c.episodes_done, position=i,
                                             file=self.stream, dynamic_ncols=True, leave=True,
                                             bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} episodes{postfix}")
            bar.set_description_str(name, refresh=False)
            bar.n = c.episodes_done
            text = describe(name, c, self.max_steps, now) + self._failures()
            bar.set_postfix_str(text.split(", ", 1)[1] if ", " in text else "", refresh=False)
            bar.refresh()

    def write(self, line: str) -> None:
        """A line on the terminal that does not break the bars."""
        if self.tty and self.bars:
            from tqdm import tqdm

            tqdm.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self.tty:
            self._bars(self.clock())
            for bar in self.bars.values():
                bar.close()
        elif self.enabled:
            self._lines(self.clock(), force=True)


def plan_lines(cfg, ckpts: list, shards: list, pending: int, run_root: Path, logs: str | None) -> list[str]:
    """What the sweep will do, before it starts: checkpoints, domains, episodes, engines, where it writes."""
    e, names = cfg.engine, [c.name for c in ckpts]
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
    total = sum(len(s.episodes) for s in shards)
    lines = [f"sweep {cfg.name}: {len(names)} checkpoint(s) ({shown}) x domains {', '.join(cfg.domains())}: "
             f"{total} episodes in {len(shards)} shards" + (f", {pending} to run" if pending != total else "")]
    engine = (f"vLLM on {e.device}, {e.replicas} replica(s) x {e.cpus:g} CPU(s)"
              + (f" x {e.num_gpus} GPU(s)" if e.num_gpus else "") + f", dtype {e.dtype}"
              if engine_kind(e).loads_weights else f"{e.kind}, {e.replicas} replica(s)")
    user = cfg.user.model.name if cfg.user.kind == "engine" and cfg.user.model else (cfg.user.llm or cfg.user.kind)
    lines.append(f"  engines: {engine}; user simulator: {user}; schedule {cfg.schedule}")
    lines.append(f"  run directory: {run_root}")
    lines.append(f"  logs: {logs}/ (verbose=true shows them here)" if logs else "  logs: on this terminal (verbose)")
    return lines
