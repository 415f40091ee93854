"""Synthetic runs for the reporting tests and the reducer benchmark: a run directory whose shards
hold EpisodeRecords built from real tau2 message objects on real task ids, with a behaviour per
checkpoint (how often it hands off correctly, breaks policy, or produces a format error)."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage
from tau2.data_model.simulation import RewardInfo, SimulationRun, TerminationReason
from tau2.data_model.tasks import RewardType

from handoff.records import EpisodeRecord, Usage, write_shard
from handoff.rules.events import FormatEvent, FormatKind
from handoff.rundir import Manifest, RunPaths
from handoff.tasks.labels import load_labels

WRITE_TOOL = {"airline": ("cancel_reservation", {"reservation_id": "ZZZZZZ"}),
              "retail": ("cancel_pending_order", {"order_id": "#W0000000", "reason": "no longer needed"}),
              "telecom": ("refuel_data", {"customer_id": "C0000", "line_id": "L0000", "gb_amount": 2.0})}


@dataclass(frozen=True)
class Behavior:
    """Probabilities that one episode of a checkpoint decides the hand-off right, writes without
    confirmation, makes a format error (unknown tool) and succeeds at the task."""

    correct_handoff: float = 0.8
    violation: float = 0.1
    format_error: float = 0.1
    success: float = 0.5
    transfer: bool | None = None  # True / False: always / never transfer, whatever the label


@lru_cache(maxsize=1)
def _labels() -> dict:
    return load_labels()


def _rng(*parts) -> random.Random:
    return random.Random(hashlib.sha256(json.dumps(parts).encode()).digest())


def _call(name: str, arguments: dict, index: int) -> AssistantMessage:
    return AssistantMessage(role="assistant", turn_idx=index,
                            tool_calls=[ToolCall(id=f"call_{index}", name=name, arguments=arguments)])


def _tool_result(content: str, index: int, error: bool = False) -> ToolMessage:
    return ToolMessage(id=f"call_{index - 1}", role="tool", content=content, requestor="assistant",
                       error=error, turn_idx=index)


def _messages(domain: str, transfer: bool, violate: bool, format_error: bool):
    """The conversation, and the format events that index into it."""
    msgs, events = [AssistantMessage(role="assistant", content="Hi! How can I help you?", turn_idx=0),
                    UserMessage(role="user", content="I need help with my booking.", turn_idx=1)], []
    if format_error:
        events.append(FormatEvent(kind=FormatKind.UNKNOWN_TOOL, turn=len(msgs), detail="lookup_everything"))
        msgs.append(_call("lookup_everything", {}, len(msgs)))
        msgs.append(_tool_result("Error: Tool 'lookup_everything' not found.", len(msgs), error=True))
    if violate:
        name, args = WRITE_TOOL[domain]
        msgs.append(_call(name, args, len(msgs)))
        msgs.append(_tool_result("Error: not found", len(msgs), error=True))
    if transfer:
        msgs.append(_call("transfer_to_human_agents", {"summary": "user needs a human"}, len(msgs)))
        msgs.append(_tool_result("Transfer successful", len(msgs)))
        msgs.append(AssistantMessage(role="assistant", turn_idx=len(msgs),
                                     content="YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."))
        return msgs, events, TerminationReason.AGENT_STOP
    msgs.append(AssistantMessage(role="assistant", content="Your request is handled.", turn_idx=len(msgs)))
    msgs.append(UserMessage(role="user", content="Thanks! ###STOP###", turn_idx=len(msgs)))
    return msgs, events, TerminationReason.USER_STOP


@lru_cache(maxsize=None)
def _template(domain: str, transfer: bool, violate: bool, format_error: bool) -> tuple[dict, tuple, int]:
    """A SimulationRun (as JSON) of one kind of conversation, its format events and agent turns;
    built once per kind from tau2's own models, so that 100,000 episodes are quick to make."""
    msgs, events, termination = _messages(domain, transfer, violate, format_error)
    sim = SimulationRun(
        id="", task_id="", timestamp="20260101_000000", start_time="2026-01-01T00:00:00",
        end_time="2026-01-01T00:00:10", duration=10.0, termination_reason=termination, messages=msgs,
        reward_info=RewardInfo(reward=0.0, reward_basis=[RewardType.DB, RewardType.COMMUNICATE]),
    )
    return sim.model_dump(mode="json"), tuple(events), sum(isinstance(m, AssistantMessage) for m in msgs)


