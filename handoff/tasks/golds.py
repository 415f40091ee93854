"""The hand-check of the upstream golds that the gold checker flags (data/policy/gold_resolutions.yaml),
as the reducer reads it: which golds no policy-following agent can reach. The checker itself, which
keeps the file true, is handoff.tasks.authoring.gold_policy (docs/tasks.md, "Golds against the policy")."""

from __future__ import annotations

from functools import cache

import yaml

from handoff.tasks import paths


@cache
def resolutions() -> dict[str, dict[str, dict]]:
    """domain -> upstream task id -> {findings, gold, label, note} (data/policy/gold_resolutions.yaml)."""
    doc = yaml.safe_load((paths.REPO_ROOT / paths.GOLD_RESOLUTIONS_FILE).read_text()) or {}
    return {domain: {str(k): v for k, v in (doc.get(domain) or {}).items()} for domain in doc}


def unreachable_golds() -> set[tuple[str, str]]:
    """(domain, upstream task id) of every gold recorded as unreachable (reads the YAML only, no replay)."""
    return {(domain, task_id) for domain, entries in resolutions().items()
            for task_id, entry in entries.items() if entry.get("reachable", True) is False}
