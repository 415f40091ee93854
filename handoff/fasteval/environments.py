"""tau2 environments for airline and retail built from the process-wide database snapshot (telecom:
tau2's own).

`make_environment(domain)` returns a real tau2 `Environment` with the domain's own tools and
policy; only the database underneath differs (a `CowDB`, see `cow.py`), so tool results, errors and
hashes are those of `tau2.registry.registry.get_env_constructor(domain)()`, without re-reading the
7 MB db.json each time. `fast_domain(domain)` registers such a constructor in tau2's registry under
its own name, so tau2's evaluator can be run on it unchanged.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache
from typing import Callable

from tau2.environment.environment import Environment
from tau2.environment.toolkit import TOOL_TYPE_ATTR, ToolKitBase, ToolType
from tau2.registry import registry

from handoff.fasteval.cow import CowReads, Snapshot, cached


class CowToolsMixin:
    """Tools over a CowDB: read tools see shared records, and the hash skips unchanged records."""

    def __init__(self, snapshot: Snapshot) -> None:
        db, reads = snapshot.new_db()
        super().__init__(db)
        self._snapshot = snapshot
        self._reads: CowReads = reads

    def use_tool(self, tool_name: str, **kwargs):
        tool = self._func_tools.get(tool_name)
        read_only = tool is not None and getattr(tool, TOOL_TYPE_ATTR) == ToolType.READ
        self._reads.active = read_only
        try:
            return super().use_tool(tool_name, **kwargs)
        finally:
            self._reads.active = False

    def get_db_hash(self) -> str:
        if self._snapshot.owns(self.db):
            return self._snapshot.hash(self.db)
        return super().get_db_hash()  # update_db replaced the database: tau2's own hash


@dataclass(frozen=True)
class DomainSpec:
    name: str
    tools_class: type[ToolKitBase]
    policy_path: str
    snapshot: Callable[[], Snapshot]


def _airline() -> DomainSpec:
    from tau2.domains.airline.data_model import FlightDB
    from tau2.domains.airline.tools import AirlineTools
    from tau2.domains.airline.utils import AIRLINE_DB_PATH, AIRLINE_POLICY_PATH

    load = cached(lambda: Snapshot.load(FlightDB, AIRLINE_DB_PATH))
    return DomainSpec("airline", AirlineTools, AIRLINE_POLICY_PATH, load)


def _retail() -> DomainSpec:
    from tau2.domains.retail.data_model import RetailDB
    from tau2.domains.retail.tools import RetailTools
    from tau2.domains.retail.utils import RETAIL_DB_PATH, RETAIL_POLICY_PATH

    load = cached(lambda: Snapshot.load(RetailDB, RETAIL_DB_PATH))
    return DomainSpec("retail", RetailTools, RETAIL_POLICY_PATH, load)


_SPECS = {"airline": _airline, "retail": _retail}
# Domains whose environment is tau2's own: telecom's databases are small (a fresh environment and its
# evaluation cost milliseconds, docs/benchmarks.md), so there is nothing to make cheaper.
TAU2_OWN = ("telecom",)
SUPPORTED_DOMAINS = (*_SPECS, *TAU2_OWN)
_lock = threading.Lock()
_spec_lock = threading.Lock()
_specs: dict[str, DomainSpec] = {}


def _spec(domain: str) -> DomainSpec:
    """The domain's spec, one per process (its snapshot is shared by all threads)."""
    with _spec_lock:
        if domain not in _specs:
            _specs[domain] = _SPECS[domain]()
        return _specs[domain]


@cache
def _tools_class(domain: str) -> type:
    base = _spec(domain).tools_class
    return type(f"Cow{base.__name__}", (CowToolsMixin, base), {})


@cache
def _policy(domain: str) -> str:
    with open(_spec(domain).policy_path) as f:
        return f.read()


def make_environment(domain: str, solo_mode: bool = False) -> Environment:
    """A fresh tau2 environment of `domain`: airline's or retail's over the shared snapshot, telecom's
    tau2's own."""
    if domain not in SUPPORTED_DOMAINS:
        raise ValueError(f"fasteval supports {SUPPORTED_DOMAINS}, not {domain!r}")
    if solo_mode or domain in TAU2_OWN:  # solo mode: tau2 raises its own error in airline/retail
        return registry.get_env_constructor(domain)(solo_mode=solo_mode)
    tools = _tools_class(domain)(_spec(domain).snapshot())
    return Environment(domain_name=domain, policy=_policy(domain), tools=tools)


def fast_domain(domain: str) -> str:
    """The registry name of `domain`'s fast constructor (the domain itself if unsupported)."""
    if domain not in _SPECS:
        return domain
    name = f"{domain}+fasteval"
    with _lock:
        if name not in registry.get_domains():
            registry.register_domain(_constructor(domain), name)
    return name


def _constructor(domain: str) -> Callable[..., Environment]:
    def get_environment(solo_mode: bool = False) -> Environment:
        return make_environment(domain, solo_mode=solo_mode)

    return get_environment
