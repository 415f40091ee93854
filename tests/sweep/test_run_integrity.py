"""What a run directory may hold and who may write it (issue 21: findings 5 and 14-18): files keep
the umask, shard ids from manifest.json never become paths outside the run, secrets are never
recorded, one reducer at a time (the sweep's lock held until it has reported), a no-op resume still
reduces, retries W&B and rescoring, a checkpoint re-saved since the run started is refused, and an
embedded Ray cluster leaves no temp directory behind (runs: tests.support.runs, no Ray)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from handoff.records import write_atomic
from handoff.rundir import RunDirError, RunPaths
from handoff.sweep.manifest import ResumeRefused
from handoff.sweep.run import ConfigError, compose, prepare
from tests.support.runs import TINY, finished_run


def resume(run_dir: Path, *extra: str) -> int:
    """`handoff sweep resume=<run_dir> ...` in this process (its exit status)."""
    from handoff.sweep.__main__ import sweep

    return sweep(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}", *extra])


def held(lock: Path) -> bool:
    """Whether another open file description holds an flock on `lock`."""
    import fcntl

    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


# -- 18: file modes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_written_files_get_the_umask_not_0600(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "a" / "metrics.json", "{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a" / "metrics.json").stat().st_mode & 0o777 == mode


# -- 17: shard ids are file names ------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["../../outside", "/etc/passwd", "a/b", "..", ".hidden", ""])
def test_a_tampered_shard_id_is_refused_before_any_path_is_made(tmp_path, bad):
    run_dir = tmp_path / "run"
    overrides = [*TINY, f"run_dir={run_dir}"]
    prepare(compose(overrides), overrides).run.unlock()
    manifest = json.loads(RunPaths(run_dir).manifest_path.read_text())
    manifest["shards"][0]["id"] = bad
    RunPaths(run_dir).manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(RunDirError, match="is not a plain file name"):
        prepare(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}"])
    with pytest.raises(RunDirError, match="is not a plain file name"):
        RunPaths(run_dir).partial_path(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_tampered_shard_id_exits_2_from_the_command_line(tmp_path):
    run_dir = tmp_path / "run"
    overrides = [*TINY, f"run_dir={run_dir}"]
    prepare(compose(overrides), overrides).run.unlock()
    manifest = json.loads(RunPaths(run_dir).manifest_path.read_text())
    manifest["shards"][0]["id"] = "../../outside"
    RunPaths(run_dir).manifest_path.write_text(json.dumps(manifest))
    proc = subprocess.run([sys.executable, "-m", "handoff.sweep", f"resume={run_dir}"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'../../outside' is not a plain file name" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# -- 14: one reducer at a time; failed records ----------------------------------------------------------
def test_a_failed_record_beside_a_finished_shard_is_not_counted(tmp_path):
    run_dir = finished_run(tmp_path / "run")
    run = RunPaths(run_dir)
    done, failing = [p.stem for p in run.shards()]
    run.shard_path(failing).unlink()
    for shard_id in (done, failing):  # `done`: a crash after its shard was written, before the record went
        write_atomic(run.failed_path(shard_id), json.dumps({"shard_id": shard_id, "attempts": 3, "error": "x"}))
    assert run.failed_ids() == [failing]
    from handoff.report import reduce_run

    assert reduce_run(run_dir).failed_shards == [failing]


def test_the_sweep_holds_its_lock_and_the_reducer_lock_while_it_reduces_and_logs(tmp_path, monkeypatch):
    import handoff.report

    run_dir = finished_run(tmp_path / "run")
    run, seen = RunPaths(run_dir), []
    real = handoff.report.log_reduction

    def log_reduction(*args, **kwargs):
        seen.append((held(run.lock_path), held(run.reduce_lock_path)))
        return real(*args, **kwargs)

    monkeypatch.setattr(handoff.report, "log_reduction", log_reduction)
    assert resume(run_dir) == 0
    assert seen == [(True, True)]
    assert not held(run.lock_path) and not held(run.reduce_lock_path)  # released at the end


def test_handoff_report_holds_the_reducer_lock_while_it_writes(tmp_path, monkeypatch):
    import handoff.report
    from handoff.cli import main

    run_dir = finished_run(tmp_path / "run")
    real, seen = handoff.report.write_report, []

    def write_report(*args):
        seen.append(held(RunPaths(run_dir).reduce_lock_path))
        return real(*args)

    monkeypatch.setattr(handoff.report, "write_report", write_report)
    assert main(["report", str(run_dir)]) == 0
    assert seen == [True] and RunPaths(run_dir).report_md.is_file()


def test_handoff_compare_html_holds_the_reducer_lock_while_it_scores(tmp_path, monkeypatch):
    import handoff.report.flips
    from handoff.cli import main

    runs = [finished_run(tmp_path / side) for side in ("a", "b")]
    real, seen = handoff.report.flips.score_run, []

    def score_run(run, scorer):
        seen.append(held(RunPaths(run.root).reduce_lock_path))
        return real(run, scorer)

    monkeypatch.setattr(handoff.report.flips, "score_run", score_run)
    page = tmp_path / "flips.html"
    assert main(["compare", *map(str, runs), "--html", str(page)]) == 0
    assert seen == [True, True] and page.is_file()


# -- 3: a re-saved checkpoint -------------------------------------------------------------------------
def test_a_checkpoint_re_saved_since_the_run_started_is_refused(tmp_path):
    ckpt = tmp_path / "global_step_10"
    ckpt.mkdir()
    from bench.scripted import model_path

    (ckpt / "model.safetensors").write_bytes(b"weights v1")
    run_dir = finished_run(tmp_path / "run", f"model.smollm2.path={ckpt}", f"model.smollm2.tokenizer={model_path()}")
    assert resume(run_dir) == 0  # unchanged: resumes
    (ckpt / "model.safetensors").write_bytes(b"weights v2, re-saved")
    os.utime(ckpt / "model.safetensors", ns=(1, 1))
    with pytest.raises(ResumeRefused, match="checkpoint smollm2-135m-instruct changed on disk since the run started"):
        prepare(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}"])
    assert resume(run_dir) == 2


def test_a_user_simulator_checkpoint_re_saved_since_the_run_started_is_refused(tmp_path):
    from bench.scripted import model_path

    ckpt = tmp_path / "simulator"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"weights v1")
    run_dir = finished_run(tmp_path / "run", "user=hosted", f"user.model.path={ckpt}", f"user.model.tokenizer={model_path()}")
    assert resume(run_dir) == 0
    (ckpt / "model.safetensors").write_bytes(b"weights v2, re-saved")
    with pytest.raises(ResumeRefused, match=r"checkpoint user-sim \(the user simulator's\) changed on disk"):
        prepare(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}"])


# -- 5: a no-op resume -------------------------------------------------------------------------------
def test_a_resume_that_runs_nothing_retries_wandb_and_rescoring(tmp_path, monkeypatch):
    import handoff.scoring
    from handoff.report.wandb_log import run_id
    from handoff.rundir import RunDir
    from handoff.testing.wandb_offline import offline_runs

    run_dir = finished_run(tmp_path / "run")
    assert resume(run_dir) == 0  # reduced and reported, W&B disabled
    run = RunPaths(run_dir)
    assert resume(run_dir, "logger.mode=offline") == 0  # W&B now on: its rows are logged
    (logged,) = offline_runs(run.wandb, run_id(RunDir(run_dir), "airline"))
    assert len(logged["history"]) == 1
    report = run.report_md.stat().st_mtime_ns
    assert resume(run_dir, "logger.mode=offline") == 0
    assert run.report_md.stat().st_mtime_ns == report  # same metrics, shards and settings: not redone
    assert len(offline_runs(run.wandb, run_id(RunDir(run_dir), "airline"))) == 1  # nothing new to log
    monkeypatch.setattr(handoff.scoring, "rules_sha256", lambda: "an edited rule")
    assert resume(run_dir, "logger.mode=offline") == 0
    fingerprint = handoff.scoring.Scorer.for_config(RunDir(run_dir).config).fingerprint
    for cache in run.scores_dir.glob("*.jsonl"):
        assert json.loads(cache.read_text().splitlines()[0])["scorer"] == fingerprint


# -- 16: secrets ---------------------------------------------------------------------------------------
def test_an_api_key_from_the_environment_is_recorded_nowhere(tmp_path, monkeypatch):
    from handoff.report import finish_run
    from handoff.rundir import RunDir
    from handoff.testing.wandb_offline import read_offline_run

    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("HANDOFF_TEST_API_KEY", secret)
    run_dir = finished_run(tmp_path / "run", "user=litellm", "+user.llm_args.api_key=${oc.env:HANDOFF_TEST_API_KEY}",
                           "logger.mode=offline")
    overrides = [*TINY, f"run_dir={tmp_path}/other", "user=litellm", "+user.llm_args.api_key=${oc.env:HANDOFF_TEST_API_KEY}"]
    assert prepare(compose(overrides), overrides).sweep.user.llm_args["api_key"] == secret  # what the sweep uses
    finish_run(run_dir)
    files = [p for p in Path(run_dir).rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files)
    assert [p for p in files if secret.encode() in p.read_bytes()] == []
    assert RunDir(run_dir).config["user"]["llm_args"]["api_key"] == "${oc.env:HANDOFF_TEST_API_KEY}"
    (wandb_file,) = Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")
    config = {i.key: json.loads(i.value_json) for i in read_offline_run(wandb_file.parent)["run"].config.update}
    assert config["user"]["llm_args"]["api_key"] == "${oc.env:HANDOFF_TEST_API_KEY}"


def test_a_literal_secret_override_is_refused_and_one_in_a_config_file_redacted(tmp_path, monkeypatch):
    from handoff.sweep.config import REDACTED, recorded_config

    monkeypatch.setenv("HANDOFF_TEST_API_KEY", "sk-from-the-environment")
    for literal in ["+user.llm_args.api_key=sk-literal", "+user.llm_args={api_key:sk-literal,max_tokens:5}"]:
        overrides = [*TINY, f"run_dir={tmp_path}/run", "user=litellm", literal]  # also inside a dict value
        with pytest.raises(ConfigError, match="user.llm_args.api_key: a secret given literally"):
            prepare(compose(overrides), overrides)
        assert not (tmp_path / "run").exists()
    for i, fine in enumerate(["+user.llm_args.api_key=null", "+user.llm_args.max_tokens=5",  # no secret; no secret's key
                              "+user.llm_args={api_key:'${oc.env:HANDOFF_TEST_API_KEY}'}"]):  # from the environment
        overrides = [*TINY, f"run_dir={tmp_path}/fine{i}", "user=litellm", fine]
        prepare(compose(overrides), overrides).run.unlock()
    cfg = OmegaConf.create({"user": {"llm_args": {"api_key": "sk-literal", "max_tokens": 5, "base_url": "http://x"},
                                     "token": None, "access_token": "t0k"},
                            "path": "${oc.env:HOME}/x", "tokenizer": "tok"})
    assert recorded_config(cfg) == {"user": {"llm_args": {"api_key": REDACTED, "max_tokens": 5, "base_url": "http://x"},
                                             "token": None, "access_token": REDACTED},
                                    "path": f"{os.environ['HOME']}/x", "tokenizer": "tok"}


def test_header_keys_and_secret_values_are_redacted_under_any_key(monkeypatch):
    from handoff.sweep.config import REDACTED, literal_secrets, recorded_config
    from handoff.sweep.run import parse_overrides

    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("HANDOFF_TEST_API_KEY", secret)
    monkeypatch.setenv("HANDOFF_TEST_TOKEN", "short")  # too short to look for
    monkeypatch.setenv("HANDOFF_TEST_MODEL", "/models/checkpoint")  # not a secret's name
    monkeypatch.setenv("HANDOFF_TEST_AUTH_MODE", "disabled")  # a setting (as RAY_AUTH_MODE)
    monkeypatch.setenv("HANDOFF_TEST_KEY_FILE", "/models/checkpoint")  # a key file's path: a secret's place, not its value
    monkeypatch.setenv("HANDOFF_TEST_KEYRING_PROVIDER", "disabled")  # a word: a setting (pip's), not a secret
    monkeypatch.setenv("HANDOFF_TEST_SECRET", "/only-a-secret-of-slashes")  # a secret that starts with '/'
    headers = {"X-Api-Key": "k-literal-header", "authorization": "Bearer x", "api-key": "k", "X_Auth-Token": "t",
               "Content-Type": "application/json"}
    cfg = OmegaConf.create({
        "agent": {"llm_args": {"api_key": "${oc.env:HANDOFF_TEST_API_KEY}", "base_url": f"http://x/?key={secret}",
                               "extra_headers": headers}},
        "user": {"llm_args": "${agent.llm_args}", "note": "${agent.llm_args.api_key}", "copy": "k-literal-header",
                 "proxy": "http://p/only-a-secret-of-slashes"},
        "model": {"path": "/models/checkpoint", "name": "short", "max_tokens": 64, "key_column": "task_id",
                  "mode": "disabled"}})
    hidden = {**{k: REDACTED for k in headers}, "Content-Type": "application/json"}
    recorded = recorded_config(cfg)
    assert recorded["agent"] == {"llm_args": {"api_key": "${oc.env:HANDOFF_TEST_API_KEY}", "base_url": REDACTED,
                                              "extra_headers": hidden}}
    assert recorded["user"] == {"llm_args": {"api_key": REDACTED, "base_url": REDACTED, "extra_headers": hidden},
                                "note": REDACTED, "copy": REDACTED, "proxy": REDACTED}  # copies by interpolation and by hand
    assert recorded["model"] == cfg.model and secret not in json.dumps(recorded)
    refused = literal_secrets(parse_overrides([f"+user.llm_args.base_url=http://x/{secret}", "+user.h.X-Auth-Token=t",
                                               "+user.llm_args.max_tokens=5", "+model.name=short",
                                               "+logger.mode=disabled", "+logger.tags=[disabled]"]))
    assert [r.split(":")[0] for r in refused] == ["user.llm_args.base_url", "user.h.X-Auth-Token"]


# -- 15: leaks -----------------------------------------------------------------------------------------
@pytest.mark.ray
def test_an_embedded_cluster_removes_its_ray_temp_dir_and_prestarts_no_worker(tmp_path):
    """Also: its raylet runs with RAY_prestart_worker_first_driver=0 (no idle workers for the first
    driver: they would only spend CPU), though this process's environment does not set it."""
    script = textwrap.dedent("""
        import psutil, ray
        from handoff.sweep.config import ClusterConfig
        from handoff.sweep.session import ray_cluster
        with ray_cluster(ClusterConfig(num_cpus=1, num_gpus=0)):
            node = ray._private.worker._global_node
            [raylet] = node.all_processes["raylet"]
            print(psutil.Process(raylet.process.pid).environ().get("RAY_prestart_worker_first_driver"))
            print(node.get_temp_dir_path(), flush=True)
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_prestart_worker_first_driver"}  # tests/conftest.py's
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    prestart, temp_dir = proc.stdout.strip().splitlines()[-2:]
    assert prestart == "0"
    temp_dir = Path(temp_dir)
    assert temp_dir.name.startswith("rh-") and temp_dir.parent == Path("/tmp")
    assert not temp_dir.exists()


@pytest.mark.ray
def test_one_ray_keeps_an_embedded_cluster_for_sweeps_of_the_same_settings_only():
    """Inside one_ray() (an adaptive sweep's rounds, a multirun's jobs) the second sweep with the same
    cluster settings runs on the first one's Ray, still embedded (its own: local checks apply); one
    with other settings gets a new embedded cluster, the old one shut down and its temp dir removed;
    leaving shuts down the last. Outside, a sweep's embedded cluster ends with it, and a Ray that is
    up without one_ray() keeping it is the caller's."""
    import ray

    from handoff.sweep.config import ClusterConfig
    from handoff.sweep.session import embedded, one_ray, ray_cluster
    from handoff.sweep.workers import IDLE

    def temp_dir() -> Path:
        return Path(ray._private.worker._global_node.get_temp_dir_path())

    small, other = ClusterConfig(num_cpus=1, num_gpus=0), ClusterConfig(num_cpus=2, num_gpus=0)
    assert not ray.is_initialized()
    with one_ray():
        with ray_cluster(small, verbose=False):
            first, first_dir = ray.get_runtime_context().get_job_id(), temp_dir()
        assert ray.is_initialized() and embedded(small) and embedded(other)  # other: a new one of its own
        with ray_cluster(small, verbose=False):
            assert ray.get_runtime_context().get_job_id() == first and temp_dir() == first_dir
        with ray_cluster(other, verbose=False):
            assert not first_dir.exists() and ray.cluster_resources()["CPU"] == 2
            other_dir = temp_dir()
    assert not ray.is_initialized() and not other_dir.exists()
    # Workers a sweep kept on an earlier Ray (a test module's, shut down by hand) are not this Ray's
    # to kill: ray.kill would raise, and Ray stayed up for the next module's ray.init to fail.
    IDLE.shape, IDLE.handles = ("worker", ("01000000", "a node of a Ray gone")), [None]  # ray.kill(None) raises
    with ray_cluster(small, verbose=False):
        once_dir = temp_dir()
        assert not embedded(small)  # a sweep started now would run on this Ray, the caller's
    assert not ray.is_initialized() and not once_dir.exists() and IDLE.handles == []


def test_a_worker_keeps_a_bounded_number_of_tokenizers(tmp_path):
    from handoff.sweep.config import checkpoints, validate
    from handoff.sweep.worker import EpisodeWorker, SweepContext

    cfg = validate(compose([*TINY, "engine.replicas=1"]))
    worker = EpisodeWorker()
    worker.enter(SweepContext(cfg.model_dump(mode="json"), None))
    ck = checkpoints(cfg)[0].model_copy(update={"path": "/ckpt/0"})
    first = worker.chat(ck)
    assert worker.chat(ck) is first  # cached while in use
    for i in range(1, 4):  # replicas + 2 = 3 others
        worker.chat(ck.model_copy(update={"path": f"/ckpt/{i}"}))
    assert worker.chat(ck) is not first  # dropped: not one tokenizer per checkpoint for the whole sweep
