"""Ctrl-C of a running sweep (SIGINT to its process group, as a terminal sends it): exit status 130,
one line naming what was kept and the command that continues the run, no traceback, and nothing of
the sweep (its embedded Ray, engines, workers) left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from handoff.rundir import RunPaths

pytestmark = pytest.mark.ray

SLOW_SCRIPTED = ["engine=scripted", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=4", "shard_size=1",
                 "workers.processes=1", "workers.threads=1", "engine.script.delay_s=1", "logger.mode=disabled",
                 "cluster.num_cpus=2"]


def wait_for(predicate, what: str, proc: subprocess.Popen, deadline_s: float = 600) -> None:
    end = time.monotonic() + deadline_s
    while not predicate():
        assert proc.poll() is None, f"the sweep ended before {what}"
        assert time.monotonic() < end, f"no {what} within {deadline_s} s"
        time.sleep(0.2)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def ctrl_c(cmd: list[str], run_dir: Path) -> str:
    """Run `cmd` in its own process group, send SIGINT to the group once `run_dir` has a finished
    shard (the engines and workers are up and the driver is mid-sweep), and check what a Ctrl-C must
    leave: exit 130, no traceback, one `interrupted` line (returned), the whole group ended (Ray's
    processes share it)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: bool(RunPaths(run_dir).shards()), "finished shard", proc)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    interrupted = [line for line in err.splitlines() if "interrupted" in line]
    assert len(interrupted) == 1, err
    end = time.monotonic() + 120
    while group_alive(proc.pid) and time.monotonic() < end:
        time.sleep(0.5)
    assert not group_alive(proc.pid), subprocess.run(["ps", "-o", "pid,cmd", "-g", str(proc.pid)],
                                                     capture_output=True, text=True, check=False).stdout
    return interrupted[0]


def test_ctrl_c_of_a_running_sweep_exits_130_with_one_line_naming_the_resume(tmp_path: Path):
    run_dir = tmp_path / "run"
    line = ctrl_c([sys.executable, "-m", "handoff.sweep", *SLOW_SCRIPTED, f"run_dir={run_dir}"], run_dir)
    shards = len(RunPaths(run_dir).shards())
    assert 1 <= shards < 4
    assert line.startswith(f"handoff sweep: interrupted: kept {shards} finished shard(s)")
    assert line.endswith(f"continue with: handoff sweep resume={run_dir}")


def test_the_line_counts_finished_shards_and_whole_partial_episodes_only(tmp_path: Path):
    from handoff.sweep.interrupt import Interrupted, interrupted_line

    run = RunPaths(tmp_path)
    run.shards_dir.mkdir(parents=True)
    run.partial_dir.mkdir()
    (run.shards_dir / "a.jsonl").write_text("{}\n")
    (run.partial_dir / "b.jsonl").write_text('\n{"key": 1}\n\n{"key": 2}\n{"torn by the kil')
    line = interrupted_line(Interrupted(tmp_path, "handoff sweep resume=X"))
    assert line == (f"interrupted: kept 1 finished shard(s) and 2 episode(s) of unfinished ones in {tmp_path}; "
                    "continue with: handoff sweep resume=X")
    assert interrupted_line(KeyboardInterrupt()) == "interrupted before the sweep started: nothing new ran"


def test_a_multiruns_jobs_in_the_basic_sweepers_order():
    """Against Hydra's own split of a multirun into jobs (its basic sweeper, the one the sweep uses)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from handoff.sweep.__main__ import multirun_jobs

    argv = ["seed=0,1", "trials=1", "+x.y=a,b", "run_dir=r/m${seed}", "seed=2,3,4"]
    [hydras] = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(argv), None)
    assert multirun_jobs(["-m", *argv]) == [" ".join(o for o in job if o.split("=")[0] in ("seed", "+x.y"))
                                            for job in hydras]
    assert multirun_jobs(["-m", "seed=0,1", "trials=1", "+x.y=a,b", "run_dir=r/m${seed}"]) == [
        "seed=0 +x.y=a", "seed=0 +x.y=b", "seed=1 +x.y=a", "seed=1 +x.y=b"]
    assert multirun_jobs(["seed=0,1", "seed=2,3"]) == ["seed=2", "seed=3"]  # a later value of a key wins
    assert multirun_jobs(["trials=1"]) == [""]


ENTRIES = {"handoff sweep": ["-m", "handoff", "sweep"], "python -m handoff.sweep": ["-m", "handoff.sweep"]}


@pytest.mark.parametrize("entry, interrupted_job", [("python -m handoff.sweep", 0), ("handoff sweep", 1)])
def test_ctrl_c_of_a_running_multirun_exits_130_with_one_line_naming_the_resume(tmp_path: Path, entry: str,
                                                                                interrupted_job: int):
    """`-m seed=0,1`: Ctrl-C inside the first job (the second never starts) or inside the second (the
    first finished): exit 130, one line naming the interrupted job's resume (and the jobs that did not
    start), no traceback, nothing of the multirun (its shared Ray, engines, workers) left running."""
    runs = [tmp_path / f"m{seed}" for seed in (0, 1)]
    run_dir = runs[interrupted_job]
    line = ctrl_c([sys.executable, *ENTRIES[entry], "-m", "seed=0,1", *SLOW_SCRIPTED, f"run_dir={tmp_path}/m${{seed}}"],
                  run_dir)
    shards = len(RunPaths(run_dir).shards())
    assert 1 <= shards < 4
    assert line.startswith(f"handoff sweep: interrupted: kept {shards} finished shard(s)"), line
    if interrupted_job == 0:  # the multirun's next job never starts, and the line says so
        assert line.endswith(f"continue with: handoff sweep resume={run_dir}; the multirun's jobs not started: "
                             "seed=1"), line
        assert not runs[1].exists()
    else:
        assert line.endswith(f"continue with: handoff sweep resume={run_dir}"), line
        assert len(RunPaths(runs[0]).shards()) == 4 and RunPaths(runs[0]).report_md.is_file()
