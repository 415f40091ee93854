"""Per-domain facts, one module per domain (airline, retail, telecom): `facts(domain)` is the domain's module."""

from __future__ import annotations

from types import ModuleType

from handoff.tasks.domains import airline, retail, telecom
from handoff.tasks.upstream import check_domain

FACTS: dict[str, ModuleType] = {"airline": airline, "retail": retail, "telecom": telecom}  # every one of upstream.DOMAINS


def facts(domain: str) -> ModuleType:
    check_domain(domain)
    return FACTS[domain]


DERIVED_DOMAINS = tuple(d for d, module in FACTS.items() if any(module.COUNTS.values()))
"""The domains that have derived tasks (every domain whose COUNTS are not all zero)."""
