"""Episode pages benchmark: the transcripts and the index of `handoff report` for 100,000 synthetic
episodes, one process pinned to one CPU (docs/benchmarks.md, "Episode pages").

    python -m bench.bench_pages [--episodes N] [--keep DIR]

Builds the run of bench_reducer (real tau2 messages, every labelled task, 4 trials, shards of 500)
and reduces it (not counted), then times: every transcript page and the index from nothing (cold),
again with nothing new (warm), and after one new shard (resume); and counts the files and bytes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bench.bench_reducer import add_resumed_shard, synthetic_run, timed  # noqa: E402
from handoff.report.episodes import write_index, write_transcripts  # noqa: E402
from handoff.report.reducer import reduce_run  # noqa: E402
from handoff.rundir import RunDir, RunPaths  # noqa: E402


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
    args, run_dir, _ = synthetic_run(__doc__, "bench-pages-")
    timed("cold reduce (not counted: bench_reducer)", lambda: reduce_run(run_dir))
    pages(run_dir, "cold")
    pages(run_dir, "warm (nothing new)")
    pages(run_dir, f"resume (one new shard of {add_resumed_shard(run_dir)})")
    episodes = RunPaths(run_dir).report / "episodes"
    for name, folder in (("transcripts", episodes / "transcripts"), ("index data", episodes / "data")):
        n, total, largest = sizes(folder)
        print(f"{name:12} {n:8,} files {total / 1e6:10.1f} MB  largest {largest / 1e3:8.1f} kB")
    print(f"{'index.html':12} {(episodes / 'index.html').stat().st_size / 1e3:8.1f} kB")
    if not args.keep:
        shutil.rmtree(run_dir.parent)


if __name__ == "__main__":
    main()
