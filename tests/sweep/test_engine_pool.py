"""The engine pool's decisions with a fake placement (no Ray, milliseconds): which replicas of a set
serve after their start, which are stopped, when a start fails and with what, and how many engine
sets the sweep holds at once."""

from __future__ import annotations

import pytest

import handoff  # noqa: F401
from handoff.sweep.config import checkpoints, user_checkpoint, validate
from handoff.sweep.driver import Driver, ShardState
from handoff.sweep.failures import Place
from handoff.sweep.plan import Shard
from handoff.sweep.pool import EnginePool, EngineStartError
from handoff.sweep.run import compose
from handoff.sweep.rundir import SweepRun


class Replica:
    def __init__(self, name: str):
        self._actor_id = name


class FakePlacement:
    """Replicas named <role><n>; `outcome[name]` is what its load gives (None: loaded), and the
    placement records what it started and stopped."""

    def __init__(self, outcome: dict | None = None):
        self.outcome = outcome or {}
        self.started: list[str] = []
        self.stopped: list[str] = []

    def start(self, ck, role):
        replica = Replica(f"{role}{len(self.started)}")
        self.started.append(replica._actor_id)
        return replica

    def await_ready(self, replicas, timeout_s):
        return [self.outcome.get(r._actor_id) for r in replicas]

    def place(self, replica):
        return Place("DEAD" if replica._actor_id in self.stopped else "ALIVE")

    def stop(self, replica):
        self.stopped.append(replica._actor_id)


def config(tmp_path, *extra):
    return validate(compose([f"run_dir={tmp_path}/run", "engine=scripted", "engine.replicas=3", *extra]))


def pool(tmp_path, placement, *extra) -> EnginePool:
    cfg = config(tmp_path, *extra)
    return EnginePool(cfg, checkpoints(cfg), user_checkpoint(cfg), placement)


def test_a_replica_that_fails_to_start_is_routed_around(tmp_path):
    """Three user replicas, the second fails to load: the set serves with the other two, the
    failed one is stopped and said. (Before: the user simulator's set failed, and every shard with it.)"""
    placement = FakePlacement({"user1": RuntimeError("injected load failure")})
    p = pool(tmp_path, placement)
    ref = p.start(p.user, "user")
    assert [r._actor_id for r in ref.replicas] == ["user0", "user2"] and placement.stopped == ["user1"]
    assert len(p.routed_around) == 1 and "injected load failure" in p.routed_around[0]


def test_a_replica_late_beside_loaded_ones_is_stopped_and_the_others_serve(tmp_path):
    placement = FakePlacement({"agent0": TimeoutError("late")})
    p = pool(tmp_path, placement)
    ref = p.start(p.ckpts[0], "agent")
    assert [r._actor_id for r in ref.replicas] == ["agent1", "agent2"] and placement.stopped == ["agent0"]
    assert "did not start within engine.load_timeout_s=900s" in p.routed_around[0]


def test_a_set_none_of_whose_replicas_starts_fails_with_a_replicas_own_reason(tmp_path):
    """Every replica fails or runs late: the start fails with the load's own error (not the timeout
    of the late ones), and every replica is stopped."""
    placement = FakePlacement({"agent0": TimeoutError("late"), "agent1": RuntimeError("injected load failure"),
                               "agent2": TimeoutError("late")})
    p = pool(tmp_path, placement)
    with pytest.raises(EngineStartError, match="injected load failure"):
        p.start(p.ckpts[0], "agent")
    assert sorted(placement.stopped) == ["agent0", "agent1", "agent2"]


def test_a_set_whose_every_replica_runs_late_fails_with_the_timeout(tmp_path):
    placement = FakePlacement({f"agent{i}": TimeoutError("late") for i in range(3)})
    p = pool(tmp_path, placement, "engine.load_timeout_s=7")
    with pytest.raises(TimeoutError, match=r"agent engine .* did not start within engine.load_timeout_s=7s: "
                                           r"each replica needs 0 GPU\(s\) and 0.25 CPU\(s\) on one node"):
        p.start(p.ckpts[0], "agent")
    assert len(placement.stopped) == 3


def test_engine_sets_count_the_user_simulators_own_unless_shared(tmp_path):
    """The scripted engine serves the user simulator's checkpoint for the agent only with
    share_user_engine; then one engine set runs at once."""
    placement = FakePlacement()
    assert pool(tmp_path, placement).engine_sets() == 2
    shared = pool(tmp_path, placement, "+engine.script.share_user_engine=true")
    assert shared.shares_user_engine(shared.ckpts[0]) and shared.engine_sets() == 1
    assert shared.engine_cpus() == 3 * 0.25


def test_the_driver_goes_on_with_the_user_replicas_that_started(tmp_path):
    """The driver's part: a user simulator replica dead at start beside live ones fails no shard;
    with none live, every pending shard fails saying why."""
    cfg = config(tmp_path)
    shard = Shard(id="s", model=checkpoints(cfg)[0].name, domain="retail", trial=0, episodes=[])
    placement = FakePlacement({"user0": RuntimeError("injected load failure")})
    d = Driver(cfg, SweepRun(tmp_path / "run"), checkpoints(cfg), [], progress=False, placement=placement)
    pending = [ShardState(shard, {})]
    ref = d._await_user(d.pool.launch(d.pool.user, "user"), pending)
    assert ref is not None and len(ref.replicas) == 2 and not pending[0].failed
    placement.outcome = {f"user{i}": RuntimeError("injected load failure") for i in range(3, 6)}
    assert d._await_user(d.pool.launch(d.pool.user, "user"), pending) is None
    assert pending[0].failed and "injected load failure" in d.run.failed_path("s").read_text()
