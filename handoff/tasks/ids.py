"""The task kinds by name and the ids of derived tasks (docs/tasks.md).

Derived task id: "<kind>-<parent id>-<template>", e.g. "explicit_request-12-insist". A parent is used
at most once per kind, so the id is unique; the task inherits its parent's train/test split. What each
kind is and how it is built: handoff.tasks.build.kinds, one module per kind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DERIVED_KINDS = ("explicit_request", "out_of_scope", "hard_negative")
KINDS = ("upstream", *DERIVED_KINDS)


@dataclass(frozen=True)
class DerivedRef:
    kind: str
    parent_id: str
    template: str


_ID = re.compile(rf"^({'|'.join(DERIVED_KINDS)})-(\d+)-([a-z_]+)$")


def derived_id(kind: str, parent_id: str, template: str) -> str:
    return f"{kind}-{parent_id}-{template}"


def parse_derived_id(task_id: str) -> DerivedRef | None:
    """The kind, parent and template of a derived task id; None for an upstream id."""
    match = _ID.match(task_id)
    return DerivedRef(*match.groups()) if match else None


def kind_of(task_id: str) -> str:
    ref = parse_derived_id(task_id)
    return ref.kind if ref else "upstream"
