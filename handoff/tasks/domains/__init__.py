"""Per-domain facts, one module per domain (airline, retail): `facts(domain)` is the domain's module."""

from __future__ import annotations

from types import ModuleType

from handoff.tasks.domains import airline, retail
from handoff.tasks.upstream import check_domain

FACTS: dict[str, ModuleType] = {"airline": airline, "retail": retail}  # every one of upstream.DOMAINS


def facts(domain: str) -> ModuleType:
    check_domain(domain)
    return FACTS[domain]
