"""The sweep on a real local Ray cluster (2 CPUs) with the scripted engine: every episode exactly
once after kill -9 of a worker, of the engine actors, and of the driver (then resume); failing
shards recorded while the sweep goes on; resume refused when the config or the labels changed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import handoff  # noqa: F401
from handoff.records import read_shard
from handoff.rundir import MANIFEST_VERSION, RunPaths
from handoff.sweep.manifest import ResumeRefused
from handoff.sweep.run import compose, run_sweep
from tests.support import sim
from tests.support.ray import kill_mid_run, recorded

pytestmark = pytest.mark.ray

BASE = ["engine=scripted", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=4", "shard_size=2",
        "workers.processes=1", "workers.threads=2", "max_attempts=3"]  # 2 episodes at once, 1 process's start-up
N_EPISODES = 4


def sweep(run_dir: Path, *extra: str):
    overrides = [*BASE, f"run_dir={run_dir}", *extra]
    return run_sweep(compose(overrides), overrides, progress=False)


def resume(run_dir: Path, *extra: str):
    """As `make resume RUN=<run_dir> ARGS=...`: the run's recorded config plus `extra`."""
    return run_sweep(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}", *extra], progress=False)


def result_set(run_dir: Path) -> dict:
    """Every episode of a run by key, without run-specific ids and times; asserts no duplicates."""
    out = {}
    for path in sorted(RunPaths(run_dir).shards_dir.glob("*.jsonl")):
        for r in read_shard(path):
            assert r.key not in out, f"episode {r.key} recorded twice"
            sim = r.simulation
            messages = [(m["role"], m.get("content"), json.dumps(m.get("tool_calls"), sort_keys=True))
                        for m in sim["messages"]]
            out[r.key] = (r.seed, sim["termination_reason"], sim["reward_info"]["reward"], messages,
                          [e.model_dump(mode="json") for e in r.format_events])
    return out


