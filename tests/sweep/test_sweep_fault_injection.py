"""Faults injected into a real local Ray cluster (2 CPUs, the scripted engine) whose GCS registers
every actor 1 s late, as a busy machine does: Ray's own `testing_asio_delay_us` holds each
RegisterActor call, so an actor just created is not in the GCS actor table yet. The processes run
tests/support/faults.py's hook: an episode that kills its worker every time, an engine killed in the
middle of an in-place reload, loads that fail on one replica or on all.

The delay reproduces the fresh-clone failure of issue 21 deterministically: the driver read an actor
that the GCS did not list yet as DEAD, "dead for good", and failed its checkpoint's shards with
"every replica is dead (engine.max_restarts=3 restarts spent)" after one attempt."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import handoff  # noqa: F401
from bench.scripted import model_path
from handoff.records import read_shard
from handoff.rundir import RunPaths
from handoff.sweep.engines import actor_state
from handoff.sweep.run import compose, run_sweep
from tests.support.cluster import cluster_env
from tests.support.faults import FAULTS_ENV, write_plan

pytestmark = pytest.mark.ray

REGISTRATION_DELAY_US = 1_000_000
BASE = ["engine=scripted", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=2", "shard_size=2",
        "workers.processes=1", "workers.threads=2", "max_attempts=2", "logger.mode=disabled"]
# One worker process with two threads: the two episodes of a default run at once, as two processes ran
# them, for half the start-up (each worker process imports tau2, transformers and vLLM's tool parser:
# ~18 CPU s).


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray (4 declared GPUs) whose GCS delays each actor's registration and whose workers run
    the fault hook; yields the plan file (empty: no fault)."""
    import ray

    faults = tmp_path_factory.mktemp("faults") / "plan.json"
    write_plan(faults)
    tmp = tempfile.mkdtemp(prefix="rf-", dir="/tmp")  # AF_UNIX paths must stay short
    delay = f"ActorInfoGcsService.grpc_server.RegisterActor={REGISTRATION_DELAY_US}:{REGISTRATION_DELAY_US}"
    saved = os.environ.get("RAY_testing_asio_delay_us")
    os.environ["RAY_testing_asio_delay_us"] = delay  # read by the GCS that ray.init starts
    try:
        ray.init(num_cpus=2, num_gpus=4, include_dashboard=False, object_store_memory=128 << 20, _temp_dir=tmp,
                 log_to_driver=False, namespace="handoff",
                 runtime_env={"worker_process_setup_hook": "tests.support.faults.inject",
                              # the hook lives in tests/: this checkout on every worker's PYTHONPATH
                              "env_vars": {FAULTS_ENV: str(faults), "PYTHONPATH": cluster_env()["PYTHONPATH"]}})
    finally:
        if saved is None:
            del os.environ["RAY_testing_asio_delay_us"]
        else:
            os.environ["RAY_testing_asio_delay_us"] = saved
    yield faults
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def faults(cluster):
    """The plan file, reset to no fault after the test."""
    yield cluster
    write_plan(cluster)


def sweep(run_dir: Path, *extra: str):
    overrides = [*BASE, f"run_dir={run_dir}", *extra]
    return run_sweep(compose(overrides), overrides, progress=False)


