"""The driver's account of shards, without Ray (records are the test's): a written shard keeps only
its episode keys (to drop late duplicates), and a shard that dispatch left neither complete nor
failed fails as an internal error."""

from __future__ import annotations

import json

import handoff  # noqa: F401
from handoff.records import EpisodeRecord, read_shard
from handoff.sweep.config import checkpoints, validate
from handoff.sweep.driver import Driver
from handoff.sweep.failures import ShardFailure
from handoff.sweep.plan import Episode, Shard
from handoff.sweep.run import compose
from handoff.sweep.rundir import SweepRun


class Bar:
    def __init__(self):
        self.done = 0

    def episode_done(self, name: str, requests: int | None = None, cost=None) -> None:  # Progress.episode_done
        self.done += 1


def _driver(tmp_path, shards: list[Shard]) -> Driver:
    cfg = validate(compose([f"run_dir={tmp_path}/run", "engine=scripted"]))
    return Driver(cfg, SweepRun(tmp_path / "run"), checkpoints(cfg), shards, progress=False)


def _shard(sid: str, *task_ids: str) -> Shard:
    return Shard(id=sid, model="m", domain="airline", trial=0, episodes=[
        Episode(model="m", step=0, domain="airline", task_id=t, trial=0, seed=1) for t in task_ids])


def _record(task_id: str) -> EpisodeRecord:
    return EpisodeRecord(model="m", domain="airline", task_id=task_id, seed=1, simulation={"task_id": task_id})


def test_a_written_shard_keeps_its_episode_keys_not_its_records(tmp_path):
    d, bar = _driver(tmp_path, [_shard("s", "0", "1")]), Bar()
    st = d.states["s"]
    for task_id in ("0", "1"):
        d._record(st, _record(task_id), bar)
    assert [r.task_id for r in read_shard(d.run.shard_path("s"))] == ["0", "1"]
    assert st.complete and set(st.records) == {e.key for e in st.shard.episodes}
    assert not any(isinstance(r, EpisodeRecord) for r in st.records.values()), "a written shard's records kept"
    d._record(st, _record("1"), bar)  # a late duplicate (an attempt that ran over its time, then finished)
    assert bar.done == 2 and not d.run.partial_path("s").exists()
    assert d.summary().episodes_done == 2 and d.summary().shards_done == ["s"]


def test_a_shard_left_neither_complete_nor_failed_fails_as_an_internal_error(tmp_path):
    """A shard that holds one episode twice (a repeated task id, before the config refused it): its
    second record is dropped as a late duplicate, and dispatch ended with the shard neither written nor failed."""
    d, bar = _driver(tmp_path, [_shard("twice", "0", "0"), _shard("done", "1"), _shard("failed", "2")]), Bar()
    for sid, task_id in (("twice", "0"), ("twice", "0"), ("done", "1")):
        d._record(d.states[sid], _record(task_id), bar)
    d._give_up(d.states["failed"], "scripted failure", ShardFailure.EPISODE)
    d._fail_unaccounted(list(d.todo.values()))
    summary = d.summary()
    assert summary.shards_done == ["done"] and summary.shards_failed == ["failed", "twice"]
    twice = d.run.read_failed("twice")  # typed records, with their kind
    assert twice.kind is ShardFailure.INTERNAL and twice.error.startswith("internal error:")
    assert "(1 of its 2 episodes recorded)" in twice.error, twice.error
    failed = json.loads(d.run.failed_path("failed").read_text())  # still plain JSON to its readers
    assert failed["error"] == "scripted failure" and failed["kind"] == "episode" and failed["shard_id"] == "failed"