def episode(model: str, step: int, domain: str, task_id: str, trial: int, behavior: Behavior,
            seed: int = 0) -> EpisodeRecord:
    rng = _rng(seed, model, domain, task_id, trial)
    should = _labels()[(domain, task_id)].should_transfer
    transfer = should if rng.random() < behavior.correct_handoff else not should
    transfer = transfer if behavior.transfer is None else behavior.transfer
    violate, format_error = rng.random() < behavior.violation, rng.random() < behavior.format_error
    reward = float(rng.random() < behavior.success and not violate)
    template, events, n_turns = _template(domain, transfer, violate, format_error)
    sim = {**template, "id": f"{model}-{domain}-{task_id}-{trial}", "task_id": task_id, "trial": trial,
           "seed": seed, "reward_info": {**template["reward_info"], "reward": reward}}
    return EpisodeRecord(model=model, step=step, domain=domain, task_id=task_id, trial=trial, seed=seed,
                         simulation=sim, format_events=list(events),
                         usage=Usage(prompt_tokens=500 * n_turns, completion_tokens=40 * n_turns,
                                     agent_turns=n_turns))


def write_run(run_dir: Path, checkpoints: dict[str, tuple[int, Behavior]], tasks: dict[str, list[str]],
              trials: int = 1, shard_size: int = 50, name: str = "synthetic") -> Path:
    """A run directory with manifest.json (run_uuid, checkpoints, shard plan) and shards/ for every
    (checkpoint, domain, task, trial)."""
    run = RunPaths(run_dir)
    config = {"name": name, "trials": trials, "seed": 0, "episode": {"max_steps": 30, "max_errors": 4},
              "model": {m: {"name": m, "step": step} for m, (step, _) in checkpoints.items()},
              "domain": {d: {"name": d} for d in tasks}}
    plan = []
    for model, (step, behavior) in checkpoints.items():
        for domain, task_ids in tasks.items():
            records = [episode(model, step, domain, t, k, behavior) for t in task_ids for k in range(trials)]
            for start in range(0, len(records), shard_size):
                shard_id = f"{model}-{domain}-{start // shard_size:05d}"
                write_shard(run.shard_path(shard_id), shard_id, records[start:start + shard_size])
                plan.append({"id": shard_id, "model": model, "domain": domain})
    run.write_manifest(Manifest(name=name, config=config, shards=plan,
                                checkpoints=[{"name": m, "step": step} for m, (step, _) in checkpoints.items()]))
    return run.root


def sample_tasks(per_rule: int, domains: tuple[str, ...] = ("airline", "retail")) -> dict[str, list[str]]:
    """Up to `per_rule` task ids of each label rule per domain (first in label-file order)."""
    chosen: dict[str, list[str]] = {d: [] for d in domains}
    taken: dict[tuple[str, str], int] = {}
    for (domain, task_id), label in _labels().items():
        key = (domain, label.rule)
        if domain in chosen and taken.get(key, 0) < per_rule:
            chosen[domain].append(task_id)
            taken[key] = taken.get(key, 0) + 1
    return chosen


def add_shard(run_dir: Path, shard_id: str, records: list[EpisodeRecord]) -> Path:
    """Write a shard and add it to the run's plan (a resume that planned more, e.g. a new trial):
    the reducer reads only the planned shards (handoff.rundir.RunDir.run_shards)."""
    run = RunPaths(run_dir)
    manifest = run.read_manifest()
    if shard_id not in {s["id"] for s in manifest.shards}:
        manifest.shards.append({"id": shard_id, "model": records[0].model, "domain": records[0].domain})
        run.write_manifest(manifest)
    write_shard(run.shard_path(shard_id), shard_id, records)
    return run.shard_path(shard_id)


def write_records(run_dir: Path, shards: dict[str, list[EpisodeRecord]], name: str, config: dict | None = None) -> Path:
    """A run directory holding the given records, shard by shard (e.g. real episodes of run_episode)."""
    run = RunPaths(run_dir)
    run.write_manifest(Manifest(name=name, config={"name": name, **(config or {})}))
    for shard_id, records in shards.items():
        write_shard(run.shard_path(shard_id), shard_id, records)
    return run.root
