"""Behavioural proof of every derived task with tau2's own evaluator (`evaluate_simulation`, ALL).

Three scripted agents per task, each a SimulationRun built from real tool results
(handoff.fasteval.replay) and scored by tau2; what each must score is its kind's (`Kind.expected`,
handoff.tasks.authoring.kinds):

- `gold`: the task's reference actions, then its communicate_info: must score 1;
- `nothing`: no tool call at all: must score 0 on explicit_request and out_of_scope;
- `transfer_only`: one transfer_to_human_agents call: must score 1 on explicit_request and out_of_scope
  and 0 on hard_negative (the gold changes the database, so a transfer alone fails tau2's DB check).

The scores are recorded in data/manifests/behaviour_v1.json, keyed by the sha256 of each task's
content, by `handoff labels build` (only tasks whose content changed are re-run); `handoff labels
check` verifies the record and re-runs a sample.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from handoff.tasks.upstream import TRANSFER_TOOL

AGENTS = ("gold", "nothing", "transfer_only")
FINAL_WORDS = {
    "nothing": "I am sorry, I cannot help with that.",
    "transfer_only": "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.",
}
DESCRIPTIONS = {
    "gold": "the task's reference actions, then its communicate_info",
    "nothing": f"no tool call; says {FINAL_WORDS['nothing']!r}",
    "transfer_only": f"one transfer_to_human_agents call; says {FINAL_WORDS['transfer_only']!r}",
}


def task_sha256(task) -> str:
    """sha256 of a task's content (canonical JSON of the tau2 Task)."""
    doc = task.model_dump(mode="json", exclude_none=True)
    return hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _transfer_action():
    from tau2.data_model.tasks import Action

    return Action(action_id="transfer", name=TRANSFER_TOOL, arguments={"summary": "The user needs a human agent."})


def rewards(domain: str, task, agents: tuple[str, ...] = AGENTS, fast: bool = False) -> dict[str, float]:
    """tau2's reward (evaluate_simulation, ALL) for each scripted agent on the task. `fast` evaluates on
    handoff.fasteval's copy-on-write environment of the domain (tau2's own Environment and tools over a
    shared database snapshot, registered in tau2's registry) instead of reloading db.json each time."""
    from handoff.fasteval.environments import fast_domain
    from handoff.fasteval.replay import replay, tau2_reward_info

    evaluated = fast_domain(domain) if fast else domain
    return {name: tau2_reward_info(_simulation(replay, task, domain, name), task, evaluated).reward
            for name in agents}


def _simulation(replay, task, domain: str, agent: str):
    """The agent's SimulationRun: the gold replay, or a replay whose last message is the agent's own
    (the scripted agents never state the task's communicate_info)."""
    from tau2.data_model.message import AssistantMessage

    actions = {"gold": None, "nothing": [], "transfer_only": [_transfer_action()]}[agent]
    simulation = replay(task, domain, actions)
    if agent != "gold":
        last = AssistantMessage(role="assistant", content=FINAL_WORDS[agent])
        simulation = simulation.model_copy(update={"messages": [*simulation.messages[:-1], last]})
    return simulation


def _run_chunk(items: list[tuple[str, dict, tuple]], fast: bool) -> list[dict[str, float]]:
    from tau2.data_model.tasks import (
        Task,  # the worker imported handoff (this module) first
    )

    return [rewards(domain, Task.model_validate(doc), agents, fast) for domain, doc, agents in items]


def run_parallel(items: list[tuple], workers: int | None = None, fast: bool = False) -> list[dict[str, float]]:
    """rewards() for each (domain, task, agents), in `workers` spawned processes (default: up to 2)."""
    if not items:
        return []
    workers = max(1, min(workers or min(2, os.cpu_count() or 1), len(items)))
    docs = [(d, t.model_dump(mode="json", exclude_none=True), tuple(a)) for d, t, a in items]
    if workers == 1:
        return _run_chunk(docs, fast)
    chunks = [docs[i::workers] for i in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_run_chunk, chunks, [fast] * workers))
    out: list = [None] * len(docs)
    for i, chunk in enumerate(results):
        out[i::workers] = chunk
    return out


def failures(expected: dict[str, float], scores: dict[str, float]) -> list[str]:
    """The agents whose score differs from what is expected of them (a kind's `expected`)."""
    return [f"{agent} scored {scores[agent]}, expected {want}" for agent, want in expected.items()
            if scores.get(agent) != want]


def sample(tasks_by_kind: dict[tuple[str, str], list], per_kind: int = 1) -> list[tuple[str, object]]:
    """A deterministic handful: the first `per_kind` tasks of each (domain, kind), by content hash."""
    return [(d, t) for (d, _), tasks in sorted(tasks_by_kind.items())
            for t in sorted(tasks, key=task_sha256)[:per_kind]]