def checkpoints(root: Path, n: int) -> list[str]:
    """`n` scripted checkpoints policy-step1..n (the SmolLM2 tokenizer, the Hermes template)."""
    for step in range(1, n + 1):
        (root / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
    return ["model=[checkpoints]", f"model.checkpoints.glob={root}/global_step_*",
            f"model.checkpoints.tokenizer={model_path()}", "model.checkpoints.chat_template=hermes"]


def episodes(run_dir: Path) -> list[tuple]:
    return [r.key for p in sorted(RunPaths(run_dir).shards_dir.glob("*.jsonl")) for r in read_shard(p)]


def failures(run_dir: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in RunPaths(run_dir).failed_dir.glob("*.json")}


def test_an_actor_not_registered_yet_is_not_dead(cluster):
    """Right after `.remote()` the GCS does not list the actor (registration is held 1 s): it reads
    as not alive and not DEAD, then ALIVE."""
    import ray

    @ray.remote(num_cpus=0)
    class Probe:
        def ping(self) -> int:
            return os.getpid()

    probe = Probe.remote()
    first = actor_state(probe)
    ray.get(probe.ping.remote(), timeout=300)
    assert first not in ("ALIVE", "DEAD") and actor_state(probe) == "ALIVE"
    ray.kill(probe)


def test_one_slots_failed_load_leaves_the_checkpoint_to_the_others(faults, tmp_path):
    """Rolling, 2 slots both loading the checkpoint: the first load fails on one of them only. The
    other slot serves every episode; nothing fails (the failed slot's checkpoint is not reloaded on a
    fresh slot). This is also the late-registration case of issue 21 (it was its own sweep,
    test_late_actor_registration_fails_nothing, with the same assertions): every actor registers 1 s
    late, and the rolling schedule's first look at a new slot's actor found it missing from the GCS
    table and failed every shard with "every replica is dead"."""
    log = tmp_path / "faults.log"
    write_plan(faults, fail_loads="^policy-step1$", fail_once=str(tmp_path / "failed-once"), log=str(log))
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, *checkpoints(tmp_path / "ckpts", 1), "schedule=rolling", "engine.replicas=2")
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["fail_load"]
    assert failures(run_dir) == {} and summary.shards_failed == []
    assert len(set(episodes(run_dir))) == len(episodes(run_dir)) == summary.episodes_done == 2


@pytest.mark.timeout(600)  # before the fix the sweep never ended: each death requeued the episode for free
def test_an_episode_that_kills_its_worker_every_time_spends_attempts(faults, tmp_path):
    """kill -9 of the one worker process each time it starts the trial-0 episode, with trial 1 beside
    it on the same worker: the first two deaths cost nothing (a node's loss would look the same, and
    either episode may be the cause); from then on each runs on a worker of its own, trial 1 finishes
    there, and each death of trial 0 alone costs an attempt: after max_attempts=2 its shard fails
    saying why. (Before: every death was free and the sweep never ended; then trial 1, innocent,
    was charged for trial 0's deaths too and its shard failed beside it.)"""
    log = tmp_path / "faults.log"
    write_plan(faults, poison="/0$", log=str(log))
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, "trials=2", "tasks.limit=1", "shard_size=1")
    poisoned = "smollm2-135m-instruct__retail__t0__0000"
    assert summary.shards_failed == [poisoned] and summary.episode_failures == 2
    failed = failures(run_dir)[poisoned]
    assert failed["attempts"] == 2 and "the worker process died 4 times while running episode" in failed["error"]
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["poison"] * 4
    assert [k[3] for k in episodes(run_dir)] == [1]


def test_a_timed_out_episode_is_cancelled(faults, tmp_path):
    """One worker thread in all. Trial 0 runs first (and warms the worker); trial 1's first user
    request then hangs (180 s), once. At episode_timeout_s the driver cancels the episode: the
    engine's request is cancelled, the worker's thread ends the episode at once, and the second
    attempt completes. (Before: the thread waited for the hung request, the second attempt queued
    behind it and timed out too: the shard failed.)"""
    log = tmp_path / "faults.log"
    write_plan(faults, slow="^user/[^/]+/retail/[^/]+/1/", slow_s=180, slow_once=str(tmp_path / "slow-once"),
               log=str(log), traced=True)
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, "workers.threads=1", "trials=2", "tasks.limit=1",
                       "episode_timeout_s=30")  # 10x a scripted episode: the hung request is the only wait
    events = [line.split() for line in log.read_text().splitlines()]
    assert [e[0] for e in events if e[0] in ("slow", "cancelled", "slow_done")] == ["slow", "cancelled"], events
    trial1 = [e[0] if e[0] == "run" else e[3] for e in events if e[0] in ("run", "ran") and e[2].endswith("/1")]
    assert trial1[0] == "run" and trial1[1] != "ok" and trial1[2:] == ["run", "ok"], events
    assert summary.shards_failed == [] and summary.episodes_done == 2  # (a cold first episode may time out too)


