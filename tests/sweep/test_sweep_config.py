"""Sweep config, plan and manifest checks that need no Ray: validation names the bad key and fails
before Ray starts, checkpoint globs, deterministic seeds, the shard plan, partial shards."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import handoff  # noqa: F401
from handoff.records import EpisodeRecord
from handoff.rundir import Manifest
from handoff.sweep.config import (
    ConfigError,
    checkpoints,
    config_hash,
    parse_step,
    to_container,
    validate,
)
from handoff.sweep.manifest import ResumeRefused, check_resumable
from handoff.sweep.plan import Episode, Shard, episode_seed, plan_shards, select_tasks
from handoff.sweep.run import compose, merge_overrides, run_sweep
from handoff.sweep.rundir import SweepRun
from handoff.tasks import KINDS, load_tasks, parse_derived_id, split_of
from handoff.tasks.labels import label_for


def _error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        validate(compose(overrides))
    return str(info.value)


def test_default_config_is_valid(tmp_path):
    cfg = validate(compose([f"run_dir={tmp_path}/run"]))
    assert cfg.domains() == ["airline", "retail"]
    assert cfg.engine.kind == "vllm" and cfg.engine.device == "cpu"
    assert cfg.user.kind == "engine" and cfg.user.model.path == cfg.model["smollm2"].path
    assert cfg.logger.mode is None and cfg.reward.task == 1.0


@pytest.mark.parametrize("overrides, key", [
    (["engine.replicas=-1"], "engine.replicas"),
    (["+model.smollm2.tempreature=0.5"], "model.smollm2.tempreature"),
    (["model.smollm2.path=/nonexistent/ckpt"], "model.smollm2.path"),
    (["model.smollm2.sampling.top_p=2"], "model.smollm2.sampling.top_p"),
    (["++model.smollm2.sampling.repetition_penalty=0"], "model.smollm2.sampling.repetition_penalty"),
    (["++user.model.sampling.repetition_penalty=3"], "user.model.sampling.repetition_penalty"),
    (["+model.smollm2.glob=/x/*"], "model.smollm2"),
    (["engine.device=tpu"], "engine.device"),
    (["trials=0"], "trials"),
    (["user=litellm", "user.llm=null"], "user"),
    (["model=[checkpoints]", "model.checkpoints.glob=/nonexistent/step_*"], "model.checkpoints.glob"),
])
def test_bad_config_names_the_key(overrides, key):
    message = _error(overrides)
    assert f"\n  {key}:" in message, message


def test_unknown_model_key_fails_in_hydra():
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="model/no_such_model"):
        compose(["model=[no_such_model]"])


def test_bad_config_fails_before_ray_starts(tmp_path):
    """Through the real entry point: exit 2, the key named, no Ray session and no run directory."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "handoff.sweep", "engine.replicas=-1", f"run_dir={run_dir}",
         f"cluster.temp_dir={tmp_path}/ray"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "engine.replicas: Input should be greater than or equal to 1" in proc.stderr
    assert not (tmp_path / "ray").exists() and not run_dir.exists()


def test_bad_config_in_process_leaves_ray_down(tmp_path):
    import ray

    with pytest.raises(ConfigError, match="model.smollm2.path"):
        run_sweep(compose([f"run_dir={tmp_path}/r", "model.smollm2.path=/nope"]), [])
    assert not ray.is_initialized()


def test_checkpoint_glob_parses_steps(tmp_path):
    for step in (120, 20, 3):
        (tmp_path / "train" / f"global_step_{step}" / "actor" / "huggingface").mkdir(parents=True)
    (tmp_path / "train" / "global_step_7").mkdir()  # no huggingface/ inside: not matched
    cfg = validate(compose([
        f"run_dir={tmp_path}/run", "engine=scripted", "model=[checkpoints]", "model.checkpoints.name=rl",
        f"model.checkpoints.glob={tmp_path}/train/global_step_*/actor/huggingface",
        "model.checkpoints.step_regex='global_step_(\\d+)'"]), check_paths=False)  # empty dirs: steps only
    ckpts = checkpoints(cfg)
    assert [(c.name, c.step) for c in ckpts] == [("rl-step3", 3), ("rl-step20", 20), ("rl-step120", 120)]
    assert ckpts[0].path.endswith("global_step_3/actor/huggingface")


