"""jobs/slurm.sbatch run on this machine as SLURM would run it, with stand-ins for `srun` (runs the
command it is given, here) and `scontrol` (lists the allocation's nodes): real `ray start` processes,
a head and a node, each declaring one GPU. The script's own cleanup must leave no process behind,
whichever way it exits; the job's log (its output) shows engine failures."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psutil
import pytest

from handoff.rundir import RunPaths

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # a Ray cluster of its own (head + node processes)

REPO = Path(__file__).resolve().parents[2]

# srun: drop srun's options, run the command on this machine. One machine plays every node, so each
# node's `ray start` gets dashboard-agent and runtime-env-agent ports of its own (distinct machines
# would not need them); a node listed in DEAD_NODES fails to start, as a broken node would.
SRUN = r'''#!/bin/bash
node=
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in -w|--nodelist) node=$2; shift 2;; *) shift;; esac
done
[[ " $DEAD_NODES " == *" $node "* ]] && { echo "srun: node $node is down" >&2; exit 1; }
if [[ "$*" == *"ray.scripts.scripts start"* ]]; then
  port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
  exec "$@" --dashboard-agent-listen-port="$(port)" --dashboard-agent-grpc-port="$(port)" \
    --runtime-env-agent-port="$(port)" --metrics-export-port="$(port)"
fi
exec "$@"
'''
SCONTROL = '#!/bin/bash\n[[ "$1 $2" == "show hostnames" ]] && tr "," "\\n" <<< "$3"\n'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leftovers(token: str) -> list[psutil.Process]:
    """Processes started under this test's job (they inherit its HANDOFF_TEST_JOB token)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("HANDOFF_TEST_JOB") == token:
                found.append(p)
        except psutil.Error:
            continue
    return found


def sbatch(tmp_path: Path, nodes: list[str], overrides: list[str], **env: str) -> tuple[subprocess.CompletedProcess,
                                                                                         list[int]]:
    """Run jobs/slurm.sbatch as SLURM's batch step would; returns its result and the pids of any
    process left behind (killed here, by pid)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    ray_tmp = Path(f"/tmp/rs-{uuid.uuid4().hex[:8]}")  # AF_UNIX paths must stay short
    token = uuid.uuid4().hex
    job_env = {
        **os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HANDOFF_TEST_JOB": token, "RAY_AUTH_MODE": "disabled", "SLURM_JOB_NODELIST": ",".join(nodes),
        "PY": sys.executable, "RAY_PORT": str(free_port()), "GPUS_PER_NODE": "1", "CPUS_PER_NODE": "1",
        "RAY_HEAD_ARGS": f"--temp-dir={ray_tmp} --include-dashboard=false --ray-client-server-port={free_port()}",
        "RAY_NODE_ARGS": "--object-store-memory=80000000 --disable-usage-stats", **env,
    }
    try:
        done = subprocess.run(["bash", str(REPO / "jobs" / "slurm.sbatch"), *overrides], cwd=REPO, env=job_env,
                              capture_output=True, text=True, timeout=600)
    finally:
        left = leftovers(token)
        for p in left:
            p.kill()
        psutil.wait_procs(left, timeout=30)
        subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)
    return done, [p.pid for p in left]


def test_sweep_on_a_two_node_allocation_logs_engine_failures_and_cleans_up(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["engine=scripted", "engine.device=gpu", "domain=[retail]", "tasks.per_kind=null",
                 "tasks.limit=1", "trials=2",
                 "shard_size=1", "workers.processes=1", "max_attempts=1", f"run_dir={run_dir}",
                 "engine.script.fail_sessions='^user/[^/]+/retail/[^/]+/0/'"]  # trial 0 fails, trial 1 runs
    done, left = sbatch(tmp_path, ["gpu-a", "gpu-b"], overrides)
    log = done.stdout + done.stderr
    assert left == [], f"processes left behind: {left}\n{log[-3000:]}"
    assert "ray cluster at 127.0.0.1:" in log and "2 nodes, 2 GPUs" in log, log[-3000:]
    assert done.returncode == 1, log[-3000:]  # the sweep's status: a shard failed
    assert "(EngineHost pid=" in log and "scripted failure for user/" in log, log[-3000:]
    paths = RunPaths(run_dir)
    assert len(paths.failed_ids()) == 1 and len(paths.shards()) == 1


def test_missing_gpus_end_the_job_after_the_wait_with_nothing_left_running(tmp_path):
    done, left = sbatch(tmp_path, ["gpu-a", "gpu-b"], [f"run_dir={tmp_path}/run"], DEAD_NODES="gpu-b",
                        RAY_WAIT_S="10")
    log = done.stdout + done.stderr
    assert left == [], f"processes left behind: {left}\n{log[-3000:]}"
    assert done.returncode != 0 and re.search(r"[01]/2 nodes and [01]/2 GPUs after 10s", log), log[-3000:]
    assert not (tmp_path / "run").exists()
