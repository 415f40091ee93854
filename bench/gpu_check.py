"""The GPU check for a lent device: the default slice as a real sweep with engine=gpu at
tensor_parallel_size 1 and at the GPU count, through the product's own path (`run_sweep`: vLLM's
check of the settings, placement, the multiprocessing executor). Prints one JSON object with, per
TP, episodes/s and engine tokens/s (agent + user tokens generated, over the episode phase: first
episode start to last episode end, from tau2's own timestamps; the sweep's wall, engine loads
included, is given too), and exits non-zero when a sweep failed or any shard failed.

    python -m bench.gpu_check [--gpus N] [--model DIR] [--out FILE]   (bench/gpu_check.sh checks the machine first)

TP = N needs a model whose attention heads N divides: the default SmolLM2-135M has 9 (vLLM's own
check refuses TP=2, 4 or 8 before any engine starts, naming engine.tensor_parallel_size); pass
`--model` a checkpoint such as Qwen2.5-0.5B-Instruct (14 heads: TP 2) or a Llama 3 (32: TP 2-8).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import handoff  # noqa: F401
from bench.common import report
from handoff.records import read_shard
from handoff.rundir import RunPaths


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def overrides(run_dir: Path, tp: int, gpus: int, model: str | None) -> list[str]:
    out = [f"run_dir={run_dir}", f"name=gpu-check-tp{tp}", "engine=gpu", f"engine.tensor_parallel_size={tp}",
           f"engine.replicas={gpus // tp}", f"cluster.num_gpus={gpus}", "logger.mode=disabled"]
    if model:  # the agent and the user simulator on one engine set, as in the default sweep
        out += [f"model.smollm2.path={model}", f"user.model.path={model}"]
    return out


def one_sweep(run_dir: Path, tp: int, gpus: int, model: str | None) -> dict:
    from handoff.sweep.run import compose, run_sweep

    args = overrides(run_dir, tp, gpus, model)
    started = time.monotonic()
    _, summary = run_sweep(compose(args), args, progress=False)
    wall = time.monotonic() - started
    records = [r for p in sorted(RunPaths(run_dir).shards_dir.glob("*.jsonl")) for r in read_shard(p)]
    times = [(datetime.fromisoformat(r.simulation["start_time"]), datetime.fromisoformat(r.simulation["end_time"]))
             for r in records]
    phase = (max(e for _, e in times) - min(s for s, _ in times)).total_seconds() if times else 0.0
    tokens = sum(r.usage.completion_tokens + r.usage.user_completion_tokens for r in records)
    return {"tensor_parallel_size": tp, "replicas": gpus // tp, "episodes": len(records),
            "episodes_total": summary.episodes_total, "failed_shards": summary.shards_failed,
            "sweep_wall_s": round(wall, 1), "episode_phase_s": round(phase, 1),
            "episodes_per_s": round(len(records) / phase, 3) if phase else 0.0,
            "engine_tokens_per_s": round(tokens / phase, 1) if phase else 0.0, "generated_tokens": tokens}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all CUDA devices)")
    parser.add_argument("--model", default=None, help="an HF checkpoint directory (default: the embedded SmolLM2)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    gpus = args.gpus or gpu_count()
    if gpus < 1:
        print("gpu_check: no CUDA device", file=sys.stderr)
        return 1
    results, failed = [], False
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for tp in sorted({1, gpus}):
            try:
                result = one_sweep(Path(tmp) / f"tp{tp}", tp, gpus, args.model)
            except Exception as exc:  # noqa: BLE001 - reported in the JSON, and the exit status
                result = {"tensor_parallel_size": tp, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            failed |= bool("error" in result or result["failed_shards"] or result["episodes"] < result["episodes_total"])
            results.append(result)
    report("gpu_check", {"gpus": gpus, "ok": not failed, "runs": results}, args.out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
