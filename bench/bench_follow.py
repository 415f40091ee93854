"""`handoff follow` latency: from a checkpoint's completion (verl's marker written) to its W&B row.

    python -m bench.bench_follow [--checkpoints 4] [--tasks 2] [--out FILE] [--keep DIR]

A fake verl trainer (handoff.testing.trainer.write_checkpoint, a thread of this process) writes a
tiny checkpoint in verl's layout, then waits until follow (in this process, scripted engine, W&B
offline) has logged its row before writing the next, so each checkpoint is measured alone. Per
checkpoint, split at what the run directory and the scripted engine's service log record:

- detection: marker written -> follow's watcher records it (`follow/seen.jsonl`);
- setup (merge/load): seen -> the checkpoint's first engine request (extend the run, plan,
  Ray/workers/engines: the first batch starts them, later ones take the parked engine, which loads
  the checkpoint in place; the scripted engine merges and loads no weights);
- episodes: first request -> last request of the checkpoint;
- to the row: last request -> its row in wandb/logged.json (shard written, reduced, W&B offline,
  report).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import handoff  # noqa: F401 - prepares tau2's import
from bench.common import report
from bench.scripted import model_path
from handoff.testing.trainer import write_checkpoint


def logged(run_dir: Path) -> set[str]:
    try:
        data = json.loads((run_dir / "wandb" / "logged.json").read_text())
    except (OSError, ValueError):
        return set()
    return {row[0] for rows in data.values() for row in rows}


def trainer(root: Path, run_dir: Path, steps: list[int], completed: dict[int, float], rows: dict[int, float],
            deadline_s: float = 1800) -> None:
    for step in steps:
        write_checkpoint(root, step)
        completed[step] = time.time()
        end = time.monotonic() + deadline_s
        while f"policy-step{step}" not in logged(run_dir) and time.monotonic() < end:
            time.sleep(0.05)
        rows[step] = time.time()


def split(step: int, completed: dict, rows: dict, seen: dict, served: list) -> dict:
    name = f"policy-step{step}"
    requests = [(start, end) for ck, start, end in served if ck == name]
    first, last = min(s for s, _ in requests), max(e for _, e in requests)
    return {"step": step, "detection_s": round(seen[step] - completed[step], 3),
            "setup_s": round(first - seen[step], 3), "episodes_s": round(last - first, 3),
            "to_row_s": round(rows[step] - last, 3), "total_s": round(rows[step] - completed[step], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--out")
    parser.add_argument("--keep", help="keep the run directory here")
    args = parser.parse_args()
    from handoff.sweep.follow import Stop, follow

    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench-follow-"))
    root, run_dir, served_log = tmp / "ckpts", tmp / "run", tmp / "served.log"
    steps = [10 * (i + 1) for i in range(args.checkpoints)]
    completed, rows = {}, {}
    overrides = ["engine=scripted", "domain=[retail]", "tasks.per_kind=null", f"tasks.limit={args.tasks}",
                 "shard_size=1", "workers.processes=1", f"workers.threads={args.tasks}", "logger.mode=offline",
                 "cluster.num_cpus=2", f"model.checkpoints.tokenizer={model_path()}",
                 "model.checkpoints.chat_template=hermes", f"engine.script.service_log={served_log}"]
    thread = threading.Thread(target=trainer, args=(root, run_dir, steps, completed, rows), daemon=True)
    started = time.monotonic()
    thread.start()
    result = follow(str(root), run_dir, overrides, Stop(until_step=steps[-1]), poll_s=args.poll_s)
    thread.join(timeout=1800)
    wall = time.monotonic() - started
    seen = {json.loads(line)["step"]: json.loads(line)["seen_at"]
            for line in (run_dir / "follow" / "seen.jsonl").read_text().splitlines()}
    served = [(ck, float(start), float(end)) for _, ck, start, end in
              (line.split() for line in served_log.read_text().splitlines())]
    per = [split(step, completed, rows, seen, served) for step in steps]
    report("bench_follow", {"checkpoints": per, "batches": result.batches, "skipped": result.skipped,
                            "episodes_per_checkpoint": args.tasks, "poll_s": args.poll_s, "wall_s": round(wall, 1),
                            "engine": "scripted"}, args.out)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
