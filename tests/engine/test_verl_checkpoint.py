"""A verl FSDP actor checkpoint, written by torch.distributed (gloo, 2 ranks) from tiny-hermes, given
to the sweep as `global_step_N/actor`: merged once by verl's own model merger in a Ray task, and
served by vLLM exactly as the source model cast to the merger's dtype."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from handoff.engine import models
from handoff.engine.base import Sampling
from handoff.errors import ConfigError
from handoff.sweep import preflight
from handoff.sweep.config import checkpoints, validate
from handoff.sweep.run import compose, finish, run_sweep
from tests.support.fsdp import write_verl_actor
from tests.support.ray import kill_mid_run

pytestmark = [pytest.mark.real_engine, pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def run_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verl")
    write_verl_actor(models.model_dir(models.TINY), root / "global_step_7" / "actor", world_size=2)
    return root


def sweep_of(root: Path, *extra: str):
    return validate(compose([f"run_dir={root}/runs/x", "model=[checkpoints]", "model.checkpoints.name=rl",
                             f"model.checkpoints.glob={root}/global_step_*/actor", "user=litellm", *extra]))


def greedy_tokens(model: Path, prompts: list[list[int]]) -> list[list[int]]:
    from handoff.engine.vllm_engine import EngineSettings, VLLMEngine

    with VLLMEngine(EngineSettings(model=str(model), max_model_len=512, seed=0)) as engine:
        return [engine.generate(p, Sampling(temperature=0.0, max_tokens=24)).token_ids for p in prompts]


def test_verl_actor_is_merged_once_by_verls_merger_and_serves_like_the_source(run_root, ray_cluster):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sweep = sweep_of(run_root)
    [ck] = checkpoints(sweep)
    assert (ck.name, ck.step, ck.path) == ("rl-step7", 7, str(run_root / "global_step_7" / "actor"))
    served = preflight.served(ck, preflight.on_cluster(sweep, [ck], local=True))
    merged = Path(served.path)
    assert merged.parent == Path(ck.path) and merged.name.startswith("merged_hf-")
    config = json.loads((merged / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    assert config["transformers_version"].startswith("5.10."), "the merger ran with verl's transformers pin"

    # Merged once: a second sweep reuses the cached directory.
    before = (merged / "model.safetensors").stat().st_mtime_ns
    again = preflight.served(ck, preflight.on_cluster(sweep, [ck], local=True))
    assert again.path == served.path and (merged / "model.safetensors").stat().st_mtime_ns == before

    source = AutoModelForCausalLM.from_pretrained(models.model_dir(models.TINY), dtype=torch.float32).to(torch.bfloat16)
    weights = load_file(merged / "model.safetensors")
    expected = {k: v for k, v in source.state_dict().items() if k in weights}
    assert set(expected) == set(weights) and "model.embed_tokens.weight" in weights
    assert all(torch.equal(weights[k], expected[k]) for k in weights)

    cast = run_root / "source-bf16"
    source.save_pretrained(cast)
    AutoTokenizer.from_pretrained(models.model_dir(models.TINY)).save_pretrained(cast)
    tokenizer = AutoTokenizer.from_pretrained(merged)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False)
               for text in ("I want to talk to a human.", "Cancel my reservation ABC123 please.")]
    assert greedy_tokens(merged, prompts) == greedy_tokens(cast, prompts)


def test_incomplete_verl_actor_is_refused_with_what_is_missing(run_root, tmp_path):
    actor = tmp_path / "global_step_9" / "actor"
    shutil.copytree(run_root / "global_step_7" / "actor", actor, ignore=shutil.ignore_patterns("merged_hf-*"))
    (actor / "model_world_size_2_rank_1.pt").unlink()
    (actor / "huggingface" / "config.json").unlink()
    with pytest.raises(ConfigError) as err:  # the config check, before Ray starts
        sweep_of(tmp_path)
    assert f"{actor}: incomplete verl FSDP shards: world sizes [2], ranks [0]" in str(err.value)
    assert f"{actor / 'huggingface'}: no config.json" in str(err.value)


def engine_actors(role: str) -> list:
    """This job's EngineHost actors of `role` as the GCS lists them (ActorTableData; repr_name is
    EngineHost.__repr__)."""
    import ray
    from ray._private.state import state
    from ray.core.generated.gcs_pb2 import ActorTableData

    job = ray.get_runtime_context().get_job_id()
    table = [ActorTableData.FromString(a) for a in state._connect_and_get_accessor().get_actor_table(None, None)]
    return [a for a in table if a.class_name.endswith("EngineHost") and a.job_id.hex() == job
            and a.repr_name.startswith(f"EngineHost({role}:")]


def user_engine(_title: str) -> list:
    """The user simulator's replica process, once it is up."""
    import psutil
    from ray.core.generated.gcs_pb2 import ActorTableData

    return [psutil.Process(a.pid) for a in engine_actors("user") if a.pid and a.state == ActorTableData.ALIVE][:1]


def test_two_verl_steps_swept_with_a_hosted_user_killed_mid_run(run_root, ray_cluster, tmp_path, monkeypatch):
    from handoff.records import read_shard
    from handoff.report.wandb_log import STEP_METRIC, run_id
    from handoff.rundir import RunDir, RunPaths
    from handoff.testing.wandb_offline import history, offline_runs

    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-home"))
    shutil.copytree(run_root / "global_step_7" / "actor", run_root / "global_step_8" / "actor",
                    ignore=shutil.ignore_patterns("merged_hf-*"))
    run_dir, killed = tmp_path / "run", []
    args = [f"run_dir={run_dir}", "name=verl-e2e", "model=[checkpoints]", "model.checkpoints.name=rl",
            f"model.checkpoints.glob={run_root}/global_step_*/actor", "model.checkpoints.sampling.max_tokens=40",
            "user=hosted", f"user.model.path={models.model_dir(models.TINY)}", "user.model.max_model_len=8192",
            "user.model.sampling.max_tokens=24", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=2",
            "shard_size=1", "workers.processes=1", "workers.threads=1", "episode.max_steps=4", "engine.cpus=0.5",
            "logger.mode=offline"]
    watcher = kill_mid_run(run_dir, [(1, "user engine")], killed, find=user_engine)
    prepared, summary = run_sweep(compose(args), args, progress=False)
    watcher.join(timeout=5)
    (user,), agents = engine_actors("user"), engine_actors("agent")
    finish(prepared, summary)

    assert killed and killed[0][0] < 4, f"the user engine was not killed mid-run: {killed}"
    assert summary.shards_failed == [] and summary.episode_failures == 0 and summary.episodes_done == 4
    records = [r for p in sorted(RunPaths(run_dir).shards_dir.glob("*.jsonl")) for r in read_shard(p)]
    assert sorted(r.key for r in records) == sorted({r.key for r in records})
    assert sorted({(r.model, r.step) for r in records}) == [("rl-step7", 7), ("rl-step8", 8)]
    assert all(r.usage.agent_turns >= 1 and r.usage.user_completion_tokens > 0 for r in records)
    assert user.num_restarts >= 1, "the user simulator's engine was not restarted"
    assert len(agents) == 1 and agents[0].num_restarts == 0, "the agent slot did not move on in place"
    (logged,) = offline_runs(RunPaths(run_dir).wandb, run_id(RunDir(run_dir), "retail"))
    assert [row[STEP_METRIC] for row in history([logged])] == [7, 8]
