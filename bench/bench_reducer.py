"""Reducer benchmark: reduce 100,000 synthetic episodes on one core (target: under 60 s).

    python -m bench.bench_reducer [--episodes N] [--keep DIR]

Builds a run directory of EpisodeRecords (real tau2 messages, every labelled airline and retail
task, 4 trials, as many checkpoints as needed), then times, in one process pinned to one CPU:
a cold reduction (every shard read, every episode scored by the rules, all metrics computed),
a warm one (nothing changed: scores come from the per-shard cache) and a resume (one new shard).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import handoff  # noqa: E402,F401 - prepares tau2's import
from handoff.engine.cpu import cpu_model, proc_flags  # noqa: E402
from handoff.records import write_shard  # noqa: E402
from handoff.report.reducer import reduce_run  # noqa: E402
from handoff.rundir import Manifest, RunPaths  # noqa: E402
from handoff.testing.synthetic import Behavior, episode, sample_tasks  # noqa: E402

TRIALS = 4
SHARD_SIZE = 500


def build(run_dir: Path, n: int) -> int:
    """Shards of n episodes: checkpoint after checkpoint (step 1000 * i), all tasks, TRIALS trials."""
    tasks = sample_tasks(per_rule=10_000)
    run = RunPaths(run_dir)
    run.write_manifest(Manifest(name="bench", config={"trials": TRIALS}))
    records, shard_no, made, ckpt = [], 0, 0, 0
    while made < n:
        behavior = Behavior(correct_handoff=min(0.95, 0.5 + 0.005 * ckpt))
        for domain, ids in tasks.items():
            for task_id in ids:
                for trial in range(TRIALS):
                    if made == n:
                        break
                    records.append(episode(f"ckpt-{ckpt:03d}", 1000 * ckpt, domain, task_id, trial, behavior))
                    made += 1
                    if len(records) == SHARD_SIZE:
                        write_shard(run.shard_path(f"{shard_no:05d}"), f"{shard_no:05d}", records)
                        records, shard_no = [], shard_no + 1
        ckpt += 1
    if records:
        write_shard(run.shard_path(f"{shard_no:05d}"), f"{shard_no:05d}", records)
    return ckpt


def timed(label: str, fn):
    """Run fn; print its wall-clock and CPU seconds (CPU: what it costs on a machine shared with
    other work); return its result and CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{label:58} {wall:8.2f} s wall {cpu:8.2f} s CPU", flush=True)
    return result, cpu


def synthetic_run(description: str, prefix: str) -> tuple[argparse.Namespace, Path, int]:
    """What the benchmarks over a synthetic run share: their command line (--episodes, --keep), this
    process pinned to one core, the machine, tau2 imported (not counted) and the run built (not counted);
    the arguments, the run directory and its number of checkpoints."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--keep", help="build the run here and keep it (default: a temporary directory)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    run_dir = Path(args.keep or tempfile.mkdtemp(prefix=prefix)) / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    flags = " ".join(flag for flag, present in proc_flags().items() if present)
    print(f"machine: {cpu_model()} ({flags}), {os.cpu_count()} CPUs, pinned to 1; python {platform.python_version()}")
    timed("import tau2's registry (once per process, not counted)", lambda: __import__("tau2.registry"))
    n_ckpt, _ = timed(f"build {args.episodes} episodes (not counted)", lambda: build(run_dir, args.episodes))
    return args, run_dir, n_ckpt


def add_resumed_shard(run_dir: Path) -> int:
    """A resume's new shard: SHARD_SIZE episodes of a new checkpoint; its number of episodes."""
    tasks = sample_tasks(per_rule=10_000)["retail"][: SHARD_SIZE // TRIALS]
    extra = [episode("ckpt-new", 10**6, "retail", t, k, Behavior()) for t in tasks for k in range(TRIALS)]
    write_shard(RunPaths(run_dir).shard_path("resumed"), "resumed", extra)
    return len(extra)


def main() -> None:
    args, run_dir, n_ckpt = synthetic_run(__doc__, "bench-reducer-")
    reduction, cold = timed("cold reduce (read, score, metrics)", lambda: reduce_run(run_dir))
    print(f"  {reduction.n_episodes} episodes, {n_ckpt} checkpoints, {len(reduction.shards)} shards, "
          f"{len(reduction.groups)} metric groups; {reduction.n_episodes / cold:,.0f} episodes per CPU second")
    timed("warm reduce (nothing new: cached scores)", lambda: reduce_run(run_dir))
    added = add_resumed_shard(run_dir)
    timed(f"resume reduce (one new shard of {added})", lambda: reduce_run(run_dir))
    print(f"target: cold reduce under 60 s of one core -> {'met' if cold < 60 else 'NOT met'} ({cold:.1f} s CPU)")
    if not args.keep:
        shutil.rmtree(run_dir.parent)


if __name__ == "__main__":
    main()
