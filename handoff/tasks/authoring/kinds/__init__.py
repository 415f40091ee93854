"""The registry of task kinds, one module per kind (upstream, explicit_request, out_of_scope,
hard_negative), each a Kind (base.py): its label, the scripted agents' required rewards, its derivation
and the annotator's checks. A new kind is a module here, an entry in KINDS and in handoff.tasks.ids."""

from __future__ import annotations

from handoff.tasks.authoring import audit, derive
from handoff.tasks.authoring.audit import Finding
from handoff.tasks.authoring.kinds import explicit_request, hard_negative, out_of_scope, upstream
from handoff.tasks.authoring.kinds.base import Kind
from handoff.tasks.domains import facts
from handoff.tasks.ids import DERIVED_KINDS, KINDS, kind_of, parse_derived_id
from handoff.tasks.upstream import DOMAINS, upstream_tasks

REGISTRY: dict[str, Kind] = {k.name: k for k in (upstream.KIND, explicit_request.KIND, out_of_scope.KIND,
                                                  hard_negative.KIND)}
if tuple(REGISTRY) != KINDS:
    raise ImportError(f"handoff.tasks.authoring.kinds has {tuple(REGISTRY)}, handoff.tasks.ids.KINDS is {KINDS}")


def kind(name: str) -> Kind:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown task kind {name!r}: expected one of {', '.join(KINDS)}") from None


def kind_of_task(task) -> Kind:
    return REGISTRY[kind_of(task.id)]


def audit_tasks(domain: str, name: str, tasks: list, parents: dict, product_classes: dict[str, set[str]]
                ) -> list[Finding]:
    """The annotator's findings on derived tasks of one kind: the kind's checks, then every kind's false
    premises; `parents` maps parent id -> upstream task."""
    checks = kind(name).checks
    return [f for task in tasks
            for f in checks(domain, task, parents[parse_derived_id(task.id).parent_id])
            + audit.premise_findings(domain, task, product_classes)]


def build_kind(domain: str, name: str) -> list:
    """The derived tasks of one kind, ordered by parent id; ValueError if any fails the annotator's checks
    (handoff.tasks.authoring.audit)."""
    if name not in DERIVED_KINDS:
        raise ValueError(f"unknown derived kind {name!r}: expected one of {', '.join(DERIVED_KINDS)}")
    if not facts(domain).COUNTS[name]:
        return []
    tasks = derive.by_parent(kind(name).derive(domain))
    parents = {t.id: t for t in upstream_tasks(domain)}
    findings = audit_tasks(domain, name, tasks, parents, derive.product_classes())
    if findings:
        raise ValueError(f"{domain}/{name}: derived tasks fail the checks:\n  " + "\n  ".join(
            f"{f.task_id}: {f.check}: {f.message}" for f in findings))
    return tasks


def derived_tasks() -> dict[tuple[str, str], list]:
    """(domain, kind) -> the derived tasks, freshly built (and checked)."""
    return {(d, k): build_kind(d, k) for d in DOMAINS for k in DERIVED_KINDS}
