"""Adaptive sweeps: rounds above the driver (docs/sweep.md, "Adaptive sweeps").

Round r runs, for every checkpoint still running, the planned shards of the trials below
r x adaptive.round_trials (the driver skips what is done), then scores the run and decides
(handoff.rules.sequential.decide): a checkpoint decided worse than the best, or tied with it, gets no
more episodes. The rounds end when none is undecided or adaptive.max_trials is spent. Each decided
round is recorded in the manifest (Manifest.adaptive) before the next starts, so a resumed sweep
continues with the next round and never reruns a decided one; a round with a failed shard is not
decided (a resume reruns the shard, then decides it). The driver, the schedules and the engines'
in-place reload are the fixed sweep's, round by round.

With adaptive.growing the run may gain checkpoints (handoff sweep extend, handoff follow): each
checkpoint has its own trials (Round.trials_by, handoff.report.adaptive.next_trials), a new one starts
against the best so far, and each comparison's alpha is spent in arrival order
(handoff.rules.sequential.arrival_spending; docs/metrics.md, "A set that grows").
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from handoff.report.adaptive import (
    Round,
    arrival_order,
    finished,
    growing_finished,
    growing_names,
    n_rounds,
    next_trials,
    recorded_rounds,
    trials_so_far,
)
from handoff.rules.sequential import METRICS, EpisodeKey, PairConfidence, arrival_spending, decide
from handoff.sweep.driver import Driver, Summary
from handoff.sweep.plan import Shard


def running(rounds: list[Round], names: list[str]) -> list[str]:
    """The checkpoints that get the next round: all at first, then the best and the undecided."""
    if not rounds:
        return list(names)
    return [n for n in names if rounds[-1].verdicts[n].status in ("best", "undecided")]


def round_shards(shards: list[Shard], names: list[str], trials: int) -> list[Shard]:
    """The planned shards of these checkpoints with trials below `trials`."""
    return [s for s in shards if s.model in names and s.trial < trials]


def episode_values(episodes, metric: str) -> dict[str, dict[EpisodeKey, float | None]]:
    """checkpoint -> (domain, task id, trial) -> the metric's value (handoff.rules.sequential.METRICS)
    of each scored episode (handoff.scoring.ScoredEpisode)."""
    value = METRICS[metric]
    out: dict[str, dict[EpisodeKey, float | None]] = {}
    for e in episodes:
        out.setdefault(e.model, {})[(e.score.domain, e.score.task_id, e.trial)] = value(e.score)
    return out


def within(values: dict[str, dict[EpisodeKey, float | None]], trials_by: dict[str, int] | None
           ) -> dict[str, dict[EpisodeKey, float | None]]:
    """The values of the trials each checkpoint's step gave it (a set that grows): a decision taken
    again after a crash sees what it saw the first time, whatever later steps left on disk."""
    if trials_by is None:
        return values
    return {name: {key: v for key, v in by_key.items() if key[2] < trials_by.get(name, 0)}
            for name, by_key in values.items()}


def scored_episodes(root):
    """The run's scored episodes (the reducer's incremental score cache, under its lock)."""
    from handoff.report.reducer import score_run
    from handoff.rundir import RunDir
    from handoff.scoring import Scorer

    run = RunDir(root)
    with run.reducing():
        return score_run(run, Scorer.for_config(run.config))[0]


@dataclass
class Step:
    """The next round: its shards, the trials per task after it (each checkpoint's, in a set that
    grows), and the confidence of each comparison (None: Bonferroni over a fixed set)."""

    shards: list[Shard]
    trials: int
    trials_by: dict[str, int] | None = None
    pair_confidence: PairConfidence | None = None


def fixed_step(prepared, rounds: list[Round]) -> Step | None:
    """A fixed set's next round: the next `round_trials` trials of every checkpoint still running."""
    a = prepared.sweep.adaptive
    if finished(rounds, n_rounds(a.max_trials, a.round_trials)):
        return None
    trials = min((len(rounds) + 1) * a.round_trials, a.max_trials)
    return Step(round_shards(prepared.shards, running(rounds, [c.name for c in prepared.ckpts]), trials), trials)


def growing_step(prepared, rounds: list[Round]) -> Step | None:
    """A set that grows (adaptive.growing): each checkpoint's next trials (next_trials), alpha spent
    in arrival order (arrival_spending). `prepared.settle` (handoff follow: False between
    checkpoints) gives a latest best its max_trials."""
    a, manifest, settle = prepared.sweep.adaptive, prepared.manifest, prepared.settle
    names = growing_names(manifest)
    if growing_finished(rounds, names, a.round_trials, a.max_trials, settle):
        return None
    now, target = trials_so_far(rounds, names), next_trials(rounds, names, a.round_trials, a.max_trials, settle)
    shards = [s for s in prepared.shards if s.model in target and now[s.model] <= s.trial < target[s.model]]
    return Step(shards, max(target.values()), target, arrival_spending(arrival_order(manifest), a.confidence))


def run_rounds(prepared, progress: bool, execute: Callable[..., Summary]) -> Summary:
    """Run (or continue) the sweep's rounds with `execute(prepared, progress, shards)` (the driver
    on those shards); the Summary is the whole run's against the fixed design's episodes."""
    a = prepared.sweep.adaptive
    next_step = growing_step if a.growing else fixed_step
    names = growing_names(prepared.manifest) if a.growing else [c.name for c in prepared.ckpts]
    rounds = recorded_rounds(prepared.manifest)
    started, failures, ran = time.monotonic(), 0, False
    while (step := next_step(prepared, rounds)) is not None:
        number = len(rounds) + 1
        summary = execute(prepared, progress, step.shards)
        failures, ran = failures + summary.episode_failures, ran or summary.ran
        if set(summary.shards_failed) & {s.id for s in step.shards}:
            print(f"adaptive: round {number} has failed shards; it is decided when a resume completes it",
                  file=sys.stderr, flush=True)
            break
        previous = rounds[-1].verdicts if rounds else {}
        values = within(episode_values(scored_episodes(prepared.run.root), a.metric), step.trials_by)
        verdicts = decide({n: values.get(n, {}) for n in names}, previous, number, a.margin, a.confidence,
                          a.round_trials, a.max_trials, step.pair_confidence)
        rounds.append(Round(round=number, trials=step.trials, verdicts=verdicts, trials_by=step.trials_by))
        prepared.manifest.adaptive = [r.model_dump(mode="json", exclude={"trials_by"} if r.trials_by is None else None)
                                      for r in rounds]
        prepared.run.write_manifest(prepared.manifest)
        print(round_line(rounds[-1]), file=sys.stderr, flush=True)
    whole = Driver(prepared.sweep, prepared.run, prepared.ckpts, prepared.shards, progress=False).summary()
    whole.episode_failures, whole.wall_s, whole.ran = failures, time.monotonic() - started, ran
    return whole


def round_line(r: Round) -> str:
    if r.trials_by is not None:  # a set that grows: each checkpoint's own trials
        statuses = ", ".join(f"{name} {v.status} ({r.trials_by.get(name, 0)} trials)" for name, v in r.verdicts.items())
        return f"adaptive: round {r.round}: {statuses}"
    statuses = ", ".join(f"{name} {v.status}" for name, v in r.verdicts.items())
    return f"adaptive: round {r.round} ({r.trials} trials per task): {statuses}"
