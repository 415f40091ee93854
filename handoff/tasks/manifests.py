"""`handoff labels build|check`: the derived task files, labels_v1.json, splits_v1.json and the rendered
out-of-scope catalog, all generated from the pinned tau2 package and label_overrides_v1.json.

Hash chain: labels_v1.json records the sha256 of the overrides file and of each derived task file;
splits_v1.json records the sha256 of labels_v1.json; manifest_hashes() gives all of them to the sweep.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from handoff.tasks import paths
from handoff.tasks.catalog_doc import render_catalog
from handoff.tasks.derive import KINDS, build_kind, parse_derived_id
from handoff.tasks.labels import apply_override, base_label, read_overrides
from handoff.tasks.upstream import (
    DOMAINS,
    SPLITS,
    TAU2_DIST,
    tau2_commit,
    tau2_data_sha256,
    tau2_version,
    upstream_splits,
    upstream_tasks,
)

VERSION = 1


def dump_json(obj) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split_of(domain: str, task_id: str) -> str:
    """A task's split: tau2's for upstream tasks, the parent's for derived ones."""
    ref = parse_derived_id(task_id)
    return upstream_splits(domain)[ref.parent_id if ref else task_id]


def render(root: Path) -> dict[Path, bytes]:
    """Every generated file (path relative to root -> bytes), from tau2 and root's overrides file."""
    derived = {(d, k): build_kind(d, k) for d in DOMAINS for k in KINDS}
    files = {
        paths.task_file(d, k): dump_json([t.model_dump(mode="json", exclude_none=True) for t in tasks])
        for (d, k), tasks in derived.items()
    }
    tasks = {d: list(upstream_tasks(d)) + [t for k in KINDS for t in derived[(d, k)]] for d in DOMAINS}
    files[paths.LABELS_FILE] = _labels_json(root, tasks, {str(p): _sha(data) for p, data in sorted(files.items())})
    files[paths.SPLITS_FILE] = _splits_json(tasks, _sha(files[paths.LABELS_FILE]))
    files[paths.CATALOG_DOC] = render_catalog(derived).encode()
    return files


def _labels_json(root: Path, tasks: dict[str, list], tasks_sha256: dict[str, str]) -> bytes:
    overrides = read_overrides(root / paths.OVERRIDES_FILE, {d: {t.id for t in tasks[d]} for d in DOMAINS})
    labels = {
        d: {
            t.id: apply_override(f"{d}/{t.id}", base_label(t), overrides.get((d, t.id))).model_dump(exclude_none=True)
            for t in tasks[d]
        }
        for d in DOMAINS
    }
    return dump_json({
        "version": VERSION,
        "tau2": {"package": TAU2_DIST, "version": tau2_version(), "commit": tau2_commit(),
                 "data_sha256": tau2_data_sha256()},
        "inputs": {"overrides_sha256": paths.sha256_file(root / paths.OVERRIDES_FILE), "tasks_sha256": tasks_sha256},
        "labels": labels,
    })


def _splits_json(tasks: dict[str, list], labels_sha256: str) -> bytes:
    return dump_json({
        "version": VERSION,
        "labels_sha256": labels_sha256,
        "domains": {d: {s: [t.id for t in tasks[d] if split_of(d, t.id) == s] for s in SPLITS} for d in DOMAINS},
    })


def build(root: Path | None = None) -> list[Path]:
    """Write the generated files that changed; returns them."""
    root = Path(root or paths.REPO_ROOT)
    written = []
    for rel, data in render(root).items():
        target = root / rel
        if not target.exists() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(rel)
    return written


def check(root: Path | None = None) -> list[str]:
    """What differs between the committed files and a fresh build (empty when everything is current)."""
    root = Path(root or paths.REPO_ROOT)
    problems = _hash_chain_problems(root)
    for rel, data in render(root).items():
        target = root / rel
        if not target.exists():
            problems.append(f"{rel}: missing")
        elif target.read_bytes() != data:
            problems.append(f"{rel}: stale, differs from a fresh build:\n    " + "\n    ".join(_describe(target, data)))
    return problems


def _hash_chain_problems(root: Path) -> list[str]:
    """Recorded hashes that do not match the files they name (labels -> splits, inputs -> labels)."""
    labels, splits = _read_json(root / paths.LABELS_FILE), _read_json(root / paths.SPLITS_FILE)
    if not isinstance(labels, dict) or not isinstance(splits, dict):
        return []  # missing or unreadable: reported as missing or stale by check()
    problems = []
    if splits.get("labels_sha256") != paths.sha256_file(root / paths.LABELS_FILE):
        problems.append(f"{paths.SPLITS_FILE}: labels_sha256 does not match {paths.LABELS_FILE}")
    inputs = labels.get("inputs", {})
    recorded = {str(paths.OVERRIDES_FILE): inputs.get("overrides_sha256"), **inputs.get("tasks_sha256", {})}
    for name, sha in sorted(recorded.items()):
        if not (root / name).exists() or paths.sha256_file(root / name) != sha:
            problems.append(f"{paths.LABELS_FILE}: recorded sha256 of {name} does not match the file")
    return problems


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _describe(target: Path, fresh: bytes, limit: int = 8) -> list[str]:
    old, new = _read_json(target), json.loads(fresh)
    if old is None:
        return ["the committed file is not valid JSON"]
    diffs = _json_diff(old, new, "") or ["same JSON content, different formatting"]
    return diffs[:limit] + ([f"... {len(diffs) - limit} more"] if len(diffs) > limit else [])


def _json_diff(old, new, where: str) -> list[str]:
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(x, dict) and "id" in x for x in old + new):
        old, new = {x["id"]: x for x in old}, {x["id"]: x for x in new}
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in list(old) + [k for k in new if k not in old]:
            path = f"{where}/{key}"
            if key not in new:
                out.append(f"{path}: only in the committed file")
            elif key not in old:
                out.append(f"{path}: missing from the committed file")
            else:
                out += _json_diff(old[key], new[key], path)
        return out
    if old != new:
        return [f"{where or '/'}: committed {_short(old)}, fresh build {_short(new)}"]
    return []


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def manifest_hashes(root: Path | None = None) -> dict:
    """What a sweep records in its run manifest and compares on resume."""
    root = Path(root or paths.REPO_ROOT)
    tasks = sorted((root / paths.TASKS_DIR).glob("*/*.json"))
    digest = hashlib.sha256()
    for path in tasks:
        digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes())
    return {
        "labels_sha256": paths.sha256_file(root / paths.LABELS_FILE),
        "splits_sha256": paths.sha256_file(root / paths.SPLITS_FILE),
        "overrides_sha256": paths.sha256_file(root / paths.OVERRIDES_FILE),
        "tasks_sha256": digest.hexdigest(),
        "tau2_version": tau2_version(),
        "tau2_commit": tau2_commit(),
    }
