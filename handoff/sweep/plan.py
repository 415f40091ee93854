"""The shard plan: checkpoint x domain x task slice x trial, with deterministic per-episode seeds.

The plan is a pure function of the validated config and the task set, so a resumed sweep can
recompute it and check that it is the one recorded in the manifest.
"""

from __future__ import annotations

import hashlib
import re

from pydantic import BaseModel

from handoff.sweep.config import Checkpoint, SweepConfig


class Episode(BaseModel):
    model: str
    step: int
    domain: str
    task_id: str
    trial: int
    seed: int

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.model, self.domain, self.task_id, self.trial)


class Shard(BaseModel):
    id: str
    model: str
    domain: str
    trial: int
    episodes: list[Episode]


def episode_seed(sweep_seed: int, domain: str, task_id: str, trial: int) -> int:
    """A 31-bit seed from sha256 (stable across processes, unlike the salted hash()). The
    checkpoint is left out so that every checkpoint meets the same user randomness."""
    digest = hashlib.sha256(f"{sweep_seed}/{domain}/{task_id}/{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def uncountable_metric(cfg: SweepConfig, ids: dict[str, list[str]]) -> str | None:
    """Why an adaptive sweep's metric can count none of the planned episodes (recall over tasks none
    of which should transfer: every round would be spent and nothing decided), else None."""
    from handoff.rules.sequential import COUNTED_BY_LABEL
    from handoff.tasks.labels import load_labels

    counts = COUNTED_BY_LABEL.get(cfg.adaptive.metric)
    if not cfg.adaptive.enabled or counts is None:
        return None
    labels = load_labels()
    if any((label := labels.get((d, t))) is not None and counts(label.should_transfer)
           for d, task_ids in ids.items() for t in task_ids):
        return None
    planned = ", ".join(f"{d} ({len(task_ids)} tasks)" for d, task_ids in ids.items())
    return (f"adaptive.metric: {cfg.adaptive.metric} counts no episode of the planned slice {planned}, "
            f"tasks {cfg.tasks.model_dump(exclude_defaults=True) or 'default'}: none of its tasks should transfer; "
            "choose another adaptive.metric or tasks that include should-transfer ones")


def select_tasks(cfg: SweepConfig, domain: str) -> list:
    """The tasks of `domain` selected by cfg.tasks, in the task set's order."""
    from handoff.tasks import KINDS, get_task, load_tasks

    t = cfg.tasks
    if isinstance(t.ids, dict):
        return [get_task(domain, task_id) for task_id in t.ids.get(domain, [])]
    if t.ids is not None:
        return [task for task_id in t.ids if (task := _find(domain, task_id)) is not None]
    if t.per_kind is not None:
        return [task for kind in t.kinds or KINDS
                for task in load_tasks(domain, t.split, [kind], t.set)[t.offset:t.offset + t.per_kind]]
    tasks = load_tasks(domain, t.split, t.kinds, t.set)
    end = None if t.limit is None else t.offset + t.limit
    return tasks[t.offset:end]


def _find(domain: str, task_id: str):
    from handoff.tasks import get_task

    try:
        return get_task(domain, task_id)
    except KeyError:
        return None


def unknown_task_ids(cfg: SweepConfig) -> list[str]:
    """`tasks.ids...: ...` for each id that no selected domain has (per domain when ids is a dict)."""
    ids = cfg.tasks.ids
    if isinstance(ids, dict):
        return [f"tasks.ids.{d}: unknown {d} task {i!r}" for d, some in ids.items() for i in some
                if _find(d, i) is None]
    return [f"tasks.ids: no selected domain ({', '.join(cfg.domains())}) has task {i!r}" for i in ids or []
            if all(_find(d, i) is None for d in cfg.domains())]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def plan_shards(cfg: SweepConfig, ckpts: list[Checkpoint], task_ids: dict[str, list[str]]) -> list[Shard]:
    """Shards in run order: checkpoint by checkpoint (its engines are loaded once), then domain."""
    shards = []
    for ck in ckpts:
        for domain in cfg.domains():
            ids = task_ids[domain]
            for trial in range(cfg.planned_trials()):
                for start in range(0, len(ids), cfg.shard_size):
                    chunk = ids[start:start + cfg.shard_size]
                    episodes = [Episode(model=ck.name, step=ck.step, domain=domain, task_id=tid, trial=trial,
                                        seed=episode_seed(cfg.seed, domain, tid, trial)) for tid in chunk]
                    sid = f"{_safe(ck.name)}__{domain}__t{trial}__{start // cfg.shard_size:04d}"
                    shards.append(Shard(id=sid, model=ck.name, domain=domain, trial=trial, episodes=episodes))
    return shards
