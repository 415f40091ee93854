"""CPU milliseconds per telecom episode evaluation: handoff.fasteval vs tau2's evaluate_simulation.

Episodes are replays of telecom's base tasks (handoff.fasteval.replay, each from the task's initial
state): the gold actions (reward 1) and the gold without its last user action (the user's device is
left wrong: reward 0 by ENV_ASSERTION). Both evaluators see the same episodes in the same process,
alternately; every RewardInfo must be identical. fasteval calls tau2's evaluator for telecom (its
databases are small), so the two should cost the same. CPU time is `time.process_time()`.

    python -m bench.bench_eval_telecom [--tasks N] [--out results.json]
"""

from __future__ import annotations

import argparse

import handoff  # noqa: F401
from bench.bench_eval import compare_evaluators
from bench.common import report


def _episodes(n_tasks: int):
    from handoff.fasteval.replay import replay
    from handoff.tasks.upstream import upstream_tasks

    for task in upstream_tasks("telecom")[:n_tasks]:
        yield task, replay(task, "telecom")
        gold = list(task.evaluation_criteria.actions or [])
        users = [i for i, a in enumerate(gold) if a.requestor == "user"]
        if users:
            yield task, replay(task, "telecom", gold[:users[-1]] + gold[users[-1] + 1:])


def bench_telecom(n_tasks: int) -> dict:
    n, tau2_s, fast_s = compare_evaluators("telecom", list(_episodes(n_tasks)))
    return {
        "episodes": n,
        "tau2_cpu_ms_per_episode": round(1000 * tau2_s / n, 2),
        "fasteval_cpu_ms_per_episode": round(1000 * fast_s / n, 2),
        "ratio_tau2_over_fasteval": round(tau2_s / fast_s, 2),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=114, help="base tasks (default all 114)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = {"target": "fasteval no slower than tau2", "domains": {"telecom": bench_telecom(args.tasks)}}
    report("bench_eval_telecom", result, args.out)
    return result


if __name__ == "__main__":
    main()