def test_a_request_past_its_timeout_is_cancelled(faults, tmp_path):
    """Trial 1's first user request hangs (120 s), once: at engine.request_timeout_s the episode's
    client gives it up and cancels it on the engine (vLLM would abort it), and the second attempt
    completes. (Before: the abandoned request went on on the engine until it ended.)"""
    log = tmp_path / "faults.log"
    write_plan(faults, slow="^user/[^/]+/retail/[^/]+/1/", slow_s=120, slow_once=str(tmp_path / "slow-once"),
               log=str(log))
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, "workers.threads=1", "trials=2", "tasks.limit=1",
                       "engine.request_timeout_s=20")
    events = [line.split()[0] for line in log.read_text().splitlines()]
    assert [e for e in events if e in ("slow", "cancelled", "slow_done")] == ["slow", "cancelled"], events
    assert summary.shards_failed == [] and summary.episodes_done == 2


def test_engine_killed_during_an_in_place_reload(faults, tmp_path):
    """Rolling, one slot, two checkpoints: kill -9 of the engine replica as it begins to load the
    second checkpoint in place. Ray restarts it and retries the load there: every episode of both
    checkpoints once, none failed, each a complete scripted conversation."""
    log = tmp_path / "faults.log"
    write_plan(faults, kill_on_load=str(tmp_path / "killed-once"), log=str(log))
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, *checkpoints(tmp_path / "ckpts", 2), "schedule=rolling")
    assert [line.split()[::2] for line in log.read_text().splitlines()] == [["kill_on_load", "policy-step2"]]
    assert failures(run_dir) == {} and summary.episode_failures == 0
    keys = episodes(run_dir)
    assert len(keys) == len(set(keys)) == summary.episodes_done == 4
    records = [r for p in RunPaths(run_dir).shards_dir.glob("*.jsonl") for r in read_shard(p)]
    assert {r.simulation["termination_reason"] for r in records} == {"user_stop"}


def test_failed_engine_start_frees_its_placement_group(faults, tmp_path):
    """Sequential, TP=2 on 4 (declared) GPUs: the first checkpoint's engine fails to load; its replica
    is stopped and its placement group removed, so the next checkpoint's engine fits beside the user
    simulator's and runs in full. (Before: the group stayed reserved, and the next checkpoint's
    engine waited for GPUs until engine.load_timeout_s, then failed too.)"""
    from ray.util import placement_group_table

    write_plan(faults, fail_loads="^policy-step1$")
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, *checkpoints(tmp_path / "ckpts", 2), "schedule=sequential", "engine.device=gpu",
                       "cluster.num_gpus=4", "engine.tensor_parallel_size=2", "engine.load_timeout_s=60")
    assert summary.shards_failed == ["policy-step1__retail__t0__0000"]
    assert "injected load failure of policy-step1" in failures(run_dir)["policy-step1__retail__t0__0000"]["error"]
    assert len(episodes(run_dir)) == 2 == len(set(episodes(run_dir)))
    assert [g for g in placement_group_table().values() if g["state"] != "REMOVED"] == []


@pytest.mark.timeout(600)  # before the fix the sweep waited forever
def test_a_slot_lost_for_good_while_another_is_pinned(faults, tmp_path):
    """Rolling: policy-step1 is the user simulator's checkpoint, served by its engine (a pinned
    slot); policy-step2 gets the slot of its own. kill -9 of that replica at its first step2
    request, and its restart never completes (as when its node is gone for good): step2's queued
    episodes can go nowhere (the pinned slot serves step1 only), so the outage is timed and step2's
    shards fail after engine.load_timeout_s saying so, without spending attempts, while step1's all
    finish. (Before: the pinned slot, alive, kept the outage from being timed: the sweep waited
    forever.)"""
    log, root = tmp_path / "faults.log", tmp_path / "ckpts"
    write_plan(faults, kill_serving="^policy-step2$", kill_serving_once=str(tmp_path / "killed-once"),
               hang_restarts=600, log=str(log))
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, *checkpoints(root, 2), "user=hosted", f"user.model.path={root}/global_step_1",
                       f"user.model.tokenizer={model_path()}", "+engine.script.share_user_engine=true",
                       "tasks.limit=4", "engine.script.delay_s=0.5", "engine.load_timeout_s=30")
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["kill_serving", "hang_restart"]
    assert summary.episode_failures == 0
    assert summary.shards_failed and all(sid.startswith("policy-step2__") for sid in summary.shards_failed)
    for sid in summary.shards_failed:
        error = failures(run_dir)[sid]["error"]
        assert "unavailable for more than engine.load_timeout_s=30s: agent engine policy-step2" in error, error
    step1 = [k for k in episodes(run_dir) if k[0] == "policy-step1"]
    assert len(step1) == len(set(step1)) == 4


