"""The label of each task as `handoff labels build` writes it: the rule of the task's kind
(handoff.tasks.authoring.kinds), then the hand-checked corrections of data/manifests/label_overrides_v1.json,
in the format {"domains": {"airline": {"<task id>": {"should_transfer": true, "reason": "..."}}}}.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError, field_validator

from handoff.rules.label import OVERRIDE_PREFIX, Label
from handoff.tasks.authoring.kinds import kind_of_task
from handoff.tasks.labels import ManifestError
from handoff.tasks.upstream import DOMAINS


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
    """The label a task gets from its kind: the kind's rule (derived) or its reference solution (upstream)."""
    return kind_of_task(task).label(task)


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
