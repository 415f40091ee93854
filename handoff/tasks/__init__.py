"""Task sets, the read side: tau2's airline/retail tasks plus the derived explicit_request, out_of_scope
and hard_negative tasks committed under data/tasks, their splits and the hashes a sweep records
(docs/tasks.md). This is what sweep workers import; labels are in handoff.tasks.labels. Building and
checking the committed files is handoff.tasks.authoring's (`handoff labels`), which this side never imports.

Returned Task objects are cached and shared: treat them as read-only (copy before changing one).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from handoff.tasks import paths
from handoff.tasks.hashes import manifest_hashes, tasks_sha256
from handoff.tasks.ids import DERIVED_KINDS, KINDS, parse_derived_id
from handoff.tasks.upstream import (
    DEFAULT_SET,
    DOMAINS,
    LABELLED_SET,
    SPLITS,
    TASK_SETS,
    check_domain,
    upstream_splits,
    upstream_tasks,
)

__all__ = [
    "DOMAINS", "KINDS", "SPLITS", "TASK_SETS", "get_task", "load_tasks", "manifest_hashes", "parse_derived_id",
    "split_of", "tasks_sha256",
]


def split_of(domain: str, task_id: str) -> str | None:
    """A task's split: tau2's for upstream tasks, the parent's for derived ones; None for a telecom task
    outside the base set (tau2 splits only the base set into train and test)."""
    ref = parse_derived_id(task_id)
    return upstream_splits(domain).get(ref.parent_id if ref else task_id)


@cache
def _derived(domain: str, kind: str, root: Path) -> tuple:
    from tau2.data_model.tasks import Task

    path = root / paths.task_file(domain, kind)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `handoff labels build`")
    return tuple(Task.model_validate(t) for t in json.loads(path.read_text()))


def _tasks_of_kind(domain: str, kind: str, task_set: str) -> tuple:
    if kind == "upstream":
        return upstream_tasks(domain, task_set)
    if kind not in DERIVED_KINDS:
        raise ValueError(f"unknown task kind {kind!r}: expected some of {', '.join(KINDS)}")
    derived = _derived(domain, kind, paths.REPO_ROOT)
    if task_set == DEFAULT_SET:
        return derived
    parents = {t.id for t in upstream_tasks(domain, task_set)}  # a derived task is in its parent's sets
    return tuple(t for t in derived if parse_derived_id(t.id).parent_id in parents)


def load_tasks(domain: str, split: str | None = None, kinds: list[str] | None = None,
               task_set: str = DEFAULT_SET) -> list:
    """tau2 Tasks of a domain: upstream first (tau2 order, of `task_set`), then each derived kind (those
    whose parent is in `task_set`: every one in base and full, none in telecom's small); optionally one
    split."""
    check_domain(domain)
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: expected one of {', '.join(SPLITS)} or None for all")
    tasks = [t for kind in (kinds or KINDS) for t in _tasks_of_kind(domain, kind, task_set)]
    return [t for t in tasks if split is None or split_of(domain, t.id) == split]


@cache
def _index(domain: str, task_set: str) -> dict:
    return {t.id: t for t in load_tasks(domain, task_set=task_set)}


def get_task(domain: str, task_id: str):
    """A task by id: of the base set, else of the labelled set (telecom's full set: loaded only when the
    id is not a base task's)."""
    check_domain(domain)
    for task_set in dict.fromkeys((DEFAULT_SET, LABELLED_SET.get(domain, DEFAULT_SET))):
        if task_id in (index := _index(domain, task_set)):
            return index[task_id]
    raise KeyError(f"unknown {domain} task {task_id!r}")
