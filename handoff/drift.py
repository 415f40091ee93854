"""How an imported tau2 results file differs from the pinned tau2 it is re-evaluated on
(`handoff import`): the tasks whose embedded definition is not the pinned one (which parts), the
user simulator's guidelines, the policy, and the tau2 commit the file records.

tau2 1.0 and later rewrote many scenarios and reference actions under the same task ids: a file
graded against those tasks is not comparable with ours task for task, and its differences would
otherwise show up only as unexplained reward mismatches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

SCENARIO, ACTIONS, REWARD_BASIS = "scenario", "reference actions", "reward basis"
# part name -> where it sits in a tau2 Task dumped as JSON
TASK_PARTS = {
    SCENARIO: ("user_scenario",),
    ACTIONS: ("evaluation_criteria", "actions"),
    REWARD_BASIS: ("evaluation_criteria", "reward_basis"),
    "communicate info": ("evaluation_criteria", "communicate_info"),
    "NL assertions": ("evaluation_criteria", "nl_assertions"),
    "env assertions": ("evaluation_criteria", "env_assertions"),
    "initial state": ("initial_state",),
}
NOT_PINNED, UNREADABLE = "not among the pinned tasks", "not a tau2 Task"


@dataclass(frozen=True)
class Drift:
    """What differs from the pinned tau2; empty when nothing does (or the file records nothing)."""

    tau2_commit: str | None
    tasks: dict[str, list[str]]  # task id -> the parts that differ
    user_guidelines_differ: bool
    policy_differs: bool

    @property
    def any(self) -> bool:
        return bool(self.tasks) or self.user_guidelines_differ or self.policy_differs


def file_drift(domain: str, info: dict | None, tasks: list | None) -> Drift:
    """The drift of a results file's `info` and embedded `tasks` from the pinned tau2's."""
    info = info or {}
    user = info.get("user_info") if isinstance(info.get("user_info"), dict) else {}
    env = info.get("environment_info") if isinstance(info.get("environment_info"), dict) else {}
    return Drift(tau2_commit=info.get("git_commit") if isinstance(info.get("git_commit"), str) else None,
                 tasks=drifted_tasks(domain, tasks or []),
                 user_guidelines_differ=_differs(user.get("global_simulation_guidelines"), _pinned_guidelines()),
                 policy_differs=_differs(env.get("policy"), _pinned_policy(domain)))


def _differs(recorded, pinned: frozenset[str]) -> bool:
    """A text the file records differs from every pinned version of it (nothing recorded: no)."""
    return isinstance(recorded, str) and bool(recorded.strip()) and recorded.strip() not in pinned


@cache
def _pinned_guidelines() -> frozenset[str]:
    from tau2.user.user_simulator import get_global_user_sim_guidelines

    return frozenset(get_global_user_sim_guidelines(use_tools).strip() for use_tools in (False, True))


@cache
def _pinned_policy(domain: str) -> frozenset[str]:
    """The policy the pinned tau2's environment gives its agent (telecom's is main_policy.md with
    the tech-support manual, not one file)."""
    from tau2.registry import registry

    return frozenset({registry.get_env_constructor(domain)().get_policy().strip()})


def drifted_tasks(domain: str, embedded: list) -> dict[str, list[str]]:
    """Embedded task id -> the parts of its definition that are not the pinned task's."""
    from handoff.tasks.upstream import upstream_tasks

    pinned = {t.id: t.model_dump(mode="json") for t in upstream_tasks(domain)}
    out = {}
    for raw in embedded:
        task_id, parts = _task_drift(raw, pinned)
        if parts:
            out[task_id] = parts
    return out


def _task_drift(raw, pinned: dict[str, dict]) -> tuple[str, list[str]]:
    from pydantic import ValidationError
    from tau2.data_model.tasks import Task

    task_id = str(raw.get("id")) if isinstance(raw, dict) else "?"
    try:
        task = Task.model_validate(raw).model_dump(mode="json")
    except ValidationError:
        return task_id, [UNREADABLE]
    if task_id not in pinned:
        return task_id, [NOT_PINNED]
    return task_id, [part for part, path in TASK_PARTS.items() if _at(task, path) != _at(pinned[task_id], path)]


def _at(data: dict, path: tuple[str, ...]):
    for key in path:
        data = (data or {}).get(key)
    return data
