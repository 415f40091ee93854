"""`handoff score PATH [--domain D]`: score a tau2 SimulationRun JSON or results JSON with the rules.

Prints one JSON object per simulation (task_id, transferred, label, violations, format_errors,
tau2_reward, reward, ...). PATH may be a tau2 results file (its domain is read from the file) or a
single SimulationRun (then --domain is required).
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("score", help="score a tau2 SimulationRun JSON or results JSON with the rules",
                                   description=__doc__)
    parser.add_argument("path", help="tau2 results JSON or SimulationRun JSON")
    parser.add_argument("--domain", help="tau2 domain (required for a single SimulationRun)")
    parser.add_argument("--reward", default="default", help="reward weights: conf/reward/<name>.yaml or a YAML path")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.rules import (
        DomainTools,
        RewardWeights,
        TaskContext,
        load_trajectories,
        score_episode,
    )

    # unreadable or invalid input, an unknown domain: HandoffErrors with a clear message
    weights = RewardWeights.load(args.reward)
    trajectories = load_trajectories(args.path, args.domain)
    for domain in {t.domain for t in trajectories}:
        DomainTools.for_domain(domain)
    scores = []
    for traj in trajectories:
        task, label = _task_and_label(traj.domain, traj.task_id)
        ctx = TaskContext.for_task(traj.domain, task)
        scores.append(score_episode(traj, label, ctx, weights))
    for score in scores:  # nothing is printed unless every simulation scored
        print(score.model_dump_json())
    return 0


def _task_and_label(domain: str, task_id: str):
    from handoff.cli import UsageError
    from handoff.tasks import get_task
    from handoff.tasks.labels import ManifestError, label_for

    try:
        return get_task(domain, task_id), label_for(domain, task_id)
    except LookupError as exc:
        raise UsageError(f"unknown task {task_id!r} in domain {domain!r}") from exc
    except (ValueError, OSError, ManifestError) as exc:  # missing or invalid task / label files
        raise UsageError(f"cannot label task {task_id!r} in domain {domain!r}: {exc}") from exc
