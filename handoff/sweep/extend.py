"""Extending a run: more checkpoints (a glob that now matches more, explicit paths, another model)
and/or more trials, as new shards of the same run (`handoff sweep extend=<run> [overrides]`, also
`handoff sweep extend <run> [overrides]`; `handoff follow` extends a run checkpoint by checkpoint).

What was planned is never replanned: the recorded shards stay, byte for byte, at the head of the
plan, and the new shards follow them, planned by the same rules (seeds from sha256 of the sweep seed,
domain, task and trial, never of the checkpoint). A checkpoint the run holds stays in it when it is
gone from disk (verl keeps only the last `max_ckpt_to_keep`): its finished shards stay, and what
of it is unfinished fails with the reason. Anything else that changed (tasks, labels, sampling, the
user simulator, the reward, tau2) is refused as a resume refuses it. Each extension is appended to
the manifest's `extensions` (handoff.rundir.Extension) with the config and plan hashes it left, so
a hand-edited manifest is still refused.
"""

from __future__ import annotations

import re
import time

from handoff.rundir import Extension, Manifest, sha256_json
from handoff.sweep.config import Checkpoint, diff, result_config
from handoff.sweep.manifest import ResumeRefused, check_resumable
from handoff.sweep.plan import Shard

ADDITIVE_KEY = re.compile(r"^(trials|model\.[^.]+\.(glob|paths|path)|model\.[^.]+)$")
"""The result-config keys an extension may change: they add checkpoints or trials (a whole new
`model.<key>` entry included), never change what was planned."""


def with_recorded(recorded: Manifest, current: list[Checkpoint]) -> list[Checkpoint]:
    """The run's checkpoints: those found now plus those the run recorded that are gone from disk or
    from the glob's matches (by name), ordered by (step, name) as checkpoints() orders them."""
    names = {c.name for c in current}
    gone = [Checkpoint.model_validate(c) for c in recorded.checkpoints if c.get("name") not in names]
    return sorted([*current, *gone], key=lambda c: (c.step, c.name))


def refused_changes(old: Manifest, new: Manifest) -> list[str]:
    """Why `new` is not an extension of `old`: config keys that are not additive, fewer trials, a
    recorded shard that would change or go."""
    problems = []
    for line in diff(result_config(old.config), result_config(new.config)):
        key = line.split(": ", 1)[0]
        if not ADDITIVE_KEY.match(key) or (key.startswith("model.") and "'<absent>'" in line.split(" -> ")[-1]):
            problems.append(f"{line} (only checkpoints and trials can be added to a run)")
    if new.config.get("trials", 1) < old.config.get("trials", 1):
        problems.append(f"trials: {old.config.get('trials')} -> {new.config.get('trials')} (fewer trials drop shards)")
    adaptive = new.config.get("adaptive") or {}
    if adaptive.get("enabled") and not adaptive.get("growing") and new.shards != old.shards:
        problems.append("adaptive.enabled: an adaptive run is not extended: its rounds' anytime-valid decisions "
                        "hold for the checkpoints it started with (docs/metrics.md); start a new run with "
                        "adaptive.growing=true (or handoff follow) for a set that grows")
    planned = {s["id"]: s for s in new.shards}
    changed = [s["id"] for s in old.shards if planned.get(s["id"]) != s]
    if changed:
        problems.append(f"{len(changed)} recorded shard(s) would change or go, e.g. {changed[0]} "
                        "(the task selection, shard_size or seed changed)")
    return problems


def extend_hint(old: Manifest, new: Manifest, run_dir: str) -> str:
    """A line for a refused resume whose changes an extension would take."""
    if refused_changes(old, new) or old.shards == new.shards and old.config_hash == new.config_hash:
        return ""
    return (f"\n  these changes only add checkpoints or trials: extend the run instead, "
            f"`handoff sweep extend={run_dir}` with the same overrides")


def extended(old: Manifest, new: Manifest, content: dict[str, str], overrides: list[str],
             skipped: dict[str, str] | None = None) -> Manifest:
    """`new` (planned from the current config and every checkpoint of the run) as an extension of
    `old`: old's shards first and unchanged, then the new ones; old's identity kept; the extension
    recorded, with `skipped` (checkpoint name -> why: handoff follow). Raises ResumeRefused naming
    what an extension cannot change."""
    problems = []
    try:  # what a resume checks but the config and the plan, which an extension changes by its rules
        check_resumable(old, new.model_copy(update={"config_hash": old.config_hash, "shards": old.shards}), content)
    except ResumeRefused as exc:
        problems += str(exc).split("\n  ")[1:]
    problems += refused_changes(old, new)
    if problems:
        raise ResumeRefused("refusing to extend: results would mix different inputs\n  " + "\n  ".join(problems))
    recorded = {s["id"] for s in old.shards}
    added = [s for s in new.shards if s["id"] not in recorded]
    shards = [*old.shards, *added]
    known = {c["name"] for c in old.checkpoints}
    skipped = {k: v for k, v in (skipped or {}).items() if k not in old.skipped()}
    extension = Extension(
        time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), overrides=list(overrides),
        config_hash=new.config_hash, config_sha256=new.config_sha256,
        base_plan_sha256=sha256_json(old.shards), plan_sha256=sha256_json(shards),
        shards_before=len(old.shards), shards_added=len(added),
        checkpoints_added=[c["name"] for c in new.checkpoints if c["name"] not in known],
        checkpoints_skipped=skipped,
    )
    recorded_change = added or skipped or old.config_hash != new.config_hash
    return new.model_copy(update={
        "run_uuid": old.run_uuid, "created": old.created, "adaptive": old.adaptive, "name": old.name or new.name,
        "shards": shards, "plan_sha256": extension.plan_sha256,
        "n_episodes": sum(len(Shard.model_validate(s).episodes) for s in shards),
        "extensions": [*old.extensions, extension] if recorded_change else old.extensions,
    })