def test_checkpoint_list_and_step_parsing(tmp_path):
    paths = [tmp_path / "ckpt-500", tmp_path / "ckpt-1000"]
    for p in paths:
        p.mkdir()
    cfg = validate(compose([f"run_dir={tmp_path}/run", "engine=scripted", "model=[checkpoints]",
                            f"+model.checkpoints.paths=[{paths[0]},{paths[1]}]"]), check_paths=False)
    assert [c.step for c in checkpoints(cfg)] == [500, 1000]
    assert parse_step("/runs/a/global_step_40/actor/huggingface", None) == 40
    assert parse_step("/runs/final", None) is None


def test_episode_seeds_are_stable_across_processes():
    expected = episode_seed(0, "airline", "13", 1)
    code = "from handoff.sweep.plan import episode_seed; print(episode_seed(0, 'airline', '13', 1))"
    for hashseed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**__import__("os").environ, "PYTHONHASHSEED": hashseed})
        assert int(out.stdout) == expected
    assert expected != episode_seed(0, "airline", "13", 0) != episode_seed(1, "airline", "13", 0)
    assert 0 <= expected < 2**31


def test_plan_covers_checkpoint_domain_slice_trial(tmp_path):
    cfg = validate(compose([f"run_dir={tmp_path}/run", "trials=2", "shard_size=2"]))
    ckpts = checkpoints(cfg)
    shards = plan_shards(cfg, ckpts, {"airline": ["0", "1", "2"], "retail": ["5"]})
    assert len(shards) == 2 * (2 + 1)  # trials x (airline chunks + retail chunks)
    keys = [e.key for s in shards for e in s.episodes]
    assert len(keys) == len(set(keys)) == 2 * 4
    assert len({s.id for s in shards}) == len(shards)
    assert shards[0].id == "smollm2-135m-instruct__airline__t0__0000"


def _kind(task_id: str) -> str:
    ref = parse_derived_id(task_id)
    return ref.kind if ref else "upstream"


def test_default_slice_holds_every_kind_in_every_domain(tmp_path):
    """The default `make sweep` slice gives every headline metric a value: one test task of each
    kind per domain, positives (should transfer) and negatives alike."""
    cfg = validate(compose([f"run_dir={tmp_path}/run"]))
    for domain in cfg.domains():
        selected = select_tasks(cfg, domain)
        assert sorted(_kind(t.id) for t in selected) == sorted(KINDS), domain
        assert all(split_of(domain, t.id) == "test" for t in selected)
        labels = {label_for(domain, t.id).should_transfer for t in selected}
        assert labels == {True, False}, domain
    shards = plan_shards(cfg, checkpoints(cfg), {d: [t.id for t in select_tasks(cfg, d)] for d in cfg.domains()})
    assert len([e for s in shards for e in s.episodes]) == 2 * len(KINDS)


def test_per_kind_offset_and_kinds(tmp_path):
    cfg = validate(compose([f"run_dir={tmp_path}/run", "tasks.per_kind=2", "tasks.offset=1",
                            "tasks.kinds=[hard_negative,upstream]"]))
    for domain in cfg.domains():
        expected = [t.id for k in ("hard_negative", "upstream") for t in load_tasks(domain, "test", [k])[1:3]]
        assert [t.id for t in select_tasks(cfg, domain)] == expected


def test_limit_takes_the_first_tasks_in_all(tmp_path):
    cfg = validate(compose([f"run_dir={tmp_path}/run", "tasks.per_kind=null", "tasks.limit=3"]))
    assert [t.id for t in select_tasks(cfg, "retail")] == [t.id for t in load_tasks("retail", "test")[:3]]


