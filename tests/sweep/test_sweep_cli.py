"""The sweep's command line as users meet it: Hydra gets argv unchanged (`handoff sweep` and
`python -m handoff.sweep`), --help/--cfg/--info/completion work, every bad value exits 2 naming the
key before Ray starts (no Ray temp dir, no run directory), a multirun runs every job and combines
their exit statuses, and a failed report never exits 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from handoff.errors import ConfigError
from handoff.rundir import RunPaths
from handoff.sweep.__main__ import main as sweep_main
from handoff.sweep.logs import LOGS
from handoff.sweep.run import compose, merge_overrides, prepare

ENTRIES = {"handoff sweep": ["-m", "handoff", "sweep"], "python -m handoff.sweep": ["-m", "handoff.sweep"]}
TINY = ["engine=scripted", "domain=[airline]", "tasks.per_kind=null", "tasks.limit=1", "workers.processes=1", "workers.threads=1",
        "logger.mode=disabled", "cluster.num_cpus=2"]


def hydra(*args: str, entry: str = "handoff sweep", env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *ENTRIES[entry], *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def refused(proc: subprocess.CompletedProcess, message: str) -> None:
    """Exit 2 with `message` on stderr and no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_help_lists_groups_options_and_exit_statuses():
    proc = hydra("--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("handoff sweep [OVERRIDES...]"), out[:200]
    for line in ("engine: cpu, gpu, scripted", "model: api, checkpoints, smollm2, tiny_hermes", "Exit status: 0",
                 "run_dir=runs/s${seed}", "resume=RUN_DIR", "max_attempts: 3"):
        assert line in out, line
    assert "powered by Hydra" not in out


@pytest.mark.parametrize("entry", ENTRIES)
def test_cfg_job_and_info_reach_hydra(entry):
    proc = hydra("--cfg", "job", "trials=3", entry=entry)
    assert proc.returncode == 0 and "\ntrials: 3\n" in proc.stdout, proc.stderr
    info = hydra("--info", "defaults", entry=entry)
    assert info.returncode == 0 and "Defaults List" in info.stdout, info.stderr


def test_shell_completion_through_handoff():
    install = hydra("-sc", "install=bash")
    assert install.returncode == 0 and install.stdout.rstrip().endswith("hydra_bash_completion handoff")
    # what the installed completion runs on TAB: `handoff -sc query=bash` with the typed line
    proc = subprocess.run([sys.executable, "-m", "handoff", "-sc", "query=bash"], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COMP_LINE": "handoff sweep engine="})
    assert proc.returncode == 0 and proc.stdout.split() == ["engine=cpu", "engine=gpu", "engine=scripted"]


@pytest.mark.parametrize("entry, override, message", [
    ("handoff sweep", "trails=3", "trails: no such key (did you mean 'trials'?); add a new key with +trails=..."),
    ("handoff sweep", "workers.thread=2", "workers.thread: no such key under workers (did you mean 'threads'?)"),
    ("python -m handoff.sweep", "model=[no_such_model]",
     "model: no option 'no_such_model'; the options: api, checkpoints, smollm2, tiny_hermes (conf/model/)"),
    ("handoff sweep", "domain=[airline,retial]",
     "domain: no option 'retial' (did you mean 'retail'?); the options: airline, retail, telecom (conf/domain/)"),
    ("handoff sweep", "schedule=rolings", "schedule: Input should be 'sequential' or 'rolling' (did you mean 'rolling'?)"),
    ("handoff sweep", "trials=[", "no viable alternative at input '['"),
    ("python -m handoff.sweep", "tasks.kinds=[bogus]", "tasks.kinds: Value error, unknown task kind(s) bogus"),
    ("handoff sweep", "+model.smollm2.sampling.temprature=0.7",
     "model.smollm2.sampling.temprature: Extra inputs are not permitted"),
    ("handoff sweep", "+user.model.sampling.top_k=5", "user.model.sampling.top_k: Extra inputs are not permitted"),
    ("python -m handoff.sweep", "reward.task=abc", "reward.task: Input should be a valid number"),
    ("handoff sweep", "+reward.violations.no_such_rule=1", "reward.violations.no_such_rule.[key]: Input should be"),
    ("handoff sweep", "reward.max_penalty=-1", "reward.max_penalty: Input should be greater than or equal to 0"),
    ("handoff sweep", "reward.label=user", "reward.label: Input should be 'task' or 'episode'"),
    ("handoff sweep", "model.smollm2.sampling.max_tokens=8192", "model.smollm2: Value error, sampling.max_tokens"),
    ("handoff sweep", "tasks.ids=[no_such_task]", "tasks.ids: no selected domain (airline, retail) has task"),
    ("python -m handoff.sweep", "tasks.ids={airline:[0],retail:[no_such_task]}",
     "tasks.ids.retail: unknown retail task 'no_such_task'"),
    ("handoff sweep", "tasks.ids={airline:[0],mars:[1]}", "tasks.ids: mars is not a selected domain"),
    ("python -m handoff.sweep", "tasks.ids=[0,1,0]", "tasks.ids: Value error, repeated task id(s) '0'"),
    ("handoff sweep", "tasks.kinds=[upstream,upstream]", "tasks.kinds: Value error, repeated task kind(s) 'upstream'"),
    ("handoff sweep", "tasks.offset=100000", "tasks: no airline task matches"),
    ("handoff sweep", "engine.gpu_memory_utilization=1.5", "engine.gpu_memory_utilization: Input should be less"),
    ("handoff sweep", "model.smollm2.path=/nonexistent/ckpt",
     "model.smollm2.path: checkpoint directory /nonexistent/ckpt does not exist"),
    ("handoff sweep", "cluster.num_cpus=1", "engine.cpus: 1 engine set(s) x 1 replicas x 1 CPUs"),
    ("handoff sweep", "engine=gpu cluster.num_gpus=0", "engine.replicas: 1 engine set(s) x 1 replicas x 1 GPUs"),
])
def test_bad_value_exits_2_naming_the_key_before_ray(tmp_path, capsys, entry, override, message):
    """In process (the entry points' own main), so that Ray's state can be checked afterwards."""
    import ray

    run_dir, ray_dir = tmp_path / "run", tmp_path / "ray"
    status = sweep_main([*override.split(), f"run_dir={run_dir}", f"cluster.temp_dir={ray_dir}"], prog=entry)
    err = capsys.readouterr().err
    refused(subprocess.CompletedProcess([], status, "", err), message)
    assert not ray.is_initialized() and not ray_dir.exists()  # Ray never started
    # Resources are execution keys, checked once the run is planned: it can be resumed with others.
    planned = "cluster.num_" in override
    assert RunPaths(run_dir).exists() == planned


def test_multirun_runs_every_job_and_returns_the_worst_status(tmp_path):
    proc = hydra("-m", "trials=0,-1", f"run_dir={tmp_path}/m${{trials}}", f"cluster.temp_dir={tmp_path}/ray")
    refused(proc, "trials: Input should be greater than or equal to 1")
    assert proc.stderr.count("trials: Input should be greater than or equal to 1") == 2  # both jobs ran
    assert not (tmp_path / "ray").exists()


@pytest.fixture
def prepared_run(tmp_path) -> Path:
    """A planned run whose manifest is written (no Ray: nothing ran yet)."""
    run_dir = tmp_path / "run"
    overrides = [*TINY, f"run_dir={run_dir}"]
    prepare(compose(overrides), overrides).run.unlock()
    return run_dir


@pytest.mark.parametrize("override, message", [
    ("trails=3", "Could not override 'trails'"),
    ("trials=[", "no viable alternative at input '['"),
    ("model=[no_such_model]", "model/no_such_model"),
    ("trials=2", "refusing to resume: results would mix different inputs\n  config changed:\n    trials: 1 -> 2"),
    ("tasks.kinds=[bogus]", "tasks.kinds: Value error, unknown task kind(s) bogus"),
])
def test_bad_resume_exits_2_with_hydras_message(prepared_run, tmp_path, capsys, override, message):
    """In process, as test_bad_value_exits_2_naming_the_key_before_ray (a process each cost ~10 s)."""
    import ray

    status = sweep_main([f"resume={prepared_run}", override, f"cluster.temp_dir={tmp_path}/ray"])
    refused(subprocess.CompletedProcess([], status, "", capsys.readouterr().err), message)
    assert not ray.is_initialized() and not (tmp_path / "ray").exists()


def test_resume_merges_overrides_with_hydras_parser():
    assert merge_overrides(["trials=1", "model=[a]"], ["trials=3"]) == ["model=[a]", "trials=3"]
    assert merge_overrides(["+model.x.sampling.seed=1"], ["model.x.sampling.seed=2"]) == ["model.x.sampling.seed=2"]
    assert merge_overrides(["model=[a,b]", "tasks.ids=[1,'x=y']"], ["model=[c]"]) == ["tasks.ids=[1,'x=y']", "model=[c]"]
    with pytest.raises(ConfigError, match="override 'model=\\[': no viable alternative at input"):
        merge_overrides(["model=["])


@pytest.mark.ray
def test_multirun_of_two_scripted_sweeps_then_a_failed_report_exits_1(tmp_path):
    base = tmp_path / "runs"
    proc = hydra("-m", "seed=0,1", f"run_dir={base}/m${{seed}}", *TINY)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for seed in (0, 1):
        run_dir = base / f"m{seed}"
        assert len(RunPaths(run_dir).shards()) == 1, seed
        assert RunPaths(run_dir).report_md.is_file() and RunPaths(run_dir).report_txt.is_file()
    rows = [line.split()[:4] for line in proc.stdout.splitlines() if line.startswith("smollm2-135m-instruct ")]
    assert rows == [["smollm2-135m-instruct", "0", "airline", "1"]] * 2, proc.stdout  # each job's headline
    assert proc.stdout.index("substantive viol.") < proc.stdout.index("  report_txt: "), proc.stdout  # then its paths
    # The jobs shared one Ray: job 1's episode worker (its log is named by its pid) served job 2 too.
    workers = [{p.name for p in (RunPaths(base / f"m{seed}").root / LOGS).glob("worker-*.log")} for seed in (0, 1)]
    assert len(workers[0]) == 1 and workers[0] == workers[1], workers
    # A failure while reducing or reporting never exits 0: report/ is a file, so the report fails.
    run_dir = base / "m0"
    shutil.rmtree(RunPaths(run_dir).report)
    RunPaths(run_dir).report.write_text("not a directory")
    proc = hydra(f"resume={run_dir}", entry="python -m handoff.sweep")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "report error" in proc.stdout and "Traceback" in proc.stderr


def test_a_scripted_checkpoint_without_a_tokenizer_is_refused_before_ray(tmp_path, capsys):
    import ray

    bare = tmp_path / "global_step_5"
    bare.mkdir()
    status = sweep_main(["engine=scripted", "model=[checkpoints]", f"+model.checkpoints.paths=[{bare}]",
                         f"run_dir={tmp_path}/run", f"cluster.temp_dir={tmp_path}/ray"])
    err = capsys.readouterr().err
    refused(subprocess.CompletedProcess([], status, "", err),
            f"model.checkpoints.paths.0: {bare}: no tokenizer (tokenizer.json, tokenizer.model, vocab.json); "
            "set model.checkpoints.tokenizer to a tokenizer directory")
    assert not ray.is_initialized() and not (tmp_path / "ray").exists() and not (tmp_path / "run").exists()


def test_the_sweep_says_which_conf_it_reads_outside_the_repository(tmp_path):
    from handoff.sweep.run import CONF_DIR
    from handoff.sweep.suggest import conf_note

    assert conf_note(CONF_DIR, CONF_DIR.parent) is None  # the repository's own conf/
    note = conf_note(CONF_DIR, tmp_path)
    assert note == f"handoff sweep: reading the config from {CONF_DIR} (handoff's own, not the current directory's)"
    (tmp_path / "conf").mkdir()
    assert conf_note(CONF_DIR, tmp_path).endswith("; ./conf here is not read")
    proc = subprocess.run([sys.executable, "-m", "handoff", "sweep", "trials=0", f"run_dir={tmp_path}/run"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(CONF_DIR.parent)})
    assert f"reading the config from {CONF_DIR}" in proc.stderr, proc.stderr
