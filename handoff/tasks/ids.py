"""The task kinds by name and the ids of derived tasks (docs/tasks.md).

Derived task id: "<kind>-<parent id>-<template>", e.g. "explicit_request-12-insist", or with a telecom
parent "hard_negative-[mms_issue]bad_network_preference[PERSONA:Hard]-rude". A parent is used at most once
per kind, so the id is unique; the task inherits its parent's train/test split. What each
kind is and how it is built: handoff.tasks.authoring.kinds, one module per kind.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

DERIVED_KINDS = ("explicit_request", "out_of_scope", "hard_negative")
KINDS = ("upstream", *DERIVED_KINDS)


@dataclass(frozen=True)
class DerivedRef:
    kind: str
    parent_id: str
    template: str


# The parent id is everything between the kind and the last "-": a template holds no "-", and no upstream id
# ends in "-<lower case>" (airline and retail ids are numbers, telecom's end in "]").
_ID = re.compile(rf"^({'|'.join(DERIVED_KINDS)})-(.+)-([a-z_]+)$")


def derived_id(kind: str, parent_id: str, template: str) -> str:
    return f"{kind}-{parent_id}-{template}"


def parse_derived_id(task_id: str) -> DerivedRef | None:
    """The kind, parent and template of a derived task id; None for an upstream id."""
    match = _ID.match(task_id)
    return DerivedRef(*match.groups()) if match else None


def id_sort_key(task_id: str) -> tuple:
    """Numeric ids (airline, retail) in numeric order, then the others (telecom's) by their text."""
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)


def kind_of(task_id: str) -> str:
    ref = parse_derived_id(task_id)
    return ref.kind if ref else "upstream"


_SAFE = re.compile(r"[A-Za-z0-9_.-]+")
SLUG_CHARS = 64
"""The readable part of a slug at most: a transcript's file name holds the checkpoint's name, the domain
and the slug, and a telecom id runs to 250 characters (a file name may hold 255 bytes)."""


def task_slug(task_id: str) -> str:
    """A task id safe in a file name and a URL path: the id itself when it is (airline, retail and derived
    ids, up to SLUG_CHARS), else its safe runs joined by "-", cut at SLUG_CHARS, with 8 hex digits of its
    sha256 appended, so that ids differing only in the other characters or beyond the cut stay apart
    (telecom's "[service_issue]a|b[PERSONA:Easy]")."""
    if _SAFE.fullmatch(task_id) and len(task_id) <= SLUG_CHARS:
        return task_id
    readable = "-".join(_SAFE.findall(task_id))[:SLUG_CHARS]
    return f"{readable}-{hashlib.sha256(task_id.encode()).hexdigest()[:8]}"