@pytest.mark.parametrize("overrides", [["tasks.limit=3"], ["tasks.per_kind=0"]])
def test_bad_task_counts_name_the_key(overrides):
    assert "\n  tasks" in _error(overrides)


@pytest.mark.parametrize("overrides, message", [
    (["tasks.ids=[3,5,3]"], "tasks.ids: Value error, repeated task id(s) '3': give each once"),
    (["tasks.ids=[0,'0']"], "tasks.ids: Value error, repeated task id(s) '0'"),  # a number is its string
    (["tasks.ids={airline:[1,2],retail:[4,1,4]}"], "tasks.ids: Value error, repeated retail task id(s) '4'"),
    (["tasks.kinds=[upstream,hard_negative,upstream]"], "tasks.kinds: Value error, repeated task kind(s) 'upstream'"),
    (["+domain.again.name=airline"], "domain: Value error, repeated domain(s) 'airline'"),
])
def test_a_repeated_task_id_kind_or_domain_is_refused(overrides, message):
    """A repeat would plan its episodes twice (and a shard that holds one episode twice never completes)."""
    assert message in _error(overrides)


def test_config_hash_ignores_execution_keys(tmp_path):
    a = to_container(compose([f"run_dir={tmp_path}/a"]))
    b = to_container(compose([f"run_dir={tmp_path}/b", "workers.threads=2", "cluster=existing",
                              "engine.replicas=4", "logger=wandb_online"]))
    c = to_container(compose([f"run_dir={tmp_path}/a", "seed=1"]))
    d = to_container(compose([f"run_dir={tmp_path}/a", "engine.tensor_parallel_size=2"]))
    assert config_hash(a) == config_hash(b) != config_hash(c)
    assert config_hash(d) not in (config_hash(a), config_hash(c))


def test_repetition_penalty_is_in_the_hash_only_when_set(tmp_path):
    """A config that does not set it hashes and plans as before it existed (their resumes go on)."""
    unset = [f"run_dir={tmp_path}/a", "~model.smollm2.sampling.repetition_penalty"]
    data = to_container(compose(unset))
    assert "repetition_penalty" not in data["model"]["smollm2"]["sampling"]
    assert all("repetition_penalty" not in c.model_dump_json() for c in checkpoints(validate(data)))
    one = to_container(compose(unset + ["+model.smollm2.sampling.repetition_penalty=1.0"]))
    other = to_container(compose(unset + ["+model.smollm2.sampling.repetition_penalty=1.1"]))
    assert len({config_hash(data), config_hash(one), config_hash(other)}) == 3
    assert checkpoints(validate(other))[0].sampling.repetition_penalty == 1.1


def test_resume_check_says_what_changed():
    base = {"config": {"trials": 1, "run_dir": "a"}, "config_hash": "x", "tau2_version": "26.3",
            "hashes": {"labels_sha256": "L1"}, "tasks_hash": "T", "shards": []}
    check_resumable(Manifest(**base), Manifest(**base))
    changed = {**base, "config": {"trials": 2, "run_dir": "b"}, "config_hash": "y",
               "hashes": {"labels_sha256": "L2"}}
    with pytest.raises(ResumeRefused) as info:
        check_resumable(Manifest(**base), Manifest(**changed))
    message = str(info.value)
    assert "trials: 1 -> 2" in message and "labels_sha256 changed: L1 -> L2" in message
    assert "run_dir" not in message


def test_merge_overrides_keeps_the_last_value():
    assert merge_overrides(["trials=1", "model=[a]"], ["trials=3"]) == ["model=[a]", "trials=3"]


def _record(task_id: str) -> EpisodeRecord:
    return EpisodeRecord(model="m", domain="airline", task_id=task_id, seed=1, simulation={"task_id": task_id})


