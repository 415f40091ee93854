"""Adaptive sweeps: rounds above the driver (docs/sweep.md, "Adaptive sweeps").

Round r runs, for every checkpoint still running, the planned shards of the trials below
r x adaptive.round_trials (the driver skips what is done), then scores the run and decides
(handoff.rules.sequential.decide): a checkpoint decided worse than the best, or tied with it, gets no
more episodes. The rounds end when none is undecided or adaptive.max_trials is spent. Each decided
round is recorded in the manifest (Manifest.adaptive) before the next starts, so a resumed sweep
continues with the next round and never reruns a decided one; a round with a failed shard is not
decided (a resume reruns the shard, then decides it). The driver, the schedules and the engines'
in-place reload are the fixed sweep's, round by round.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from handoff.report.adaptive import Round, finished, n_rounds, recorded_rounds
from handoff.rules.sequential import METRICS, EpisodeKey, decide
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


def scored_episodes(root):
    """The run's scored episodes (the reducer's incremental score cache, under its lock)."""
    from handoff.report.reducer import score_run
    from handoff.rundir import RunDir
    from handoff.scoring import Scorer

    run = RunDir(root)
    with run.reducing():
        return score_run(run, Scorer.for_config(run.config))[0]


def run_rounds(prepared, progress: bool, execute: Callable[..., Summary]) -> Summary:
    """Run (or continue) the sweep's rounds with `execute(prepared, progress, shards)` (the driver
    on those shards); the Summary is the whole run's against the fixed design's episodes."""
    a = prepared.sweep.adaptive
    names = [c.name for c in prepared.ckpts]
    rounds, max_rounds = recorded_rounds(prepared.manifest), n_rounds(a.max_trials, a.round_trials)
    started, failures, ran = time.monotonic(), 0, False
    while not finished(rounds, max_rounds):
        number = len(rounds) + 1
        trials = min(number * a.round_trials, a.max_trials)
        shards = round_shards(prepared.shards, running(rounds, names), trials)
        summary = execute(prepared, progress, shards)
        failures, ran = failures + summary.episode_failures, ran or summary.ran
        if set(summary.shards_failed) & {s.id for s in shards}:
            print(f"adaptive: round {number} has failed shards; it is decided when a resume completes it",
                  file=sys.stderr, flush=True)
            break
        previous = rounds[-1].verdicts if rounds else {}
        values = episode_values(scored_episodes(prepared.run.root), a.metric)
        verdicts = decide({n: values.get(n, {}) for n in names}, previous, number, a.margin, a.confidence,
                          a.round_trials, a.max_trials)
        rounds.append(Round(round=number, trials=trials, verdicts=verdicts))
        prepared.manifest.adaptive = [r.model_dump(mode="json") for r in rounds]
        prepared.run.write_manifest(prepared.manifest)
        print(round_line(rounds[-1]), file=sys.stderr, flush=True)
    whole = Driver(prepared.sweep, prepared.run, prepared.ckpts, prepared.shards, progress=False).summary()
    whole.episode_failures, whole.wall_s, whole.ran = failures, time.monotonic() - started, ran
    return whole


def round_line(r: Round) -> str:
    statuses = ", ".join(f"{name} {v.status}" for name, v in r.verdicts.items())
    return f"adaptive: round {r.round} ({r.trials} trials per task): {statuses}"
