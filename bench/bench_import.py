"""`handoff import` benchmark: the shared real tau2 files (../shared/data/real-trajectories) imported
into a fresh run directory, per 100 simulations.

    python -m bench.bench_import [--keep DIR] [--out FILE]

Times, in this process (CPU = time.process_time()): reading and re-evaluating every simulation with
tau2's evaluator on the pinned tasks and writing the shards (handoff.importing.import_files), then
the sweep's finish_run (reduce, W&B offline, report with episode pages), then a re-import of the same
files (which changes nothing). Prints the counts of each file: agreed, mismatched, failed to replay.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import handoff  # noqa: F401 - prepares tau2's import
from bench.common import report
from handoff.importing import counts, import_files
from handoff.report import finish_run

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real-trajectories"


def timed(fn, *args, **kwargs):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", help="write the run directory here (default: a temporary one, removed)")
    parser.add_argument("--out", help="also write the JSON result to this file")
    args = parser.parse_args()
    files = sorted(SHARED.glob("*.json.gz"))
    if not files:
        print(f"bench_import: skipped, {SHARED} holds no shared real trajectories")
        return
    os.environ.setdefault("WANDB_MODE", "offline")
    root = Path(args.keep or tempfile.mkdtemp(prefix="handoff-bench-import-"))
    run = root / "imported"
    shutil.rmtree(run, ignore_errors=True)
    try:
        section, import_s, import_cpu = timed(import_files, run, files)
        _, finish_s, finish_cpu = timed(finish_run, run)
        _, again_s, again_cpu = timed(lambda: (import_files(run, files), finish_run(run)))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    per100 = 100 / section.episodes
    phases = {"import (read, re-evaluate, write shards)": (import_s, import_cpu),
              "finish_run (reduce, W&B offline, report, episode pages)": (finish_s, finish_cpu),
              "re-import of the same files (no change)": (again_s, again_cpu)}
    report("import", {
        "simulations": section.episodes,
        "files": {Path(f.path).name: dict(zip(("agreed", "mismatched", "failed_to_replay", "recovered", "no_task", "drifted"),
                                                      counts(section, f.path)))
                  for f in section.files},
        "per_100_simulations": {name: {"wall_s": round(w * per100, 2), "cpu_s": round(c * per100, 2)}
                                for name, (w, c) in phases.items()},
        "load_average": os.getloadavg(),
    }, args.out)


if __name__ == "__main__":
    main()
