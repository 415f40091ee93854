"""Episode pages benchmark: the transcripts and the index of `handoff report` for 100,000 synthetic
episodes, one process pinned to one CPU (docs/benchmarks.md, "Episode pages").

    python -m bench.bench_pages [--episodes N] [--keep DIR]

Builds the run of bench_reducer (real tau2 messages, every labelled task, 4 trials, shards of 500)
and reduces it (not counted), then times: every transcript page and the index from nothing (cold),
again with nothing new (warm), and after one new shard (resume); and counts the files and bytes.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bench.bench_reducer import SHARD_SIZE, TRIALS, build, timed  # noqa: E402
from handoff.records import write_shard  # noqa: E402
from handoff.report.episodes import write_index, write_transcripts  # noqa: E402
from handoff.report.reducer import reduce_run  # noqa: E402
from handoff.rundir import RunDir, RunPaths  # noqa: E402
from handoff.testing.synthetic import Behavior, episode, sample_tasks  # noqa: E402


def pages(run_dir: Path, label: str) -> int:
    """Reduce (timed apart: bench_reducer's), then write the transcripts that are new and the
    index; the number of pages written."""
    reduction, _ = timed(f"  {label}: reduce (scores from the cache)", lambda: reduce_run(run_dir))
    run = RunDir(run_dir)
    written, _ = timed(f"  {label}: transcripts", lambda: write_transcripts(run, reduction))
    timed(f"  {label}: index", lambda: write_index(run, reduction))
    print(f"  {label}: {written} transcript pages written")
    return written


def sizes(folder: Path) -> tuple[int, int, int]:
    """Files, bytes and the largest file's bytes under a folder."""
    files = [p.stat().st_size for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(files), max(files, default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--keep", help="build the run here and keep it (default: a temporary directory)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    run_dir = Path(args.keep or tempfile.mkdtemp(prefix="bench-pages-")) / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, pinned to 1; "
          f"python {platform.python_version()}")
    timed("import tau2's registry (once per process, not counted)", lambda: __import__("tau2.registry"))
    timed(f"build {args.episodes} episodes (not counted)", lambda: build(run_dir, args.episodes))
    timed("cold reduce (not counted: bench_reducer)", lambda: reduce_run(run_dir))
    pages(run_dir, "cold")
    pages(run_dir, "warm (nothing new)")
    tasks = sample_tasks(per_rule=10_000)["retail"][: SHARD_SIZE // TRIALS]
    extra = [episode("ckpt-new", 10**6, "retail", t, k, Behavior()) for t in tasks for k in range(TRIALS)]
    write_shard(RunPaths(run_dir).shard_path("resumed"), "resumed", extra)
    pages(run_dir, f"resume (one new shard of {len(extra)})")
    episodes = RunPaths(run_dir).report / "episodes"
    for name, folder in (("transcripts", episodes / "transcripts"), ("index data", episodes / "data")):
        n, total, largest = sizes(folder)
        print(f"{name:12} {n:8,} files {total / 1e6:10.1f} MB  largest {largest / 1e3:8.1f} kB")
    print(f"{'index.html':12} {(episodes / 'index.html').stat().st_size / 1e3:8.1f} kB")
    if not args.keep:
        shutil.rmtree(run_dir.parent)


if __name__ == "__main__":
    main()
