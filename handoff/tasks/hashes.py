"""The hashes a sweep records in its run manifest and compares on resume (docs/sweep.md): the committed
labels, splits and overrides files, one sha256 over the content of every task, and the pinned tau2.

A sweep hashes the manifests' view of its domains: airline's and retail's always, plus telecom's when it
runs telecom. The airline+retail view is byte for byte the files as they were before telecom was added,
so a run from before then still resumes, and a telecom label edit does not stop an airline run's resume.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from handoff.tasks import paths
from handoff.tasks.upstream import DOMAINS, domain_data_dir, tau2_commit, tau2_version

LEGACY_DOMAINS = ("airline", "retail")
"""The domains of the manifests before telecom: every view holds them."""


def hashed_domains(domains=None) -> tuple[str, ...]:
    """The domains whose view a sweep of `domains` hashes (None: all), in DOMAINS order."""
    return tuple(d for d in DOMAINS if domains is None or d in LEGACY_DOMAINS or d in domains)


def _upstream_task_files(domains=DOMAINS) -> list[tuple[str, Path]]:
    """tau2's tasks.json of each domain."""
    return [(f"tau2/{d}/tasks.json", domain_data_dir(d) / "tasks.json") for d in domains]


def tasks_sha256(root: Path | None = None, domains=None) -> str:
    """One sha256 over the content of every task of `domains` (None: all): the derived task files and
    tau2's upstream tasks.json. Any change of a task's scenario, criteria or id changes it (a cache key
    for scores)."""
    root = Path(root or paths.REPO_ROOT)
    shown = hashed_domains(domains)
    named = [(str(p.relative_to(root)), p) for p in sorted((root / paths.TASKS_DIR).glob("*/*.json"))
             if p.parent.name in shown]
    digest = hashlib.sha256()
    for name, path in named + _upstream_task_files(shown):
        digest.update(f"{name}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def _dump(obj) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_views(root: Path, domains: tuple[str, ...]) -> dict[Path, bytes]:
    """The overrides, labels and splits files as `handoff labels build` would write them for `domains`
    alone (the files themselves when `domains` is every domain); inner hashes point at the views."""
    files = {p: (root / p).read_bytes() for p in (paths.OVERRIDES_FILE, paths.LABELS_FILE, paths.SPLITS_FILE)}
    if set(domains) == set(DOMAINS):
        return files
    from handoff.tasks.upstream import tau2_data_sha256

    overrides, labels, splits = (json.loads(files[p]) for p in files)
    overrides["domains"] = {d: v for d, v in overrides["domains"].items() if d in domains}
    views = {paths.OVERRIDES_FILE: _dump(overrides)}
    labels["labels"] = {d: v for d, v in labels["labels"].items() if d in domains}
    labels["inputs"]["overrides_sha256"] = _sha(views[paths.OVERRIDES_FILE])
    labels["inputs"]["tasks_sha256"] = {p: h for p, h in labels["inputs"]["tasks_sha256"].items()
                                        if Path(p).parent.name in domains}
    labels["tau2"]["data_sha256"] = tau2_data_sha256(tuple(domains))
    views[paths.LABELS_FILE] = _dump(labels)
    splits["domains"] = {d: v for d, v in splits["domains"].items() if d in domains}
    splits["labels_sha256"] = _sha(views[paths.LABELS_FILE])
    views[paths.SPLITS_FILE] = _dump(splits)
    return views


def manifest_hashes(root: Path | None = None, domains=None) -> dict:
    """What a sweep of `domains` (None: every domain) records in its run manifest and compares on resume."""
    root = Path(root or paths.REPO_ROOT)
    views = manifest_views(root, hashed_domains(domains))
    return {
        "labels_sha256": _sha(views[paths.LABELS_FILE]),
        "splits_sha256": _sha(views[paths.SPLITS_FILE]),
        "overrides_sha256": _sha(views[paths.OVERRIDES_FILE]),
        "tasks_sha256": tasks_sha256(root, domains),
        "tau2_version": tau2_version(),
        "tau2_commit": tau2_commit(),
    }
