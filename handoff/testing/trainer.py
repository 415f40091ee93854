"""A fake verl trainer for `handoff follow` tests and bench.bench_follow: `python -m handoff.testing.trainer ROOT --steps 10 20 30
--every-s 4 --keep 2 --seen RUN/follow/seen.jsonl` writes a tiny checkpoint in verl's layout
(`global_step_N/actor`: an FSDP shard per rank, fsdp_config.json, huggingface/ with config and
tokenizer files) every `every_s`, then verl's marker `latest_checkpointed_iteration.txt` (written
last, atomically, as verl does), and deletes the oldest checkpoints beyond `keep` (verl's
`max_ckpt_to_keep`). With `--seen`, a checkpoint is deleted only once follow has recorded it as seen,
so a test never depends on how fast follow looks: without it a checkpoint that lives shorter than
follow's poll could pass unseen. With `--after-shard RUN` each checkpoint waits for a finished shard
of the one before (one follow batch each). Writes ROOT/trainer.done at the end."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

MARKER = "latest_checkpointed_iteration.txt"


def write_checkpoint(root: Path, step: int, world_size: int = 1) -> Path:
    """A tiny checkpoint in verl's FSDP layout; the scripted engine loads no weights."""
    actor = root / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True, exist_ok=True)
    for rank in range(world_size):
        (actor / f"model_world_size_{world_size}_rank_{rank}.pt").write_bytes(os.urandom(256))
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world_size}))
    (actor / "huggingface" / "config.json").write_text(json.dumps({"model_type": "llama", "step": step}))
    (actor / "huggingface" / "tokenizer_config.json").write_text("{}")
    tmp = root / f".{MARKER}.tmp"
    tmp.write_text(str(step))
    tmp.rename(root / MARKER)
    return actor


def seen_steps(seen: Path | None) -> set[int]:
    if seen is None or not seen.is_file():
        return set()
    out = set()
    for line in seen.read_text().splitlines():
        try:
            out.add(int(json.loads(line)["step"]))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def delete_beyond(root: Path, keep: int, seen: Path | None) -> None:
    steps = sorted(int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*"))
    for step in steps[:max(0, len(steps) - keep)]:
        while seen is not None and step not in seen_steps(seen):
            time.sleep(0.2)
        shutil.rmtree(root / f"global_step_{step}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--steps", type=int, nargs="+", required=True)
    parser.add_argument("--every-s", type=float, default=4.0)
    parser.add_argument("--keep", type=int, default=2)
    parser.add_argument("--seen", type=Path)
    parser.add_argument("--after-shard", type=Path,
                        help="a run directory: each checkpoint after the first is written once a shard of the "
                             "previous one is finished there (one follow batch per checkpoint)")
    args = parser.parse_args()
    args.root.mkdir(parents=True, exist_ok=True)
    for i, step in enumerate(args.steps):
        while args.after_shard is not None and i and not list((args.after_shard / "shards").glob(
                f"policy-step{args.steps[i - 1]}__*.jsonl")):
            time.sleep(0.2)
        write_checkpoint(args.root, step)
        delete_beyond(args.root, args.keep, args.seen)
        time.sleep(args.every_s)
    (args.root / "trainer.done").write_text("")


if __name__ == "__main__":
    main()