def test_partial_shard_survives_a_torn_line(tmp_path):
    run = SweepRun(tmp_path)
    shard = Shard(id="s", model="m", domain="airline", trial=0, episodes=[
        Episode(model="m", step=0, domain="airline", task_id=t, trial=0, seed=1) for t in ("0", "1", "2")])
    run.append_partial("s", _record("0"))
    with open(run.partial_dir / "s.jsonl", "ab") as f:
        f.write(_record("1").model_dump_json().encode()[:40])  # a writer killed mid-line
    run.append_partial("s", _record("2"))
    run.append_partial("s", _record("2"))  # a duplicate is kept once
    assert sorted(k[2] for k in run.read_partial(shard)) == ["0", "2"]


def test_corrupt_shard_is_moved_aside_not_deleted(tmp_path):
    run = SweepRun(tmp_path)
    shard = Shard(id="s", model="m", domain="airline", trial=0,
                  episodes=[Episode(model="m", step=0, domain="airline", task_id="0", trial=0, seed=1)])
    run.write_done(shard, {("m", "airline", "0", 0): _record("0")})
    assert run.is_done(shard)
    path = run.shard_path("s")
    path.write_bytes(path.read_bytes()[:-10])
    assert not run.is_done(shard)
    assert not path.exists() and len(list(run.shards_dir.glob("s.jsonl.corrupt-*"))) == 1
    failed = json.loads((run.failed_dir / "s.json").read_text())
    assert "checksum" in failed["error"] and failed["kind"] == "corrupt"


def test_sessions_stick_to_one_replica():
    from handoff.sweep.engines import route

    sessions = [f"user/m/retail/{i}/0" for i in range(200)]
    first = [route(s, 4) for s in sessions]
    assert first == [route(s, 4) for s in sessions]  # every turn of a conversation: same replica
    assert set(first) == {0, 1, 2, 3}  # and the conversations spread over all replicas
    assert route("user/m/retail/0/0", 1) == 0


def test_each_attempt_of_an_episode_is_a_user_session_of_its_own(tmp_path, monkeypatch):
    """A retried episode's user simulator starts a session of its own, as its agent does, so that the
    replica counts its turns from the first (EngineHost._count); the id keeps its prefix, which
    engine.script.fail_sessions and the fault tests match."""
    from handoff.sweep.worker import EpisodeWorker, SweepContext

    class Stop(Exception):
        pass

    def user(spec, task, ref, session_id, model, domain):
        sessions.append(session_id)
        raise Stop

    worker, sessions = EpisodeWorker(), []
    sweep = SweepContext(validate(compose([f"run_dir={tmp_path}/run", "engine=scripted"])).model_dump(), None)
    monkeypatch.setattr(worker, "_user", user)
    task_id = load_tasks("retail")[0].id
    ep = Episode(model="m", step=0, domain="retail", task_id=task_id, trial=0, seed=1)
    for _ in range(2):  # two attempts
        with pytest.raises(Stop):
            worker.run(ep.model_dump(), None, None, sweep)
    assert sessions[0] != sessions[1]
    assert all(s.startswith(f"user/m/retail/{task_id}/0/") for s in sessions), sessions


def test_engines_must_fit_the_cluster(tmp_path):
    from handoff.sweep.driver import check_resources

    gpu = validate(compose([f"run_dir={tmp_path}/r", "engine=gpu", "engine.replicas=4", "engine.tensor_parallel_size=2"]))
    check_resources(gpu, engine_sets=1, cpus=16, gpus=8)
    with pytest.raises(ConfigError, match=r"engine.replicas: 2 engine set\(s\) x 4 replicas x 2 GPUs"):
        check_resources(gpu, engine_sets=2, cpus=16, gpus=8)  # a user simulator on its own checkpoint
    cpu = validate(compose([f"run_dir={tmp_path}/r", "engine.cpus=2"]))
    with pytest.raises(ConfigError, match="engine.cpus"):
        check_resources(cpu, engine_sets=1, cpus=2, gpus=0)  # no CPU left for an episode worker
    with pytest.raises(ConfigError, match=r"engine.tensor_parallel_size: a replica needs 2 GPUs on one node.*"
                                          r"no node of the cluster has more than 1"):
        check_resources(gpu, engine_sets=1, cpus=16, gpus=8, node_gpus=1)  # 8 nodes of 1 GPU


