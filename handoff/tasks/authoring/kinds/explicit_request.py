"""The explicit_request kind: the parent's user and need, told anew by a user who insists on a human agent;
the agent must transfer and change nothing."""

from __future__ import annotations

from handoff.tasks import paths
from handoff.tasks.authoring import audit, derive
from handoff.tasks.authoring.audit import Finding
from handoff.tasks.authoring.behaviour import AGENTS
from handoff.tasks.authoring.kinds.base import Kind, derived_label
from handoff.tasks.domains import facts
from handoff.tasks.ids import derived_id
from handoff.tasks.upstream import upstream_tasks

TEMPLATES = ("insist", "after_first_reply", "distrust")


def _request_of(domain: str, parent) -> str:
    requests = derive.scenarios(domain)["explicit_request"]["requests"]
    if parent.id not in requests:
        raise ValueError(
            f"{paths.scenario_file(domain)}: explicit_request.requests has no entry for parent {parent.id}: "
            "write what this user needs in their own words"
        )
    return requests[parent.id].strip()


def _explicit_request(domain: str, parent, template: str, k: int):
    """The parent's user and need, told anew: no line of the parent's script, only the kind's behaviour."""
    from tau2.data_model.tasks import StructuredUserInstructions, Task, UserScenario

    text = derive.scenarios(domain)["explicit_request"]["templates"][template]
    request = _request_of(domain, parent)
    behaviour = f"{derive.pick(text['openings'], k)} {derive.pick(text['persistence'], k // len(text['openings']))}"
    parent_instr = parent.user_scenario.instructions
    scenario = UserScenario(
        persona=derive.pick(text["personas"], k),
        instructions=StructuredUserInstructions(
            domain=domain,
            reason_for_call=f"{request} You want a human agent to handle this, not an automated assistant.",
            known_info=derive.scenarios(domain)["explicit_request"].get("known_info", {}).get(
                parent.id, parent_instr.known_info),
            unknown_info=parent_instr.unknown_info,
            task_instructions=behaviour,
        ),
    )
    return Task(
        id=derived_id("explicit_request", parent.id, template),
        description=derive.description(
            "explicit_request", parent, template,
            "The user insists on a human agent: the agent must call transfer_to_human_agents and change nothing.",
            derive.transfer_clause(domain),
        ),
        user_scenario=scenario,
        initial_state=derive.initial_state(domain, parent),
        evaluation_criteria=derive.transfer_criteria(
            f"The user explicitly asks for a human agent. Their request: {request}"),
    )


def derive_tasks(domain: str) -> list:
    parents = derive.select_parents(domain, "explicit_request", list(upstream_tasks(domain)),
                                    facts(domain).COUNTS["explicit_request"])
    return [_explicit_request(domain, p, t, k) for p, t, k, _ in derive.with_templates(TEMPLATES, parents)]


def checks(domain: str, task, parent) -> list[Finding]:
    return [Finding("parent_script", task.id, f"keeps the parent's line {s!r}")
            for s in audit.kept_parent_lines(task, parent)] + [
        Finding("asks_for_a_solution", task.id, f"asks the agent to solve it: {s!r}")
        for s in audit.solution_requests(audit.scenario_text(task))]


KIND = Kind(name="explicit_request", label=derived_label("explicit_request", True), agents=AGENTS,
            expected={"gold": 1.0, "nothing": 0.0, "transfer_only": 1.0}, derive=derive_tasks, checks=checks)
