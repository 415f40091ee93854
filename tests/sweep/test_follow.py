"""`handoff follow` (handoff.sweep.follow) against a fake verl trainer (handoff.testing.trainer.py) that
writes a tiny checkpoint in verl's layout every few seconds and deletes the oldest beyond a keep
count, on the scripted engine: every checkpoint written is evaluated exactly once or recorded as
skipped with its reason; follow killed with SIGKILL mid-way and started again loses and duplicates
nothing; a second follow of the run is refused; W&B's offline files hold one row per evaluated
checkpoint at its step, in one W&B run per domain. No timing coincidence: the trainer deletes a
checkpoint only once follow recorded it as seen, and every wait has a generous deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.scripted import model_path
from handoff.records import read_shard
from handoff.rundir import RunDir, RunPaths
from handoff.sweep.follow import Stop, Watch, Watcher, follow_lock
from handoff.sweep.rundir import RunLocked, SweepRun
from handoff.testing.trainer import write_checkpoint

STEPS = [10, 20, 30, 40, 50, 60]


def scripted(wandb: str = "offline") -> list[str]:
    return ["engine=scripted", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=1", "shard_size=1",
            "workers.processes=1", "workers.threads=1", f"logger.mode={wandb}", "cluster.num_cpus=2",
            f"model.checkpoints.tokenizer={model_path()}", "model.checkpoints.chat_template=hermes"]


def env(tmp_path: Path) -> dict:
    out = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    for name in ("CONFIG", "CACHE", "DATA"):
        out[f"WANDB_{name}_DIR"] = str(tmp_path / "wandb-home" / name.lower())
    return out


def wait_for(predicate, what: str, *procs: subprocess.Popen, deadline_s: float = 900) -> None:
    end = time.monotonic() + deadline_s
    while not predicate():
        for proc in procs:
            assert proc.poll() is None, f"{proc.args[:4]} ended (rc {proc.returncode}) before {what}"
        assert time.monotonic() < end, f"no {what} within {deadline_s} s"
        time.sleep(0.3)


def test_verl_marker_says_when_a_checkpoint_is_complete(tmp_path):
    watch = Watch(str(tmp_path))
    actor = tmp_path / "global_step_5" / "actor"
    actor.mkdir(parents=True)  # being written: no marker yet
    assert watch.complete() == []
    write_checkpoint(tmp_path, 5)
    (tmp_path / "global_step_9" / "actor").mkdir(parents=True)  # the next one, half written
    assert watch.complete() == [str(actor)]


def test_a_glob_checkpoint_is_complete_once_its_files_settle(tmp_path):
    ckpt = tmp_path / "ck-7"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    old = time.time() - 60
    os.utime(ckpt / "config.json", (old, old))
    watch = Watch(str(tmp_path / "ck-*"), settle_s=0.5)
    assert watch.complete() == []  # first look: not yet known to be stable
    time.sleep(0.6)
    assert watch.complete() == [str(ckpt)]
    (ckpt / "model.safetensors").write_bytes(b"x")  # a file written now: not complete
    assert watch.complete() == []


def test_a_second_follow_of_a_run_is_refused(tmp_path):
    run = SweepRun(tmp_path / "run")
    held = follow_lock(run)
    with pytest.raises(RunLocked, match="another `handoff follow`"):
        follow_lock(run)
    held.close()
    follow_lock(run).close()


def test_seen_checkpoints_are_remembered_across_starts(tmp_path):
    write_checkpoint(tmp_path / "ck", 10)
    log = tmp_path / "run" / "follow" / "seen.jsonl"
    first = Watcher(Watch(str(tmp_path / "ck")), log, 1.0)
    first.scan()
    with open(log, "a") as f:
        f.write('{"path": "torn by a ki')
    again = Watcher(Watch(str(tmp_path / "ck")), log, 1.0)
    assert again.snapshot() == first.snapshot() and len(again.snapshot()) == 1


def test_stop_waits_for_every_seen_checkpoint(tmp_path):
    stop = Stop(stop_file=str(tmp_path / "stop"))
    (tmp_path / "stop").touch()
    assert stop.reason(None, 0, unhandled=1) is None
    assert stop.reason(None, 0, unhandled=0) == f"sentinel file {tmp_path / 'stop'}"
    assert Stop(idle_timeout_s=5).reason(None, 4.9, 0) is None
    assert "no new checkpoint for 5 s" in Stop(idle_timeout_s=5).reason(None, 5, 0)


def episodes_by_key(run_dir: Path) -> dict:
    out = {}
    for path in RunPaths(run_dir).shards():
        for record in read_shard(path):
            assert record.key not in out, f"episode {record.key} recorded twice"
            out[record.key] = record
    return out


@pytest.mark.ray
def test_follow_a_fake_trainer_killed_and_restarted_evaluates_each_checkpoint_once_or_skips_it(tmp_path):
    from handoff.report.wandb_log import STEP_METRIC, run_id
    from handoff.testing.wandb_offline import history, offline_runs

    ckpts, run_dir = tmp_path / "ckpts", tmp_path / "run"
    seen = run_dir / "follow" / "seen.jsonl"
    trainer = subprocess.Popen([sys.executable, "-m", "handoff.testing.trainer", str(ckpts), "--steps",
                                *map(str, STEPS), "--every-s", "3", "--keep", "2", "--seen", str(seen)],
                               start_new_session=True)
    cmd = [sys.executable, "-m", "handoff", "follow", "--until-step", str(STEPS[-1]), "--poll-s", "0.5",
           str(ckpts), str(run_dir), *scripted()]
    follower = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env=env(tmp_path))
    try:
        wait_for(lambda: bool(RunPaths(run_dir).shards()), "a finished shard", follower)
        second = subprocess.run(cmd, capture_output=True, text=True, env=env(tmp_path), timeout=600, check=False)
        assert second.returncode == 2 and "another `handoff follow` is following this run" in second.stderr
        os.killpg(follower.pid, signal.SIGKILL)  # follow, its Ray and engines, mid-way
        follower.wait(timeout=60)
        finished = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in RunPaths(run_dir).shards()}
        restarted = subprocess.run(cmd, capture_output=True, text=True, env=env(tmp_path), timeout=900, check=False,
                                   start_new_session=True)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        trainer.wait(timeout=300)
    finally:
        for proc in (trainer, follower):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in RunPaths(run_dir).shards()
            if p.name in finished} == finished  # nothing finished before the kill was redone
    manifest = RunPaths(run_dir).read_manifest()
    skipped, planned = manifest.skipped(), {c["name"]: c for c in manifest.checkpoints}
    episodes = episodes_by_key(run_dir)  # asserts no episode twice
    evaluated = []
    for step in STEPS:
        name = f"policy-step{step}"
        assert name in skipped or name in planned, f"{name} was neither evaluated nor recorded as skipped"
        if name in skipped:
            assert "deleted before" in skipped[name]
            continue
        shards = [s for s in manifest.shards if s["model"] == name]
        assert shards and all(RunPaths(run_dir).shard_path(s["id"]).is_file() for s in shards), name
        assert sum(1 for key in episodes if key[0] == name) == sum(len(s["episodes"]) for s in shards)
        evaluated.append(step)
    assert evaluated, "no checkpoint was evaluated"
    assert "follow: stopped (step 60 >= --until-step 60)" in restarted.stdout
    ends_with_headline(restarted.stdout, run_dir)
    rows = history(offline_runs(RunPaths(run_dir).wandb, run_id(RunDir(run_dir), "retail")))
    assert [r[STEP_METRIC] for r in rows] == evaluated
    assert [r["_step"] for r in rows] == list(range(len(evaluated)))


@pytest.mark.ray
def test_engines_stay_up_between_batches_and_load_the_next_checkpoint_in_place(ray_cluster, tmp_path, monkeypatch):
    """Three checkpoints, each written after the one before was evaluated (three batches): one agent
    engine process serves all three (a parked replica loads the next checkpoint in place)."""
    from handoff.sweep.follow import follow
    from handoff.sweep.kept import KeptPlacement

    for name, value in env(tmp_path).items():
        monkeypatch.setenv(name, value)
    ckpts, run_dir, served = tmp_path / "ckpts", tmp_path / "run", tmp_path / "served.log"
    steps = [10, 20, 30]
    trainer = subprocess.Popen([sys.executable, "-m", "handoff.testing.trainer", str(ckpts), "--steps",
                                *map(str, steps), "--every-s", "0", "--keep", "3", "--after-shard", str(run_dir)],
                               start_new_session=True)
    starts = []
    original = KeptPlacement.start

    def counting_start(self, ck, role):
        replica = original(self, ck, role)
        starts.append((role, ck.name, self.started, self.reused))
        return replica

    monkeypatch.setattr(KeptPlacement, "start", counting_start)
    try:
        result = follow(str(ckpts), run_dir, [*scripted("disabled"), f"engine.script.service_log={served}"],
                        Stop(until_step=30), poll_s=0.3)
        trainer.wait(timeout=120)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
    assert result.batches == 3 and result.evaluated == [f"policy-step{s}" for s in steps] and not result.skipped
    agent = {line.split()[0] for line in served.read_text().splitlines() if line.split()[1].startswith("policy-")}
    assert len(agent) == 1, f"the agent's requests were served by processes {agent}"
    assert {line.split()[1] for line in served.read_text().splitlines()} >= {f"policy-step{s}" for s in steps}
    # two engine actors started (the agent's and the user simulator's), then only parked ones taken up
    assert [(role, started) for role, _, started, _ in starts] == [
        (starts[0][0], 1), (starts[1][0], 2), *[(role, 2) for role, *_ in starts[2:]]]
    assert starts[-1][3] == len(starts) - 2 >= 4


def test_a_plain_path_is_verls_directory_even_before_it_exists_and_a_pattern_is_a_glob(tmp_path):
    later = Watch(str(tmp_path / "not-yet"))
    assert later.verl and later.glob == str(tmp_path / "not-yet" / "global_step_*" / "actor")
    assert not Watch(str(tmp_path / "ck-*")).verl and Watch(str(tmp_path / "ck-*")).glob == str(tmp_path / "ck-*")


@pytest.mark.parametrize("override, message", [
    ("adaptive.round_trials=9", "round_trials \\(9\\) exceeds max_trials"),
    ("trials=0", "trials: Input should be greater than or equal to 1"),
    ("nope=1", "follow: cannot compose the overrides"),
])
def test_a_bad_config_is_refused_before_anything_is_watched(tmp_path, override, message):
    from handoff.errors import ConfigError
    from handoff.sweep.follow import follow

    with pytest.raises(ConfigError, match=message):
        follow(str(tmp_path / "ckpts"), tmp_path / "run", [*scripted("disabled"), override], Stop(until_step=1))
    assert not (tmp_path / "run").exists()


@pytest.mark.ray
def test_ctrl_c_of_follow_exits_130_with_the_command_that_continues_it(tmp_path):
    import shlex

    from handoff.cli import build_parser

    ckpts, run_dir = tmp_path / "ckpts", tmp_path / "run"
    write_checkpoint(ckpts, 10)
    cmd = [sys.executable, "-m", "handoff", "follow", "--until-step", "100", "--poll-s", "0.5", str(ckpts),
           str(run_dir), *scripted("disabled")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=env(tmp_path))
    try:
        wait_for(lambda: (run_dir / "report" / "report.md").is_file(), "the first batch's report", proc)
        os.killpg(proc.pid, signal.SIGINT)  # follow waits for the next checkpoint
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "Traceback" not in err, err
    [line] = [line for line in err.splitlines() if "interrupted" in line]
    assert line.startswith(f"handoff follow: interrupted: kept 1 finished shard(s) and 0 episode(s) of unfinished "
                           f"ones in {run_dir}; continue with: handoff follow ")
    again = build_parser().parse_args(shlex.split(line.split("continue with: ", 1)[1])[1:])
    assert (again.watch, again.run_dir, again.until_step, again.poll_s) == (str(ckpts), str(run_dir), 100, 0.5)
    assert again.overrides == scripted("disabled")


def ends_with_headline(out: str, run_dir: Path) -> None:
    """The run's headline table, as a sweep ends with it, comes last before the paths and what follow did."""
    from handoff.report.text import run_headline

    table = run_headline(run_dir)
    assert table in out, out[-3000:]
    assert "checkpoint" not in out[out.rindex(table) + len(table):out.index("follow: stopped")], out[-3000:]


def test_a_follow_that_evaluates_nothing_new_still_ends_with_the_runs_headline(tmp_path, capsys):
    from handoff.cli import main
    from handoff.report import finish_run
    from tests.support.runs import finished_run

    run_dir = finished_run(tmp_path / "run")
    finish_run(run_dir)
    assert main(["follow", "--idle-timeout", "0", "--poll-s", "0.1", str(tmp_path / "ckpts"), str(run_dir),
                 *scripted("disabled")]) == 0
    out = capsys.readouterr().out
    assert "follow: stopped (no new checkpoint" in out
    ends_with_headline(out, run_dir)
