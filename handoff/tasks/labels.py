"""Labels: should a correct agent hand off to a human on a task (handoff.rules.label.Label)?

The rule of each task follows from where it comes from (docs/tasks.md); hand-checked corrections come
from data/manifests/label_overrides_v1.json, in the format
{"domains": {"airline": {"<task id>": {"should_transfer": true, "reason": "..."}}}}.
`handoff labels build` writes every label, overrides applied, to data/manifests/labels_v1.json;
load_labels reads that file.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError, field_validator

from handoff.errors import HandoffError
from handoff.rules.label import OVERRIDE_PREFIX, Label
from handoff.tasks import paths
from handoff.tasks.build.derive import parse_derived_id
from handoff.tasks.upstream import DOMAINS, has_gold_transfer


class ManifestError(HandoffError):
    """A task/label/split manifest that is invalid or does not match its inputs."""


class Override(BaseModel):
    model_config = ConfigDict(extra="forbid")

    should_transfer: StrictBool
    reason: str

    @field_validator("reason")
    @classmethod
    def _non_empty(cls, reason: str) -> str:
        if not reason.strip():
            raise ValueError("reason must not be empty")
        return reason


def read_overrides(path: Path, task_ids: dict[str, set[str]]) -> dict[tuple[str, str], Override]:
    """Validated overrides; ManifestError lists every bad entry by domain and task id."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read overrides: {exc}") from exc
    if not isinstance(doc, dict) or set(doc) != {"domains"} or not isinstance(doc["domains"], dict):
        raise ManifestError(f'{path}: expected {{"domains": {{"<domain>": {{"<task id>": {{...}}}}}}}}')
    overrides, errors = {}, []
    for domain, entries in doc["domains"].items():
        if domain not in DOMAINS:
            errors.append(f"{domain}: unknown domain (expected one of {', '.join(DOMAINS)})")
            continue
        if not isinstance(entries, dict):
            errors.append(f"{domain}: expected an object of task id -> override")
            continue
        for task_id, entry in entries.items():
            where = f"{domain}/{task_id}"
            if task_id not in task_ids[domain]:
                errors.append(f"{where}: unknown task id")
                continue
            try:
                overrides[(domain, task_id)] = Override.model_validate(entry)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
                errors.append(f"{where}: {problems}")
    if errors:
        raise ManifestError(f"{path}: invalid overrides:\n  " + "\n  ".join(errors))
    return overrides


def base_label(task) -> Label:
    """The label a task gets from its kind (derived) or its reference solution (upstream)."""
    ref = parse_derived_id(task.id)
    if ref is not None:
        return Label(should_transfer=ref.kind != "hard_negative", rule=ref.kind)
    if has_gold_transfer(task):
        return Label(should_transfer=True, rule="gold_transfer_action")
    return Label(should_transfer=False, rule="no_transfer")


def apply_override(where: str, label: Label, override: Override | None) -> Label:
    """The label with the override applied; `where` ("airline/3") names the entry in errors."""
    if override is None:
        return label
    if override.should_transfer == label.should_transfer:
        raise ManifestError(
            f"override {where}: should_transfer={override.should_transfer} does not change the label "
            f"({label.rule} already says so); remove it"
        )
    return Label(should_transfer=override.should_transfer, rule=OVERRIDE_PREFIX + label.rule, reason=override.reason)


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
