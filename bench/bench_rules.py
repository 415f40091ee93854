"""Rules throughput: episodes scored per CPU second, on one core (target: 10,000 in < 10 s).

Episodes are replays of real airline and retail tasks (handoff.fasteval.replay: the gold actions
and wrong-write variants, every tool result from a real tau2 environment), varied so that every
rule and format kind has work to do: a user confirmation before each write in half of them, a
transfer, Hermes markup left in text, an unknown tool. They are stored as SimulationRun JSON dicts,
as EpisodeRecords hold them, and cycled up to --episodes. Timed (time.process_time, one thread):

- load: Trajectory.from_simulation on the dict (normalization);
- score: score_episode (transferred, all violation rules, format errors, reward);
- metrics: compute_metrics over all scores (t and clustered Wilson intervals over tasks; a bootstrap
  of 1,000 resamples before issue 46).

    python -m bench.bench_rules [--episodes 10000] [--tasks 20] [--out results.json]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one core: numpy's bootstrap must not fan out

import argparse
import time

import handoff  # noqa: F401
from bench.common import report

TARGET_S_PER_10K = 10.0


def _decorate(sim, index: int):
    """Vary a replay: confirmations before writes (even index), a transfer (every 4th), Hermes
    markup in text (every 6th), a call to an unknown tool (every 7th)."""
    from tau2.data_model.message import (
        AssistantMessage,
        ToolCall,
        ToolMessage,
        UserMessage,
    )

    messages = []
    for msg in sim.messages:
        if index % 2 == 0 and isinstance(msg, AssistantMessage) and msg.tool_calls:
            messages.append(UserMessage(role="user", content="Yes, please go ahead."))
        messages.append(msg)
    extra = []
    if index % 7 == 0:
        extra += [AssistantMessage(role="assistant", tool_calls=[ToolCall(id="u", name="refund_all", arguments={})]),
                  ToolMessage(id="u", role="tool", content="Error: Tool 'refund_all' not found.", error=True)]
    if index % 6 == 0:
        extra.append(AssistantMessage(role="assistant", content='<tool_call>{"name": "get_user_details"</tool_call>'))
    if index % 4 == 0:
        extra += [AssistantMessage(role="assistant", tool_calls=[ToolCall(id="t", name="transfer_to_human_agents", arguments={"summary": "s"})]),
                  ToolMessage(id="t", role="tool", content="Transfer successful"),
                  AssistantMessage(role="assistant", content="YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.")]
    messages[-1:-1] = extra
    return sim.model_copy(update={"messages": messages, "trial": index}).model_dump(mode="json")


def _pool(n_tasks: int) -> list[tuple[str, str, dict]]:
    from tau2.registry import registry

    from handoff.fasteval.replay import replay, wrong_write_variants

    pool = []
    for domain in ("airline", "retail"):
        for task in registry.get_tasks_loader(domain)(None)[:n_tasks]:
            sims = [replay(task, domain)] + [replay(task, domain, a) for _, a in wrong_write_variants(task, domain)]
            pool += [(domain, task.id, _decorate(sim, len(pool) + i)) for i, sim in enumerate(sims)]
    return pool


def _cpu(fn):
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=20, help="tasks per domain in the replay pool")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from handoff.rules import RewardWeights, TaskContext, Trajectory, score_episode
    from handoff.rules.metrics import compute_metrics
    from handoff.tasks import get_task
    from handoff.tasks.labels import label_for

    pool = _pool(args.tasks)
    episodes = [pool[i % len(pool)] for i in range(args.episodes)]
    keys = {(d, t) for d, t, _ in pool}
    contexts = {k: TaskContext.for_task(k[0], get_task(*k)) for k in keys}  # cached per task, as the reducer does
    labels = {k: label_for(*k) for k in keys}
    weights = RewardWeights.load()

    load_s, trajectories = _cpu(lambda: [Trajectory.from_simulation(sim, d) for d, _, sim in episodes])
    score_s, scores = _cpu(lambda: [score_episode(tr, labels[d, t], contexts[d, t], weights)
                                    for tr, (d, t, _) in zip(trajectories, episodes)])
    metrics_s, metrics = _cpu(lambda: compute_metrics(scores))
    total = load_s + score_s + metrics_s
    n = len(episodes)
    result = {
        "episodes": n,
        "distinct_replays": len(pool),
        "mean_messages": round(sum(len(tr.messages) for tr in trajectories) / n, 1),
        "cpu_s": {"load": round(load_s, 3), "score": round(score_s, 3), "metrics": round(metrics_s, 3),
                  "total": round(total, 3)},
        "episodes_per_cpu_s": round(n / total),
        "cpu_s_per_10k": round(total * 10_000 / n, 2),
        "target_cpu_s_per_10k": TARGET_S_PER_10K,
        "meets_target": total * 10_000 / n < TARGET_S_PER_10K,
        "work_done": {
            "violations": sum(len(s.violations) for s in scores),
            "format_errors": sum(len(s.format_errors) for s in scores),
            "transferred": sum(s.transferred for s in scores),
            "handoff_f1": metrics.handoff.f1.value,
        },
    }
    report("bench_rules", result, args.out)
    return result


if __name__ == "__main__":
    main()
