"""Labels: should a correct agent hand off to a human on a task (handoff.rules.label.Label)?

`handoff labels build` writes every task's label, hand-checked overrides applied, to
data/manifests/labels_v1.json (handoff.tasks.authoring.labelling: the rule of each task follows from its
kind, docs/tasks.md); load_labels reads that file.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from handoff.errors import HandoffError
from handoff.rules.label import Label
from handoff.tasks import paths


class ManifestError(HandoffError):
    """A task/label/split manifest that is invalid or does not match its inputs."""


@cache
def _load(path: Path, version: tuple[int, int], overrides_sha: str) -> dict[tuple[str, str], Label]:
    """Cached per labels-file version (mtime, size) and overrides hash."""
    doc = json.loads(path.read_text())
    if doc["inputs"]["overrides_sha256"] != overrides_sha:
        raise ManifestError(
            f"{path} is stale: {paths.OVERRIDES_FILE} changed since it was built; run `handoff labels build`"
        )
    return {(d, tid): Label.model_validate(v) for d, labels in doc["labels"].items() for tid, v in labels.items()}


def load_labels(root: Path | None = None) -> dict[tuple[str, str], Label]:
    """Every task's label from data/manifests/labels_v1.json (overrides applied), keyed (domain, task id)."""
    root = Path(root or paths.REPO_ROOT)
    path = root / paths.LABELS_FILE
    try:
        stat = path.stat()
        return _load(path, (stat.st_mtime_ns, stat.st_size), paths.sha256_file(root / paths.OVERRIDES_FILE))
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        raise ManifestError(f"cannot read {path} ({exc!r}); run `handoff labels build`") from exc


def label_for(domain: str, task_id: str) -> Label:
    try:
        return load_labels()[(domain, task_id)]
    except KeyError:
        raise KeyError(f"no label for {domain}/{task_id}") from None