@pytest.fixture(scope="module")
def baseline(ray_cluster, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("sweep") / "baseline"
    prepared, summary = sweep(run_dir)
    return run_dir, prepared, summary


def test_uninterrupted_sweep_records_every_episode_once(baseline):
    run_dir, prepared, summary = baseline
    results = result_set(run_dir)
    assert len(results) == N_EPISODES == summary.episodes_done == summary.episodes_total
    assert summary.shards_failed == [] and summary.episode_failures == 0
    manifest = RunPaths(run_dir).read_manifest()
    assert manifest.n_episodes == N_EPISODES and len(manifest.shards) == 2
    assert {"labels_sha256", "splits_sha256", "tasks_sha256"} <= manifest.hashes.keys()
    assert manifest.tau2_version == "26.3" and len(manifest.config_hash) == 64
    assert manifest.schema_version == MANIFEST_VERSION and uuid.UUID(manifest.run_uuid).version == 4
    assert RunPaths(run_dir).config_yaml.is_file()
    # the scripted agent transfers, the scripted user stops: a real, evaluated tau2 episode
    assert {r[1] for r in results.values()} == {"user_stop"}
    assert all(any("transfer_to_human_agents" in m[2] for m in r[3]) for r in results.values())


def test_the_fault_free_simulated_sweep_gives_the_real_scripted_sweeps_records(baseline, tmp_path):
    """The same plan (config, checkpoints, shards and their seeds) on the deterministic simulator with no
    fault injected (issue 48): each episode the real one (EpisodeWorker, tau2 and its evaluator, the
    scripted engine on real EngineHosts through RayEngineClient), dispatched by the real driver on a
    fake Ray. Every shard file is the real sweep's, record for record, field for field, but for what a
    clock measured (sim.WALL_CLOCK) and the header's checksum and run uuid (sim.RUN_HEADER). The
    comparison fails on a changed episode seed."""
    run_dir, prepared, _ = baseline
    outcome = sim.run_plan(prepared.sweep, prepared.ckpts, prepared.shards, tmp_path / "sim")
    assert outcome.violations == [] and outcome.failed == {} and len(outcome.done) == 2
    real = sim.shard_contents(run_dir)
    assert len(real) == 2 and sum(len(records) for _, records in real.values()) == N_EPISODES
    assert sim.shard_contents(tmp_path / "sim") == real

    reseeded = [shard.model_copy(update={"episodes": [ep.model_copy(update={"seed": ep.seed + 1}) if i == 0 else ep
                                                      for i, ep in enumerate(shard.episodes)]})
                for shard in prepared.shards]
    sim.run_plan(prepared.sweep, prepared.ckpts, reseeded, tmp_path / "reseeded")
    changed = sim.shard_contents(tmp_path / "reseeded")
    assert changed != real
    assert [[r["seed"] for r in records] for _, records in changed.values()] != \
        [[r["seed"] for r in records] for _, records in real.values()]


def test_killed_worker_and_engines_mid_sweep(baseline, tmp_path):
    """kill -9 of the workers after one finished episode, then at once of the engine replicas: Ray
    restarts them, the episodes in flight are retried, and each episode is recorded exactly once.
    (Both kills come after the first episode: the 3 episodes left, >= 4 engine requests of 1 s each,
    leave the watcher seconds to find the engines on a loaded machine; a kill after the second episode
    could find the sweep already over, as it once did.)"""
    run_dir = tmp_path / "run"
    killed: list = []
    watcher = kill_mid_run(run_dir, [(1, "EpisodeWorker"), (1, "EngineHost")], killed)
    _, summary = sweep(run_dir, "engine.script.delay_s=1.0")
    watcher.join(timeout=5)
    assert [title for _, title, _ in killed] == ["EpisodeWorker", "EngineHost"], killed
    assert all(done < N_EPISODES for done, _, _ in killed)  # the sweep was not over yet
    assert summary.shards_failed == [] and summary.episodes_done == N_EPISODES
    assert result_set(run_dir) == result_set(baseline[0])


@pytest.mark.parametrize("schedule", ["sequential", "rolling"])
def test_engine_dead_for_good_fails_only_its_checkpoints_shards(ray_cluster, tmp_path, schedule):
    """engine.max_restarts=0 and kill -9 of the first checkpoint's agent engine (the process that
    served its requests) after one finished episode: that checkpoint's unfinished shards fail saying
    so, without spending attempts, and the next checkpoint runs in full (under `rolling` on a new
    actor in the dead one's slot)."""
    from bench.scripted import model_path

    for step in (1, 2):
        (tmp_path / "ckpts" / f"global_step_{step}").mkdir(parents=True)
    run_dir, log = tmp_path / "run", tmp_path / "served.log"
    killed: list = []

    def kill_agent_engine():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (run_dir.exists() and recorded(run_dir) >= 1):
            time.sleep(0.2)
        pid = next(int(line.split()[0]) for line in log.read_text().splitlines() if " policy-step1 " in line)
        os.kill(pid, signal.SIGKILL)
        killed.append(recorded(run_dir))

    watcher = threading.Thread(target=kill_agent_engine, daemon=True)
    watcher.start()
    _, summary = sweep(run_dir, "model=[checkpoints]", f"model.checkpoints.glob={tmp_path}/ckpts/global_step_*",
                       f"model.checkpoints.tokenizer={model_path()}", "model.checkpoints.chat_template=hermes",
                       "engine.max_restarts=0", "engine.script.delay_s=1.0", f"engine.script.service_log={log}",
                       f"schedule={schedule}")
    watcher.join(timeout=60)
    assert killed and killed[0] < N_EPISODES
    assert summary.episode_failures == 0 and summary.shards_failed
    assert all(sid.startswith("policy-step1__") for sid in summary.shards_failed)
    for sid in summary.shards_failed:
        error = json.loads(RunPaths(run_dir).failed_path(sid).read_text())["error"]
        assert "agent engine policy-step1: every replica is dead (engine.max_restarts=0" in error, error
    step2 = [r.key for p in RunPaths(run_dir).shards_dir.glob("policy-step2__*.jsonl") for r in read_shard(p)]
    assert len(step2) == len(set(step2)) == N_EPISODES


def test_failing_shard_is_recorded_and_the_sweep_goes_on(ray_cluster, tmp_path):
    run_dir = tmp_path / "run"
    broken = "engine.script.fail_sessions='^user/[^/]+/retail/[^/]+/0/'"  # every trial-0 user turn ...
    _, summary = sweep(run_dir, broken, "trials=2", "tasks.limit=1", "shard_size=1")
    assert summary.shards_failed == ["smollm2-135m-instruct__retail__t0__0000"]
    failed = json.loads(RunPaths(run_dir).failed_path(summary.shards_failed[0]).read_text())
    assert "scripted failure" in failed["error"] and failed["attempts"] == 3
    assert "ray::EngineHost.generate()" in failed["error"] and "\x1b[" not in failed["error"]  # Ray's, uncoloured
    assert summary.episode_failures == 3
    done = RunPaths(run_dir).shard_path("smollm2-135m-instruct__retail__t1__0000")  # ... but trial 1 runs
    assert len(read_shard(done)) == 1
    mtime = done.stat().st_mtime_ns
    _, again = resume(run_dir)  # only the failed shard runs again (and fails again)
    assert again.shards_failed == summary.shards_failed and again.episode_failures == 3
    assert done.stat().st_mtime_ns == mtime


def test_driver_sigkill_then_resume_equals_uninterrupted(baseline, tmp_path, ray_cluster):
    run_dir = tmp_path / "run"
    address = ray_cluster.get_runtime_context().gcs_address
    cmd = [sys.executable, "-m", "handoff.sweep", *BASE, f"run_dir={run_dir}", "engine.script.delay_s=0.5",
           "cluster=existing", f"cluster.address={address}"]
    driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while not list(RunPaths(run_dir).shards_dir.glob("*.jsonl")) and time.monotonic() < deadline:
            assert driver.poll() is None, "the driver ended before it could be killed"
            time.sleep(0.2)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    shards_before = len(list(RunPaths(run_dir).shards_dir.glob("*.jsonl")))
    assert 1 <= shards_before < 2
    run_uuid = RunPaths(run_dir).read_manifest().run_uuid
    prepared, summary = resume(run_dir)
    assert prepared.manifest.run_uuid == run_uuid == RunPaths(run_dir).read_manifest().run_uuid
    assert summary.shards_failed == [] and summary.episodes_done == N_EPISODES
    assert result_set(run_dir) == result_set(baseline[0])


def test_resume_of_a_finished_run_runs_nothing(baseline):
    run_dir = baseline[0]
    before = {p: p.stat().st_mtime_ns for p in RunPaths(run_dir).shards_dir.glob("*.jsonl")}
    _, summary = resume(run_dir)
    assert summary.episodes_done == N_EPISODES and summary.episode_failures == 0
    assert {p: p.stat().st_mtime_ns for p in RunPaths(run_dir).shards_dir.glob("*.jsonl")} == before


def test_changed_config_refuses_to_resume(baseline, tmp_path):
    run_dir = baseline[0]
    with pytest.raises(ResumeRefused, match=r"config changed:\n    trials: 1 -> 2"):
        resume(run_dir, "trials=2")
    with pytest.raises(ResumeRefused, match=r"engine.script.user: \[.*'###TRANSFER###'\] -> \['hi', 'bye'\]"):
        resume(run_dir, "engine.script.user=[hi,bye]")
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    manifest = RunPaths(copy).read_manifest()
    manifest.hashes["labels_sha256"] = "0" * 64
    RunPaths(copy).write_manifest(manifest)
    with pytest.raises(ResumeRefused, match="labels_sha256 changed"):
        resume(copy)


def test_a_run_from_before_the_manifest_version_resumes(baseline, tmp_path):
    """A version-1 manifest (no version, no run_uuid) loads, and resumes with a stable run_uuid."""
    copy = shutil.copytree(baseline[0], tmp_path / "old")
    legacy = json.loads(RunPaths(copy).manifest_path.read_text())
    del legacy["schema_version"], legacy["run_uuid"]
    RunPaths(copy).manifest_path.write_text(json.dumps(legacy))
    prepared, summary = resume(copy)
    assert summary.episodes_done == N_EPISODES and summary.episode_failures == 0
    assert prepared.manifest.schema_version == 1 and prepared.manifest.run_uuid == RunPaths(copy).read_manifest().run_uuid


def test_changed_config_refuses_to_resume_from_the_command_line(baseline, capsys):
    """`python -m handoff.sweep resume=... seed=7 ...`: the command line's own main, in process (a process
    of its own cost ~15 s of start-up here; tests/sweep/test_sweep_cli.py runs the entry points as
    processes)."""
    from handoff.sweep.__main__ import main as sweep_main

    status = sweep_main([f"resume={baseline[0]}", "seed=7", "engine.script.agent=[hi]"])
    stderr = capsys.readouterr().err
    assert status == 2
    assert "refusing to resume" in stderr and "seed: 0 -> 7" in stderr
    assert "engine.script.agent: [" in stderr


def test_only_an_idle_worker_is_kept(ray_cluster, monkeypatch):
    """IdleWorkers keeps the worker that says no episode runs in it, and kills the busy one and the
    one that does not answer (every thread taken); a later sweep of another shape kills the kept one,
    and so does the driver leaving Ray, before it leaves."""
    import psutil
    import ray
    from ray.exceptions import RayActorError

    from handoff.sweep import workers
    from handoff.sweep.engines import actor_state

    class Probe:
        def __init__(self, answer: bool | None):
            self.answer = answer

        def idle(self) -> bool:
            if self.answer is None:
                time.sleep(600)  # its one thread runs a stuck episode
            return bool(self.answer)

        def ping(self) -> int:
            return os.getpid()

    monkeypatch.setattr(workers, "RELEASE_WAIT_S", 5.0)
    probe = ray.remote(Probe).options(num_cpus=0.01, max_concurrency=1)
    idle, busy, stuck = (probe.remote(a) for a in (True, False, None))
    ray.get([h.ping.remote() for h in (idle, busy, stuck)], timeout=300)
    kept = workers.IdleWorkers()
    kept.keep(ray, ("probe", 1), [idle, busy, stuck])
    assert kept.handles == [idle]
    for gone in (busy, stuck):
        with pytest.raises(RayActorError):
            ray.get(gone.ping.remote(), timeout=300)
    assert kept.take(ray, ("probe", 2), 1) == [] and kept.handles == []
    with pytest.raises(RayActorError):
        ray.get(idle.ping.remote(), timeout=300)
    # The driver leaving Ray (session._shutdown) releases the kept workers: dead on return, not
    # later (a SLURM job's cleanup stops the nodes right after the driver exits).
    again = probe.remote(True)
    pid = ray.get(again.ping.remote(), timeout=300)
    kept.keep(ray, ("probe", 1), [again])
    kept.release(ray)
    assert kept.handles == [] and actor_state(again) == "DEAD"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def worker_pids(run_dir: Path) -> set[int]:
    """The episode workers that served the run: their logs are logs/worker-<host>-<pid>.log."""
    return {int(p.stem.rsplit("-", 1)[1]) for p in (run_dir / "logs").glob("worker-*.log")}


def test_the_next_sweep_on_the_same_ray_takes_up_the_idle_worker(baseline, tmp_path):
    """(Last of the module: it ends with a worker of another shape.) The worker process of a sweep,
    idle at its end, runs the next sweep of its shape (no second import of tau2 and vLLM's parser)
    with the baseline's results, logging into the new run; a sweep of another shape kills it and
    starts its own: other engine needs (engine.replicas=2: a kept worker holds its CPUs on its node,
    where other replicas might not fit), then other workers (workers.threads=1)."""
    import psutil

    first, again, more, other = tmp_path / "first", tmp_path / "again", tmp_path / "more", tmp_path / "other"
    sweep(first, "tasks.limit=2")
    _, summary = sweep(again)
    assert summary.shards_failed == [] and summary.episodes_done == N_EPISODES
    assert worker_pids(again) == worker_pids(first) and len(worker_pids(again)) == 1
    assert result_set(again) == result_set(baseline[0])
    previous = again
    for run_dir, override in ((more, "engine.replicas=2"), (other, "workers.threads=1")):
        [kept] = worker_pids(previous)
        sweep(run_dir, override, "tasks.limit=2")
        assert worker_pids(run_dir) and kept not in worker_pids(run_dir), override
        assert not psutil.pid_exists(kept) or psutil.Process(kept).status() == psutil.STATUS_ZOMBIE
        previous = run_dir
