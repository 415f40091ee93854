"""Episodes per second with a zero-latency scripted engine: handoff's runner vs tau2's run_tasks.

Both runners run the same episodes (the first --tasks tasks of airline and of retail) with the same
scripted agent and user (bench/scripted.py: handoff's agent and user simulator over the sweep's
scripted engine, in-process, zero latency), and must give every episode the same reward.

- tau2: `tau2.run.run_tasks(domain, tasks, agent, user, max_concurrency=N)`, its thread pool, a
  fresh environment from db.json per episode and tau2's evaluator.
- handoff: `handoff.agent.episode.run_episode` in --processes worker processes (spawned, one GIL
  each) with --threads concurrent episodes per process, environments from
  `handoff.fasteval.make_environment` and `handoff.fasteval.evaluate_simulation`.

Wall-clock seconds from the first episode to the last, after each runner has warmed up (imports,
tokenizer, database snapshot, one episode per domain): startup is reported separately. CPU seconds
per episode (all processes) are reported too: unlike wall-clock they do not depend on what else
runs on the machine.

    python -m bench.bench_throughput [--tasks 20] [--processes 2] [--threads 8] [--tau2-concurrency 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from functools import cache

import handoff  # noqa: F401
from bench.common import report

DOMAINS = ("airline", "retail")
SEED = 300


@cache
def _tasks(domain: str) -> dict:
    from tau2.registry import registry

    return {t.id: t for t in registry.get_tasks_loader(domain)(None)}


def _warm(_: int = 0) -> int:
    """Worker start-up: imports, tokenizer, scripted engines and database snapshots."""
    from bench import scripted
    from handoff.fasteval import make_environment

    for name in ("chat", "agent", "user"):
        scripted.shared(name)
    for domain in DOMAINS:
        make_environment(domain)
        _episode((domain, next(iter(_tasks(domain)))))  # first agent: vLLM's tool parser import
    time.sleep(0.5)  # so that each warm-up lands in a different worker process
    return os.getpid()


def _episode(item: tuple[str, str]) -> tuple[str, str, float]:
    from bench import scripted
    from handoff.agent.episode import run_episode
    from handoff.fasteval import evaluate_simulation, make_environment

    domain, task_id = item
    task = _tasks(domain)[task_id]
    result = run_episode(
        domain, task, scripted.shared("agent"), scripted.shared("chat"), scripted.make_user(task),
        scripted.settings(), SEED, evaluate=evaluate_simulation, environment=make_environment(domain),
    )
    return domain, task_id, result.simulation.reward_info.reward


def _batch(items: list, threads: int) -> tuple[list, float]:
    """The items' results and the CPU seconds this process spent on them."""
    cpu = time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(_episode, items))
    return results, time.process_time() - cpu


def run_handoff(items: list, processes: int, threads: int) -> dict:
    ctx = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with ProcessPoolExecutor(processes, mp_context=ctx) as pool:
        pids = set(pool.map(_warm, range(processes)))
        warm_s = time.perf_counter() - started
        begin = time.perf_counter()
        chunks = [items[i::processes] for i in range(processes)]
        batches = list(pool.map(_batch, chunks, [threads] * processes))
        wall = time.perf_counter() - begin
    results = [r for batch, _ in batches for r in batch]
    cpu = sum(c for _, c in batches)
    return {"wall_s": wall, "cpu_s": cpu, "startup_s": warm_s, "worker_processes": len(pids), "results": results}


def run_tau2(items: list, concurrency: int) -> dict:
    import rich.console
    from tau2.run import run_tasks
    from tau2.utils.display import ConsoleDisplay

    from bench import scripted

    ConsoleDisplay.console = rich.console.Console(file=open(os.devnull, "w"))
    scripted.register_in_tau2()
    started = time.perf_counter()
    _warm()
    warm_s = time.perf_counter() - started
    results, wall, cpu = [], 0.0, time.process_time()
    for domain in DOMAINS:
        tasks = [_tasks(domain)[tid] for d, tid in items if d == domain]
        begin = time.perf_counter()
        out = run_tasks(domain, tasks, scripted.AGENT, scripted.USER, llm_args_agent={}, llm_args_user={},
                        max_steps=scripted.settings().max_steps, max_errors=scripted.settings().max_errors,
                        max_concurrency=concurrency, console_display=False, log_level="ERROR", seed=SEED)
        wall += time.perf_counter() - begin
        results += [(domain, s.task_id, s.reward_info.reward) for s in out.simulations]
    return {"wall_s": wall, "cpu_s": time.process_time() - cpu, "startup_s": warm_s, "results": results}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="tasks per domain")
    parser.add_argument("--processes", type=int, default=os.cpu_count())
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--tau2-concurrency", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    items = [(d, tid) for d in DOMAINS for tid in list(_tasks(d))[: args.tasks]]
    tau2 = run_tau2(items, args.tau2_concurrency)
    ours = run_handoff(items, args.processes, args.threads)
    if sorted(tau2.pop("results")) != sorted(ours.pop("results")):
        raise AssertionError("the two runners gave different rewards")
    n = len(items)
    result = {
        "target": ">= 3x episodes/s",
        "episodes": n,
        "tau2_run_tasks": {**tau2, "max_concurrency": args.tau2_concurrency, "episodes_per_s": n / tau2["wall_s"]},
        "handoff": {**ours, "threads": args.threads, "episodes_per_s": n / ours["wall_s"]},
        "ratio_handoff_over_tau2": round(tau2["wall_s"] / ours["wall_s"], 2),
        "cpu_s_per_episode": {"tau2": tau2["cpu_s"] / n, "handoff": ours["cpu_s"] / n},
        "load_average_1m_at_end": os.getloadavg()[0],
    }
    report("bench_throughput", result, args.out)
    return result


if __name__ == "__main__":
    main()
