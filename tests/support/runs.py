"""Run directories planned by the sweep itself (`prepare`: no Ray) and filled with synthetic episodes of
the planned tasks: a resume finds them finished and goes straight to reducing and reporting."""

from __future__ import annotations

from pathlib import Path

from handoff.records import write_shard
from handoff.sweep.run import compose, prepare
from handoff.testing.synthetic import Behavior, episode

TINY = ["engine=scripted", "domain=[airline]", "tasks.per_kind=null", "tasks.limit=2", "shard_size=1",
        "workers.processes=1", "workers.threads=1", "logger.mode=disabled"]


def finished_run(run_dir: Path, *extra: str, behavior: Behavior = Behavior()) -> Path:
    """A run of TINY + `extra` whose every planned shard holds synthetic episodes."""
    overrides = [*TINY, f"run_dir={run_dir}", *extra]
    prepared = prepare(compose(overrides), overrides)
    prepared.run.unlock()
    for shard in prepared.shards:
        records = [episode(e.model, e.step, e.domain, e.task_id, e.trial, behavior, e.seed) for e in shard.episodes]
        write_shard(prepared.run.shard_path(shard.id), shard.id, records)
    return run_dir
