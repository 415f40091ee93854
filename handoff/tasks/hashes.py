"""The hashes a sweep records in its run manifest and compares on resume (docs/sweep.md): the committed
labels, splits and overrides files, one sha256 over the content of every task, and the pinned tau2."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from handoff.tasks import paths
from handoff.tasks.upstream import DOMAINS, tau2_commit, tau2_version


def _upstream_task_files() -> list[tuple[str, Path]]:
    """tau2's tasks.json of each domain, found without importing tau2 (which takes seconds)."""
    package = Path(importlib.util.find_spec("tau2").submodule_search_locations[0])
    return [(f"tau2/{d}/tasks.json", package / "data" / "tau2" / "domains" / d / "tasks.json") for d in DOMAINS]


def tasks_sha256(root: Path | None = None) -> str:
    """One sha256 over the content of every task: the derived task files and tau2's upstream tasks.json.
    Any change of a task's scenario, criteria or id changes it (a cache key for scores)."""
    root = Path(root or paths.REPO_ROOT)
    named = [(str(p.relative_to(root)), p) for p in sorted((root / paths.TASKS_DIR).glob("*/*.json"))]
    digest = hashlib.sha256()
    for name, path in named + _upstream_task_files():
        digest.update(f"{name}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def manifest_hashes(root: Path | None = None) -> dict:
    """What a sweep records in its run manifest and compares on resume."""
    root = Path(root or paths.REPO_ROOT)
    return {
        "labels_sha256": paths.sha256_file(root / paths.LABELS_FILE),
        "splits_sha256": paths.sha256_file(root / paths.SPLITS_FILE),
        "overrides_sha256": paths.sha256_file(root / paths.OVERRIDES_FILE),
        "tasks_sha256": tasks_sha256(root),
        "tau2_version": tau2_version(),
        "tau2_commit": tau2_commit(),
    }
