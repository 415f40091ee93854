"""Issue 31's node-loss scenario, as a user on a real cluster meets it, `--runs` times in a row.

A local two-node Ray cluster (tests/support/cluster.py: a CPU head and a node with 2 declared GPUs,
every port picked free), a scripted sweep with `engine.device=gpu` run as a user runs it
(`python -m handoff.sweep ... cluster=existing`, a subprocess attached to the cluster): its engines
and one of its two workers land on the GPU node, which is killed (its raylet's process tree, SIGKILL)
once `--kill-after` episodes are recorded; a replacement node joins `--replace-after-s` later. Each run
reports the sweep's exit status, its failed shards (failed/*.json), the episodes recorded against
those planned, duplicates, and the wall time. The target: exit 0, no failed shard, every planned
episode exactly once, in every run.

    python -m bench.bench_node_loss --runs 3 [--trials 2] [--replace-after-s 75] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import handoff  # noqa: F401  (tau2's environment before any import of it)
from bench.common import report
from handoff.records import read_shard
from handoff.rundir import RunPaths
from tests.support.cluster import LocalCluster
from tests.support.ray import recorded

SWEEP = ["engine=scripted", "engine.device=gpu", "domain=[airline,retail]", "tasks.split=test",
         "tasks.per_kind=null", "shard_size=4", "workers.processes=2", "workers.cpus=1.5",
         "workers.threads=4", "engine.script.delay_s=0.2", "engine.load_timeout_s=600", "logger.mode=offline",
         "cluster=existing"]


def lose_and_replace(cluster: LocalCluster, doomed, run_dir: Path, kill_after: int, replace_after_s: float,
                     events: list, done: threading.Event) -> None:
    while not done.is_set() and not (run_dir.exists() and recorded(run_dir) >= kill_after):
        time.sleep(0.2)
    if done.is_set():
        return
    cluster.kill_node(doomed)
    events.append({"killed_at_episode": recorded(run_dir), "t": time.monotonic()})
    time.sleep(replace_after_s)
    events.append({"replaced_at_episode": recorded(run_dir), "node": cluster.add_node(num_cpus=2, num_gpus=2, timeout=600).name,
                   "t": time.monotonic()})


def one_run(i: int, args, root: Path) -> dict:
    with LocalCluster() as cluster:
        cluster.start_head(num_cpus=2, namespace="handoff")
        doomed = cluster.add_node(num_cpus=2, num_gpus=2, timeout=600)
        run_dir, events, done = root / f"run{i}", [], threading.Event()
        env = dict(cluster.env, RAY_ADDRESS=cluster.address, WANDB_DIR=str(root / f"wandb{i}"))
        watcher = threading.Thread(target=lose_and_replace, daemon=True,
                                   args=(cluster, doomed, run_dir, args.kill_after, args.replace_after_s, events, done))
        watcher.start()
        started = time.monotonic()
        with (root / f"run{i}.log").open("wb") as log:
            rc = subprocess.run([sys.executable, "-m", "handoff.sweep", *SWEEP, f"trials={args.trials}",
                                 f"run_dir={run_dir}"], env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        wall = time.monotonic() - started
        done.set()
        watcher.join(timeout=900)
    paths = RunPaths(run_dir)
    keys = [r.key for p in sorted(paths.shards_dir.glob("*.jsonl")) for r in read_shard(p)]
    planned = json.loads(paths.manifest_path.read_text())["n_episodes"] if paths.manifest_path.exists() else None
    return {"exit": rc, "wall_s": round(wall, 1), "planned": planned, "recorded": len(keys),
            "duplicates": len(keys) - len(set(keys)), "failed_shards": sorted(p.stem for p in paths.failed_dir.glob("*.json")),
            "killed_at_episode": next((e["killed_at_episode"] for e in events if "killed_at_episode" in e), None),
            "replacement_after_s": round(events[1]["t"] - events[0]["t"], 1) if len(events) == 2 else None,
            "load_average": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--kill-after", type=int, default=20, help="episodes recorded before the node is killed")
    ap.add_argument("--replace-after-s", type=float, default=75)
    ap.add_argument("--root", type=Path, default=Path("/tmp/bench-node-loss"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    runs = []
    for i in range(args.runs):
        runs.append(one_run(i, args, args.root))
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    ok = all(r["exit"] == 0 and not r["failed_shards"] and r["recorded"] == r["planned"] and not r["duplicates"]
             for r in runs)
    report("node_loss", {"sweep": SWEEP, "trials": args.trials, "replace_after_s": args.replace_after_s,
                         "runs": runs, "all_ok": ok}, args.out)


if __name__ == "__main__":
    main()
