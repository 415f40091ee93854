"""Episode workers that Ray cannot place in time (a shared cluster whose CPUs others took after the
resource check), without Ray: the test's transport says which workers entered the sweep. Those that
did serve; the others are killed and routed around, as engine replicas that do not start are; none
at all fails every pending shard (infrastructure, saying so) instead of escaping as GetTimeoutError."""

from __future__ import annotations

import json

import ray.exceptions as rx

import handoff  # noqa: F401
from handoff.sweep import engines
from handoff.sweep.config import checkpoints, validate
from handoff.sweep.driver import Driver
from handoff.sweep.failures import ShardFailure
from handoff.sweep.plan import Episode, Shard
from handoff.sweep.run import compose
from handoff.sweep.rundir import SweepRun


class Call:
    def __init__(self, worker: Worker):
        self.worker = worker

    def remote(self, *args):
        return self.worker  # the ObjectRef of its `enter`: the worker itself


class Worker:
    def __init__(self, placed: bool):
        self.placed, self.enter = placed, Call(self)


class Transport:
    """ray.put/wait/get/kill over the test's workers: `enter` finishes only on a placed worker."""

    def __init__(self):
        self.killed: list = []
        self.waited_s: list[float] = []

    def put(self, value):
        return value

    def wait(self, refs, num_returns=1, timeout=None):
        self.waited_s.append(timeout)
        done = [r for r in refs if r.placed]
        return done, [r for r in refs if not r.placed]

    def get(self, refs, timeout=None):
        if any(not r.placed for r in (refs if isinstance(refs, list) else [refs])):
            raise rx.GetTimeoutError("Get timed out: some object(s) not ready.")

    def kill(self, handle):
        self.killed.append(handle)


def _driver(tmp_path, monkeypatch, placed: list[bool]) -> tuple[Driver, Transport]:
    monkeypatch.setattr(engines, "actor_state", lambda handle: "DEAD")  # the actor table: a killed worker is dead
    cfg = validate(compose([f"run_dir={tmp_path}/run", "engine=scripted", "engine.load_timeout_s=1200"]))
    shard = Shard(id="s", model="m", domain="airline", trial=0,
                  episodes=[Episode(model="m", step=0, domain="airline", task_id="0", trial=0, seed=1)])
    d = Driver(cfg, SweepRun(tmp_path / "run"), checkpoints(cfg), [shard], progress=False)
    d.ray, d.workers = Transport(), [Worker(p) for p in placed]
    d.load = [0] * len(placed)
    return d, d.ray


def test_workers_ray_cannot_place_in_time_fail_the_pending_shards_as_infrastructure(tmp_path, monkeypatch):
    d, ray = _driver(tmp_path, monkeypatch, [False, False])
    d.wait_workers()  # before: GetTimeoutError escaped from the sweep (a traceback, exit 1)
    failed = json.loads(d.run.failed_path("s").read_text())
    assert failed["kind"] == ShardFailure.INFRASTRUCTURE.value
    assert "episode workers did not start within 1200s" in failed["error"] and "CPU" in failed["error"]
    assert ray.waited_s == [1200] and len(ray.killed) == 2 and d.workers == []


def test_workers_that_started_serve_and_the_others_are_routed_around(tmp_path, monkeypatch):
    d, ray = _driver(tmp_path, monkeypatch, [True, False, True])
    d.wait_workers()
    assert [w.placed for w in d.workers] == [True, True] and d.load == [0, 0]
    assert [w.placed for w in ray.killed] == [False] and not d.run.failed_path("s").exists()
