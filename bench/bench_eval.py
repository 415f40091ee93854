"""CPU seconds per episode evaluation: handoff.fasteval vs tau2's evaluate_simulation.

Episodes are replays of real airline and retail tasks: the gold actions (reward 1) and, for tasks
with a write, the same replay with a wrong write (an altered argument, a repeated write, a dropped
write). Both evaluators see the same episodes in the same process, alternately; every RewardInfo
must be identical. CPU time is `time.process_time()`. fasteval's one-time cost per process (parsing
the database once) is reported separately from the per-episode cost.

    python -m bench.bench_eval [--tasks N] [--out results.json]
"""

from __future__ import annotations

import argparse
import time

import handoff  # noqa: F401
from bench.common import report


def _episodes(domain: str, n_tasks: int):
    from tau2.registry import registry

    from handoff.fasteval.replay import replay, wrong_write_variants

    for task in registry.get_tasks_loader(domain)(None)[:n_tasks]:
        yield task, replay(task, domain)
        for _, actions in wrong_write_variants(task, domain):
            yield task, replay(task, domain, actions)


def _cpu(fn) -> tuple[float, object]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def compare_evaluators(domain: str, episodes: list) -> tuple[int, float, float]:
    """(episodes, tau2's CPU s, fasteval's CPU s) over `episodes` ((task, SimulationRun) pairs), each
    evaluated by both, alternately; AssertionError unless every RewardInfo is identical."""
    from tau2.evaluator.evaluator import EvaluationType
    from tau2.evaluator.evaluator import evaluate_simulation as tau2_evaluate

    from handoff.fasteval import evaluate_simulation

    tau2_s = fast_s = 0.0
    for task, sim in episodes:
        t, slow = _cpu(lambda: tau2_evaluate(sim, task, EvaluationType.ALL, False, domain))
        f, fast = _cpu(lambda: evaluate_simulation(sim, task, domain))
        if fast.model_dump(mode="json") != slow.model_dump(mode="json"):
            raise AssertionError(f"{domain} task {task.id}: fasteval differs from tau2")
        tau2_s += t
        fast_s += f
    return len(episodes), tau2_s, fast_s


def bench_domain(domain: str, n_tasks: int) -> dict:
    from handoff.fasteval.environments import _spec

    setup_s, _ = _cpu(_spec(domain).snapshot)
    n, tau2_s, fast_s = compare_evaluators(domain, list(_episodes(domain, n_tasks)))
    return {
        "episodes": n,
        "tau2_cpu_s_per_episode": round(tau2_s / n, 4),
        "fasteval_cpu_s_per_episode": round(fast_s / n, 4),
        "fasteval_one_time_setup_cpu_s": round(setup_s, 3),
        "ratio_tau2_over_fasteval": round(tau2_s / fast_s, 1),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="tasks per domain (default 20)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = {"target": ">= 5x less CPU", "domains": {}}
    for domain in ("airline", "retail"):
        result["domains"][domain] = bench_domain(domain, args.tasks)
    report("bench_eval", result, args.out)
    return result


if __name__ == "__main__":
    main()