@pytest.mark.timeout(600)  # before the fix the replica's restarts were spent and every shard failed
def test_a_request_that_kills_its_engine_fails_alone_and_the_others_go_on(faults, tmp_path):
    """Four episodes at once on one user-simulator replica; each request of trial 0's user kills it
    (kill -9, every time). Its first death takes the others' requests in flight down too: all are
    suspects, each served alone once the replica is back (nothing else runs there meanwhile). Only
    the deaths while trial 0's request ran alone count against it: after REQUEST_DEATHS=2 it fails
    with PoisonRequestError and trial 0 ends as a user_error episode; the replica (3 deaths, within
    engine.max_restarts=3) serves the other three to the end; no attempt is charged, no shard fails.
    (Before: Ray retried the request on each restart until the replica was dead for good, and every
    shard failed with "every replica is dead".)"""
    log = tmp_path / "faults.log"
    write_plan(faults, kill_requests="^user/[^/]+/retail/[^/]+/0/", log=str(log))
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, "tasks.limit=1", "trials=4", "workers.threads=4", "engine.script.delay_s=1")
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["kill_request"] * 3
    assert failures(run_dir) == {} and summary.shards_failed == [] and summary.episode_failures == 0
    records = {r.trial: r for p in RunPaths(run_dir).shards_dir.glob("*.jsonl") for r in read_shard(p)}
    assert sorted(records) == [0, 1, 2, 3] and len(episodes(run_dir)) == 4
    assert records[0].simulation["termination_reason"] == "user_error"
    assert "each time it ran there alone (2 times)" in records[0].model_dump_json()
    assert {records[t].simulation["termination_reason"] for t in (1, 2, 3)} == {"user_stop"}


def test_a_death_with_its_node_is_never_charged_to_the_request(cluster):
    """A request let in alone on a replica whose node is then lost (a preempted machine) is not charged
    one of its REQUEST_DEATHS: the client charges a death only while the node it was let in on is alive
    in the GCS (a replica restarted on the same, living node is the request's doing)."""
    import ray

    from handoff.sweep.engines import Place, RayEngineClient

    assert RayEngineClient._node_lived(Place("ALIVE", ray.get_runtime_context().get_node_id(), 0))
    assert not RayEngineClient._node_lived(Place("ALIVE", "ab" * 28, 0))  # no such node: lost


def test_a_replica_that_cannot_rebuild_is_taken_out_of_service(faults, tmp_path):
    """Two replicas per engine set; kill -9 of the replica that gets the first request, and its
    restart cannot build its engine. It takes itself out of service (dead for good): its requests
    go to the other replica, for free, and every episode finishes. (Before: it stayed alive and
    failed each request routed to it: the killed request's retry there cost an attempt.)"""
    log = tmp_path / "faults.log"
    write_plan(faults, kill_serving=".", kill_serving_once=str(tmp_path / "killed-once"), fail_rebuilds=".",
               log=str(log))
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, "engine.replicas=2", "tasks.limit=4")
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["kill_serving", "fail_rebuild"]
    assert failures(run_dir) == {} and summary.shards_failed == [] and summary.episode_failures == 0
    assert len(set(episodes(run_dir))) == len(episodes(run_dir)) == summary.episodes_done == 4


def test_a_user_replica_that_fails_to_start_is_routed_around(faults, tmp_path):
    """Two user-simulator replicas, one fails to load at start: the other serves every episode.
    (Before: the user simulator's start failed, and every pending shard with it.)"""
    log = tmp_path / "faults.log"
    write_plan(faults, fail_loads=".", fail_role="user", fail_once=str(tmp_path / "failed-once"), log=str(log))
    run_dir = tmp_path / "run"
    _, summary = sweep(run_dir, "engine.replicas=2")
    assert [line.split()[::2] for line in log.read_text().splitlines()] == [["fail_load", "user/smollm2-135m-instruct"]]
    assert failures(run_dir) == {} and summary.shards_failed == []
    assert len(set(episodes(run_dir))) == len(episodes(run_dir)) == summary.episodes_done == 2
