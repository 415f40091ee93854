"""Engine tokens/s inside a sweep vs the same engine standalone on the same prompts (vLLM-CPU).

The embedded SmolLM2-135M-Instruct on vLLM's CPU build plays agent and user (one engine, as in the
default sweep where the user shares the agent's checkpoint). Two phases on identical engines:

1. episodes: --tasks airline and retail tasks run concurrently (--threads) through
   `handoff.agent.episode.run_episode` (the code each sweep worker runs per episode, with
   fasteval's environments and evaluator); every engine request is recorded.
2. standalone: a fresh engine with the same settings gets exactly the recorded requests (prompt ids
   and sampling), all submitted at once, as a batch-throughput reference.

Generated tokens/s of phase 1 over phase 2 is how busy the episode machinery keeps the engine
(target >= 90%). The prefix-cache hit rate of each phase is printed too.

    python -m bench.bench_engine [--tasks 3] [--threads 16]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import handoff  # noqa: F401
from bench.common import report
from bench.scripted import model_path

DOMAINS = ("airline", "retail")


class Recording:
    """An Engine that forwards to another and records every request."""

    def __init__(self, engine):
        self.engine, self.requests, self._lock = engine, [], threading.Lock()

    def generate(self, prompt_ids, sampling, session_id=None):
        generation = self.engine.generate(prompt_ids, sampling, session_id)
        with self._lock:
            self.requests.append((list(prompt_ids), sampling, len(generation.token_ids)))
        return generation


def _settings():
    from handoff.engine.vllm_engine import EngineSettings

    return EngineSettings(model=model_path(), max_model_len=8192, max_num_seqs=32, kv_cache_gib=1)


def episodes_phase(engine, n_tasks: int, threads: int) -> tuple[dict, list]:
    from tau2.registry import registry

    from handoff.agent.episode import EpisodeSettings, run_episode
    from handoff.agent.user import UserSpec, make_user
    from handoff.engine.chat import ChatFormat
    from handoff.fasteval import evaluate_simulation, make_environment

    chat = ChatFormat(model_path(), "hermes")
    recording = Recording(engine)
    settings = EpisodeSettings(max_steps=12, max_errors=4)
    items = [(d, t) for d in DOMAINS for t in registry.get_tasks_loader(d)(None)[:n_tasks]]

    def one(item):
        domain, task = item
        user = make_user(UserSpec(), task, engine=recording, chat=chat, session_id=f"user/{task.id}")
        return run_episode(domain, task, recording, chat, user, settings, seed=0,
                           evaluate=evaluate_simulation, environment=make_environment(domain))

    for domain in DOMAINS:  # warm up: environments, chat template, vLLM's tool parser
        make_environment(domain)
    chat.render([{"role": "user", "content": "warm up"}])
    before = engine.stats()
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(one, items))
    wall = time.perf_counter() - started
    return _phase(engine, before, wall, episodes=len(results)), recording.requests


def standalone_phase(engine, requests: list) -> dict:
    before = engine.stats()
    started = time.perf_counter()
    with ThreadPoolExecutor(max(1, len(requests))) as pool:
        list(pool.map(lambda r: engine.generate(r[0], r[1]), requests))
    wall = time.perf_counter() - started
    return _phase(engine, before, wall, requests=len(requests))


def _phase(engine, before, wall: float, **extra) -> dict:
    after = engine.stats()
    generated = after.generated_tokens - before.generated_tokens
    prompt = after.prompt_tokens - before.prompt_tokens
    cached = after.cached_prompt_tokens - before.cached_prompt_tokens
    return {**extra, "wall_s": round(wall, 2), "generated_tokens": generated, "prompt_tokens": prompt,
            "tokens_per_s": round(generated / wall, 1),
            "prefix_cache_hit_rate": round(cached / prompt, 3) if prompt else 0.0}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3, help="tasks per domain")
    parser.add_argument("--threads", type=int, default=16, help="concurrent episodes")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from handoff.engine.vllm_engine import VLLMEngine

    with VLLMEngine(_settings()) as engine:
        in_sweep, requests = episodes_phase(engine, args.tasks, args.threads)
    with VLLMEngine(_settings()) as engine:
        engine.generate(requests[0][0], requests[0][1])  # warm-up request
        standalone = standalone_phase(engine, requests)
    result = {
        "target": ">= 90% of standalone tokens/s",
        "engine": _settings().model_dump(),
        "episodes": in_sweep,
        "standalone": standalone,
        "ratio_episodes_over_standalone": round(in_sweep["tokens_per_s"] / standalone["tokens_per_s"], 3),
        "load_average_1m_at_end": os.getloadavg()[0],
    }
    report("bench_engine", result, args.out)
    return result


if __name__ == "__main__":
    main()
