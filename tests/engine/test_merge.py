"""verl actor merges that go wrong, and a verl actor as the user simulator's model, with a stand-in
for verl's model merger: a real subprocess (`python -m verl.model_merger`, found first on PYTHONPATH
through HANDOFF_VERL_ENV) that logs its --target_dir, writes part of its output, then hangs or
copies tiny-hermes there. (verl's own merger on a real FSDP checkpoint: test_verl_checkpoint.py.)"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from handoff.engine import models
from handoff.engine.checkpoint import VERL_ENV_VAR, CheckpointError, merge_verl_actor
from handoff.errors import ConfigError
from handoff.sweep import preflight
from handoff.sweep.config import checkpoints, validate
from handoff.sweep.driver import Driver
from handoff.sweep.run import compose, serve_merged
from handoff.sweep.rundir import SweepRun

TINY = models.model_dir(models.TINY)
STAND_IN = f"""
import shutil, sys, time
from pathlib import Path

here = Path(__file__).resolve().parents[2]
target = Path(sys.argv[sys.argv.index("--target_dir") + 1])
target.mkdir(parents=True)
(target / "model.safetensors").write_bytes(b"half")
with open(here / "targets.log", "a") as log:
    log.write(f"{{target}}\\n")
mode = (here / "mode").read_text()
if mode == "hang":
    time.sleep(600)
while mode == "pair" and len((here / "targets.log").read_text().splitlines()) < 2:
    time.sleep(0.05)  # both merges are running
shutil.copytree({str(TINY)!r}, target, dirs_exist_ok=True)
"""


@pytest.fixture(scope="module")
def merger(tmp_path_factory) -> Path:
    """The stand-in merger's environment directory (HANDOFF_VERL_ENV); `mode` says what it does."""
    env = tmp_path_factory.mktemp("verl-env")
    (env / "transformers").mkdir()  # what verl_env() looks for
    (env / "verl" / "model_merger").mkdir(parents=True)
    (env / "verl" / "__init__.py").write_text("")
    (env / "verl" / "model_merger" / "__init__.py").write_text("")
    (env / "verl" / "model_merger" / "__main__.py").write_text(STAND_IN)
    return env


def use(merger: Path, mode: str, monkeypatch) -> None:
    (merger / "mode").write_text(mode)
    (merger / "targets.log").write_text("")
    monkeypatch.setenv(VERL_ENV_VAR, str(merger))


def actor_dir(root: Path) -> Path:
    """A verl actor directory as the checks see it (one shard, fsdp_config.json, huggingface/)."""
    actor = root / "global_step_3" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"shard")
    (actor / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 1}')
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY / name, actor / "huggingface" / name)
    return actor


def test_merge_past_its_timeout_is_a_checkpoint_error_and_leaves_nothing(merger, tmp_path, monkeypatch):
    use(merger, "hang", monkeypatch)
    actor = actor_dir(tmp_path)
    before = sorted(p.name for p in actor.iterdir())
    started = time.monotonic()
    with pytest.raises(CheckpointError, match=r"verl's model merger ran past 2s \(engine.load_timeout_s\)"):
        preflight.node_check([(str(actor), None)], None, None, 2)  # the node's task: no traceback
    assert time.monotonic() - started < 60
    assert sorted(p.name for p in actor.iterdir()) == before, "a half-written merge was left behind"


def test_concurrent_merges_in_one_pid_write_their_own_temp_dirs(merger, tmp_path, monkeypatch):
    """Two merges of the same actor by one pid (as two nodes with the same pid on shared storage) each
    write their own directory; one of them becomes the merged checkpoint, complete."""
    use(merger, "pair", monkeypatch)
    actor = actor_dir(tmp_path)
    results, errors = [], []

    def merge():
        try:
            results.append(merge_verl_actor(actor, timeout_s=120))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=merge) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    targets = (merger / "targets.log").read_text().split()
    assert len(targets) == 2 and len(set(targets)) == 2, targets
    assert not errors and len(results) == 2 and results[0] == results[1], errors
    assert (results[0] / "model.safetensors").read_bytes() == (TINY / "model.safetensors").read_bytes()
    assert [p.name for p in actor.iterdir() if ".tmp-" in p.name] == []


def test_driver_waits_for_merges_it_cannot_see(tmp_path):
    """On an existing cluster a path the driver cannot see may be a verl actor the node merges:
    the driver's wait counts it (engine.load_timeout_s each), as it counts the actors it sees."""
    actor = actor_dir(tmp_path)
    assert preflight.check_wait_s([(str(TINY), None)], 10) == 10
    assert preflight.check_wait_s([(str(TINY), None), (str(actor), None)], 10) == 20
    assert preflight.check_wait_s([("/nowhere/global_step_1/actor", None), (str(actor), None)], 10) == 30


@pytest.fixture(scope="module")
def ray_with_merger(merger):
    """A local Ray whose workers run the stand-in merger."""
    import tempfile

    import ray

    temp = tempfile.mkdtemp(prefix="rm-", dir="/tmp")
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 << 20, _temp_dir=temp,
             log_to_driver=False, namespace="handoff", runtime_env={"env_vars": {VERL_ENV_VAR: str(merger)}})
    yield ray
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def hosted_user_sweep(tmp_path: Path, user_path: Path, *extra: str):
    return validate(compose([f"run_dir={tmp_path}/run", "model=[tiny_hermes]", "user=hosted",
                             f"user.model.path={user_path}", "domain=[retail]", *extra]))


@pytest.mark.ray
def test_user_simulators_verl_actor_is_merged_before_its_engine_starts(ray_with_merger, merger, tmp_path,
                                                                      monkeypatch):
    use(merger, "copy", monkeypatch)
    actor = actor_dir(tmp_path)
    sweep = hosted_user_sweep(tmp_path, actor)
    driver = Driver(sweep, SweepRun(tmp_path / "run"), checkpoints(sweep), [], progress=False)
    serve_merged(driver, sweep, local=True)
    user = Path(driver.pool.user.path)
    assert user.parent == actor and user.name.startswith("merged_hf-"), user
    assert (user / "model.safetensors").read_bytes() == (TINY / "model.safetensors").read_bytes()
    assert [c.path for c in driver.pool.ckpts] == [str(TINY)]  # the agent's HF checkpoint is served as it is


@pytest.mark.ray
def test_merge_past_engine_load_timeout_on_the_cluster_is_refused_naming_it(ray_with_merger, merger, tmp_path,
                                                                            monkeypatch):
    use(merger, "hang", monkeypatch)
    actor = actor_dir(tmp_path)
    sweep = hosted_user_sweep(tmp_path, actor, "engine.load_timeout_s=2")
    driver = Driver(sweep, SweepRun(tmp_path / "run"), checkpoints(sweep), [], progress=False)
    with pytest.raises(ConfigError, match=r"ran past 2s \(engine.load_timeout_s\)"):
        serve_merged(driver, sweep, local=True)
    assert [p.name for p in actor.iterdir() if "merged_hf" in p.name] == []
