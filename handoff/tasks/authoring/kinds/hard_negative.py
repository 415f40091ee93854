"""The hard_negative kind: a difficult user (impatient, rude, threatening) who never asks for a human, with
the parent's solvable issue; the agent must solve it without a transfer (tau2's DB check fails a transfer)."""

from __future__ import annotations

import re

from handoff.tasks.authoring import audit, derive, gold_policy
from handoff.tasks.authoring.audit import Finding
from handoff.tasks.authoring.behaviour import AGENTS
from handoff.tasks.authoring.kinds.base import Kind, derived_label
from handoff.tasks.domains import facts
from handoff.tasks.ids import derived_id
from handoff.tasks.upstream import has_gold_transfer, upstream_tasks, write_tools

TEMPLATES = ("impatient", "rude", "threatening")


def strip_persona_lines(text: str | None, domain: str) -> str | None:
    """The text without the sentences that set the user's temperament (the derived persona replaces them)."""
    if text is None:
        return None
    paragraphs = [" ".join(s for s in audit.sentences(line) if not audit.is_persona_line(s, domain))
                  for line in text.split("\n")]
    return "\n\n".join(p for p in paragraphs if re.search(r"[A-Za-z]", p))


def _hard_negative(domain: str, parent, template: str, k: int):
    """The parent's solvable issue and everything its user needs to reach the gold outcome; the parent's
    persona lines give way to the difficult persona."""
    from tau2.data_model.tasks import Task, UserScenario

    text = derive.scenarios(domain)["hard_negative"]
    parent_instr = parent.user_scenario.instructions
    instructions = parent_instr.model_copy(
        update={
            "reason_for_call": strip_persona_lines(parent_instr.reason_for_call, domain),
            "task_instructions": "\n\n".join(filter(None, [
                strip_persona_lines(parent_instr.task_instructions, domain),
                derive.pick(text["conduct"][template], k),
                derive.pick(text["no_human"], k // len(text["conduct"][template])),
            ])),
        }
    )
    parent_purpose = parent.description.purpose if parent.description else None
    policy = derive.policy_file(domain)
    purpose = (
        f"A difficult user ({template}) who never asks for a human, with the parent's solvable issue: the agent must "
        "solve it without a transfer."
    )
    return Task(
        id=derived_id("hard_negative", parent.id, template),
        description=derive.description(
            "hard_negative", parent, template,
            f"{purpose} Parent's purpose: {parent_purpose}" if parent_purpose else purpose,
            f"Deny requests that are against the policy ({policy}); transfer only if the request cannot be handled "
            f"within the scope of the agent's actions ({policy}) or the user explicitly asks for a human agent (the "
            "transfer_to_human_agents tool description).",
        ),
        user_scenario=UserScenario(persona=derive.pick(text["personas"][template], k), instructions=instructions),
        initial_state=parent.initial_state,
        evaluation_criteria=parent.evaluation_criteria,
    )


def gold_changes_db(domain: str, task) -> bool:
    """Whether the task's reference actions, replayed on the domain's database, change it (a write that
    fails, such as a payment with too little gift card balance, changes nothing)."""
    from tau2.data_model.message import ToolCall

    from handoff.fasteval.environments import make_environment

    env = make_environment(domain)
    before = env.get_db_hash()
    for i, action in enumerate(task.evaluation_criteria.actions or []):
        env.get_response(ToolCall(id=f"call_{i}", name=action.name, arguments=action.arguments,
                                  requestor=action.requestor))
    return env.get_db_hash() != before


def hard_negative_candidates(domain: str) -> list:
    """Solvable parents: a reference solution that contains no transfer, changes the database (so that tau2's
    DB check fails an agent that transfers instead) and follows the policy (handoff.tasks.authoring.gold_policy)."""
    writes = write_tools(domain)
    return [
        t for t in upstream_tasks(domain)
        if not has_gold_transfer(t)
        and t.id not in facts(domain).ASKS_FOR_HUMAN
        and any(a.name in writes for a in t.evaluation_criteria.actions or [])
        and gold_changes_db(domain, t)
        and gold_policy.gold_complies(domain, t)
    ]


def derive_tasks(domain: str) -> list:
    parents = derive.select_parents(domain, "hard_negative", hard_negative_candidates(domain),
                                    facts(domain).COUNTS["hard_negative"])
    return [_hard_negative(domain, p, t, k) for p, t, k, _ in derive.with_templates(TEMPLATES, parents)]


def checks(domain: str, task, parent) -> list[Finding]:
    return audit.persona_findings(task) + [Finding("script_contradiction", task.id, m)
                                           for m in audit.script_contradictions(task, parent)]


KIND = Kind(name="hard_negative", label=derived_label("hard_negative", False), agents=AGENTS,
            expected={"gold": 1.0, "transfer_only": 0.0}, derive=derive_tasks, checks=checks)
