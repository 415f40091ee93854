"""W&B logging benchmark: what logging adds to the end of a sweep, and what the offline runs hold.

    python -m bench.bench_wandb [--per-rule N] [--trials K] [--keep DIR]

Builds a 3-checkpoint synthetic run directory (real tau2 messages, up to N labelled tasks per rule
and domain), reduces it (as a sweep's end does anyway), then logs it to W&B offline twice: the first
logging writes one offline run per domain with a row per checkpoint, the second finds nothing new.
Prints wall and CPU seconds (this process, and W&B's wandb-core service process) and, read back
from W&B's own offline records, each run's rows, steps and number of keys.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import handoff  # noqa: F401 - prepares tau2's import
from bench.common import machine
from handoff.report import reduce_run
from handoff.report.wandb_log import STEP_METRIC, log_reduction, run_id
from handoff.rundir import RunDir
from handoff.testing.synthetic import Behavior, sample_tasks, write_run
from handoff.testing.wandb_offline import offline_runs

CHECKPOINTS = {"ckpt-100": (100, Behavior(correct_handoff=0.6)), "ckpt-200": (200, Behavior(correct_handoff=0.75)),
               "ckpt-300": (300, Behavior(correct_handoff=0.9))}


def _service_cpu() -> float:
    """CPU seconds of this process's children so far (W&B's wandb-core service)."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def timed(fn):
    """fn's result, wall seconds, this process's CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-rule", type=int, default=10_000, help="tasks per label rule and domain (default: all)")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--keep", help="build the run here and keep it")
    args = parser.parse_args()
    for name in ("WANDB_MODE", "WANDB_DIR", "WANDB_API_KEY"):
        os.environ.pop(name, None)
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench-wandb-"))
    try:
        run = write_run(root / "run", CHECKPOINTS, sample_tasks(args.per_rule), trials=args.trials, shard_size=50)
        reduction, reduce_wall, reduce_cpu = timed(lambda: reduce_run(run))
        first, log_wall, log_cpu = timed(lambda: log_reduction(run, reduction))
        again, again_wall, again_cpu = timed(lambda: log_reduction(run, reduction))
        service_cpu = _service_cpu()  # W&B's service starts with the first logging
        runs = {}
        for domain in reduction.domains():
            (logged,) = offline_runs(RunDir(run).wandb, run_id(RunDir(run), domain))
            rows = logged["history"]
            runs[domain] = {"rows": len(rows), "_step": [r["_step"] for r in rows],
                            STEP_METRIC: [r[STEP_METRIC] for r in rows],
                            "keys_per_row": sorted({len(r) for r in rows}),
                            "episodes_per_table": [r["episodes/nrows"] for r in rows]}
        print(json.dumps({
            "machine": machine(), "load_average": os.getloadavg(), "episodes": reduction.n_episodes,
            "reduce_s": {"wall": round(reduce_wall, 2), "cpu": round(reduce_cpu, 2)},
            "first_log_s": {"wall": round(log_wall, 2), "cpu": round(log_cpu, 2), "rows": first.logged_rows},
            "second_log_s": {"wall": round(again_wall, 2), "cpu": round(again_cpu, 2), "rows": again.logged_rows},
            "wandb_service_cpu_s": round(service_cpu, 2), "errors": first.errors + again.errors, "runs": runs,
        }))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