def test_tensor_parallel_replicas_use_vllms_multiprocessing_executor(tmp_path):
    """TP>1, on GPUs as on CPUs: vLLM's multiprocessing executor (its workers are child processes of
    the replica's actor, which holds all their resources); TP=1: vLLM's default (one process)."""
    from handoff.engine.factory import engine_settings, executor_backend

    def backend(*overrides):
        cfg = validate(compose([f"run_dir={tmp_path}/r", *overrides]))
        assert engine_settings(cfg.user.model, cfg.engine).distributed_executor_backend == executor_backend(cfg.engine)
        return executor_backend(cfg.engine)

    assert backend("engine=gpu", "engine.tensor_parallel_size=2") == "mp"
    assert backend("engine=cpu", "engine.tensor_parallel_size=2") == "mp"
    assert backend("engine=gpu") is None
    assert backend() is None


def test_an_in_place_reload_targets_the_settings_a_new_engine_of_the_checkpoint_gets(tmp_path):
    """AsyncEngine.reload(checkpoint) of a vLLM engine: its settings for the new checkpoint equal what
    the factory builds a new engine of that checkpoint with, so `reloadable` compares like with like."""
    from handoff.engine.factory import engine_settings
    from handoff.engine.vllm_engine import checkpoint_settings

    cfg = validate(compose([f"run_dir={tmp_path}/r", "engine=cpu", "engine.tensor_parallel_size=2"]))
    held = engine_settings(cfg.user.model, cfg.engine)
    for update in ({"path": str(tmp_path)}, {"tokenizer": str(tmp_path)}, {"max_model_len": 2048}):
        other = cfg.user.model.model_copy(update=update)
        assert checkpoint_settings(held, other) == engine_settings(other, cfg.engine) != held


def test_a_tensor_parallel_replica_takes_engine_cpus_per_worker_on_one_node(tmp_path):
    from handoff.sweep.driver import check_resources

    cpu = validate(compose([f"run_dir={tmp_path}/r", "engine.tensor_parallel_size=2", "engine.cpus=1"]))
    assert cpu.engine.replica_cpus == 2
    check_resources(cpu, engine_sets=1, cpus=3, gpus=0, node_gpus=0, node_cpus=2)
    with pytest.raises(ConfigError, match=r"engine.cpus: a replica needs 2 CPUs on one node \(engine.cpus x "
                                          r"tensor_parallel_size\), and no node of the cluster has more than 1"):
        check_resources(cpu, engine_sets=1, cpus=3, gpus=0, node_gpus=0, node_cpus=1)  # 3 nodes of 1 CPU
    with pytest.raises(ConfigError, match=r"1 replicas x 2 CPUs \(engine.cpus x tensor_parallel_size\)"):
        check_resources(cpu, engine_sets=1, cpus=2, gpus=0)  # no CPU left for a worker


def test_agent_shares_the_user_simulators_engine_only_with_the_same_engine_settings(tmp_path):
    """One engine serves only the settings it was built with: the agent shares the user simulator's
    engine when the path, tokenizer and max_model_len match, and gets an engine set of its own otherwise."""
    import shutil

    from handoff.engine import models
    from handoff.sweep.driver import Driver

    tiny = models.model_dir(models.TINY)
    tokenizer = tmp_path / "tokenizer"
    shutil.copytree(tiny, tokenizer)

    def engine_sets(*overrides: str) -> int:
        cfg = validate(compose([f"run_dir={tmp_path}/run", "model=[tiny_hermes]", "user=hosted",
                                f"user.model.path={tiny}", "user.model.max_model_len=4096", *overrides]))
        return Driver(cfg, SweepRun(tmp_path / "run"), checkpoints(cfg), [], progress=False).pool.engine_sets()

    assert engine_sets() == 1
    assert engine_sets("user.model.max_model_len=2048") == 2
    assert engine_sets(f"user.model.tokenizer={tokenizer}") == 2
    assert engine_sets("user.model.chat_template=hermes", "user.model.sampling.max_tokens=64") == 1  # not the engine's
