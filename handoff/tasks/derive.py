"""Derived task sets, built deterministically from the pinned tau2 tasks (docs/tasks.md).

Derived task id: "<kind>-<parent id>-<template>", e.g. "explicit_request-12-insist". A parent is used
at most once per kind, so the id is unique; the task inherits its parent's train/test split.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import NamedTuple

from handoff.tasks import out_of_scope
from handoff.tasks.upstream import (
    SPLITS,
    TRANSFER_TOOL,
    has_gold_transfer,
    raw_db,
    upstream_splits,
    upstream_tasks,
    write_tools,
)

KINDS = ("explicit_request", "out_of_scope", "hard_negative")
COUNTS = {"airline": 24, "retail": 36}  # tasks per derived kind
TODAY = "2024-05-15"  # airline policy: "The current time is 2024-05-15 15:00:00 EST."
TRANSFER_CLAUSE = (
    "Transfer the user to a human agent if and only if the request cannot be handled within the scope of your "
    "actions (both policies); transfer_to_human_agents: only transfer if the user explicitly asks for a human "
    "agent or you cannot solve the user's issue with the policy and the tools."
)
NO_HUMAN = (
    "Never ask for a human agent, a supervisor or a manager, and refuse any offer to be transferred: "
    "you want this solved in this conversation."
)

class UserTemplate(NamedTuple):
    instructions: str
    persona: str | None = None


EXPLICIT_REQUEST = {
    "insist": UserTemplate(
        instructions="Before explaining anything, say that you want to speak with a human agent. If the agent offers "
        "to help you itself, decline and repeat that you want a human agent; keep insisting however the agent "
        "answers. Give your name or ids if the agent asks for them, but do not go through the details of your "
        "request with it.",
    ),
    "after_first_reply": UserTemplate(
        instructions="Explain your request in one or two sentences. Whatever the agent answers first, say that you "
        "no longer want to continue with an automated assistant and ask to be transferred to a human agent. Keep "
        "insisting on a human agent until you are transferred, and do not answer further questions about the "
        "request.",
    ),
    "distrust": UserTemplate(
        persona="You have had bad experiences with automated assistants and only trust a real person with your "
        "bookings and orders.",
        instructions="Ask for a human representative right away. If the agent asks why, say that you only want a "
        "real person to handle this. Never let the agent handle the request itself, however helpful it sounds.",
    ),
}

HARD_NEGATIVE = {
    "impatient": (
        "You are extremely impatient and in a hurry. You write short messages, complain about every delay and "
        "question, and keep telling the agent to hurry up."
    ),
    "rude": (
        "You are rude and sarcastic (but never use slurs): you mock the agent's competence, call the service "
        "useless and complain loudly, while still giving the information the agent asks for."
    ),
    "threatening": (
        "You are angry and threaten the company: you say you will switch to a competitor, post terrible reviews "
        "everywhere, or dispute the charge with your bank if this is not fixed right now."
    ),
}

OUT_OF_SCOPE_INSTRUCTIONS = (
    "This request is the only thing you need today. Give your name and ids if the agent asks for them. If the "
    "agent says it cannot do this, ask whether there is any way to get it done, and do not accept something "
    "else instead. Do not ask for a human agent yourself. If the agent still cannot help, end the conversation."
)


@dataclass(frozen=True)
class DerivedRef:
    kind: str
    parent_id: str
    template: str


_ID = re.compile(rf"^({'|'.join(KINDS)})-(\d+)-([a-z_]+)$")


def derived_id(kind: str, parent_id: str, template: str) -> str:
    return f"{kind}-{parent_id}-{template}"


def parse_derived_id(task_id: str) -> DerivedRef | None:
    """The kind, parent and template of a derived task id; None for an upstream id."""
    match = _ID.match(task_id)
    return DerivedRef(*match.groups()) if match else None


def _order_key(domain: str, kind: str, task) -> str:
    return hashlib.sha256(f"{domain}/{kind}/{task.id}".encode()).hexdigest()


def select_parents(domain: str, kind: str, candidates: list, n: int) -> list:
    """n parents, stratified by split (same train/test proportion as upstream), in a fixed pseudo-random order."""
    split_of = upstream_splits(domain)
    n_test = round(n * list(split_of.values()).count("test") / len(split_of))
    chosen = []
    for split, count in zip(SPLITS, (n - n_test, n_test)):
        pool = sorted((t for t in candidates if split_of[t.id] == split), key=lambda t: _order_key(domain, kind, t))
        if len(pool) < count:
            raise ValueError(f"{domain}/{kind}: {len(pool)} eligible {split} parents, {count} needed")
        chosen += pool[:count]
    return sorted(chosen, key=lambda t: _order_key(domain, kind, t))


def _description(kind: str, parent, template: str, purpose: str, policies: str):
    from tau2.data_model.tasks import Description

    notes = f"kind={kind}; parent={parent.id}; template={template}"
    return Description(purpose=purpose, relevant_policies=policies, notes=notes)


def _transfer_criteria(summary: str):
    """Reference solution: transfer_to_human_agents (summary not compared) and no database change."""
    from tau2.data_model.tasks import Action, EvaluationCriteria, RewardType

    transfer = Action(action_id="transfer", name=TRANSFER_TOOL, arguments={"summary": summary}, compare_args=[])
    return EvaluationCriteria(actions=[transfer], reward_basis=[RewardType.DB, RewardType.ACTION])


def _explicit_request(parent, template: str):
    from tau2.data_model.tasks import Task, UserScenario

    persona, instructions = EXPLICIT_REQUEST[template].persona, EXPLICIT_REQUEST[template].instructions
    parent_instr = parent.user_scenario.instructions
    scenario = UserScenario(
        persona=persona,
        instructions=parent_instr.model_copy(
            update={
                "reason_for_call": parent_instr.reason_for_call.strip()
                + "\n\nYou want a human agent to handle this, not an automated assistant.",
                "task_instructions": instructions,
            }
        ),
    )
    return Task(
        id=derived_id("explicit_request", parent.id, template),
        description=_description(
            "explicit_request", parent, template,
            "The user insists on a human agent: the agent must call transfer_to_human_agents and change nothing.",
            TRANSFER_CLAUSE,
        ),
        user_scenario=scenario,
        evaluation_criteria=_transfer_criteria(
            f"The user explicitly asks for a human agent. Their request: {parent_instr.reason_for_call.strip()}"
        ),
    )


def _hard_negative(parent, template: str):
    from tau2.data_model.tasks import Task

    persona = HARD_NEGATIVE[template]
    parent_instr = parent.user_scenario.instructions
    instructions = parent_instr.model_copy(
        update={"task_instructions": f"{parent_instr.task_instructions.strip()}\n\n{NO_HUMAN}"}
    )
    parent_purpose = parent.description.purpose if parent.description else None
    purpose = (
        f"A difficult user ({template}) who never asks for a human, with the parent's solvable issue: the agent must "
        "solve it without a transfer."
    )
    return Task(
        id=derived_id("hard_negative", parent.id, template),
        description=_description(
            "hard_negative", parent, template,
            f"{purpose} Parent's purpose: {parent_purpose}" if parent_purpose else purpose,
            "Deny requests that are against the policy; transfer only if the request cannot be handled within the "
            "scope of the agent's actions or the user explicitly asks for a human agent.",
        ),
        user_scenario=parent.user_scenario.model_copy(update={"persona": persona, "instructions": instructions}),
        initial_state=parent.initial_state,
        evaluation_criteria=parent.evaluation_criteria,
    )


# Upstream tasks whose user may ask for a human: never parents of hard negatives.
ASKS_FOR_HUMAN = {
    "airline": {"3": "asks for a supervisor if told she is a Silver member"},
    "retail": {"25": "asks for a human if the refund cannot go to an amex card"},
}


def hard_negative_candidates(domain: str) -> list:
    """Solvable parents: a reference solution that writes to the database and contains no transfer."""
    writes = write_tools(domain)
    return [
        t for t in upstream_tasks(domain)
        if not has_gold_transfer(t)
        and t.id not in ASKS_FOR_HUMAN[domain]
        and any(a.name in writes for a in t.evaluation_criteria.actions or [])
    ]


# --- out of scope: a catalog request told by the parent task's user -----------------------------------


def _user_id(domain: str, task) -> str | None:
    """The db user of an upstream task: named by id, email, or name and zip code in what the user knows,
    or by the user_id of its reference actions. None unless exactly one user matches."""
    users = raw_db(domain)["users"]
    instr = task.user_scenario.instructions
    text = " ".join(filter(None, [instr.known_info, instr.reason_for_call])).lower()
    found = {a.arguments["user_id"] for a in task.evaluation_criteria.actions or [] if "user_id" in a.arguments}
    for uid, user in users.items():
        name = f"{user['name']['first_name']} {user['name']['last_name']}".lower()
        zip_code = user.get("address", {}).get("zip")
        if uid in text or user["email"].lower() in text or (name in text and zip_code and zip_code in text):
            found.add(uid)
    return found.pop() if len(found) == 1 else None


def _airline_fields(user: dict) -> dict | None:
    reservations = [raw_db("airline")["reservations"][r] for r in sorted(user["reservations"])]
    upcoming = [r for r in reservations if min(f["date"] for f in r["flights"]) > TODAY]
    flown = sorted((f["date"], f["flight_number"]) for r in reservations for f in r["flights"] if f["date"] < TODAY)
    if not upcoming:
        return None
    trip = upcoming[0]
    fields = {
        "reservation_id": trip["reservation_id"],
        "route": f"{trip['origin']} to {trip['destination']}",
        "date": min(f["date"] for f in trip["flights"]),
        "known_info": f"You are {user['name']['first_name']} {user['name']['last_name']}. "
        f"Your user id is {user['user_id']}.",
    }
    if flown:  # only some users have flown already: requests about a past flight need one
        fields["past_date"], fields["past_flight"] = flown[0]
    return fields


def _retail_fields(user: dict) -> dict | None:
    orders = [raw_db("retail")["orders"][o] for o in sorted(user["orders"])]
    delivered = [o for o in orders if o["status"] == "delivered"]
    if not delivered:
        return None
    order = delivered[0]
    return {
        "order_id": order["order_id"],
        "item": order["items"][0]["name"].lower(),
        "known_info": f"You are {user['name']['first_name']} {user['name']['last_name']}, your email is "
        f"{user['email']} and your zip code is {user['address']['zip']}.",
    }


def _scenario_fields(domain: str, task) -> dict | None:
    uid = _user_id(domain, task)
    if uid is None:
        return None
    user = raw_db(domain)["users"][uid]
    return _airline_fields(user) if domain == "airline" else _retail_fields(user)


def _assign_requests(domain: str, parents: list, fields: dict) -> list:
    """Give each parent the least used catalog request its user's data can fill (ties: catalog order)."""
    uses = {request.id: 0 for request in out_of_scope.CATALOG[domain]}
    pairs = []
    for parent in parents:
        fitting = [r for r in out_of_scope.CATALOG[domain] if r.placeholders() <= fields[parent.id].keys()]
        request = min(fitting, key=lambda r: uses[r.id])
        uses[request.id] += 1
        pairs.append((parent, request))
    return pairs


def _out_of_scope(domain: str, parent, request: out_of_scope.OutOfScopeRequest, fields: dict):
    from tau2.data_model.tasks import StructuredUserInstructions, Task, UserScenario

    reason = request.request.format(**fields)
    scenario = UserScenario(
        instructions=StructuredUserInstructions(
            domain=domain, reason_for_call=reason, known_info=fields["known_info"],
            task_instructions=OUT_OF_SCOPE_INSTRUCTIONS,
        )
    )
    policies = (
        f"Tools checked: {request.tools_checked} Policy clauses checked: {request.policy_checked} "
        f"Why out of scope: {request.why} {TRANSFER_CLAUSE}"
    )
    return Task(
        id=derived_id("out_of_scope", parent.id, request.id),
        description=_description(
            "out_of_scope", parent, request.id,
            "The user asks for something no tool and no policy clause covers: the agent must call "
            "transfer_to_human_agents and change nothing.",
            policies,
        ),
        user_scenario=scenario,
        evaluation_criteria=_transfer_criteria(f"Out-of-scope request: {reason}"),
    )


# --- building ---------------------------------------------------------------------------------------------


def _sorted(tasks: list) -> list:
    return sorted(tasks, key=lambda t: int(parse_derived_id(t.id).parent_id))


def build_kind(domain: str, kind: str) -> list:
    """The derived tasks of one kind, ordered by parent id."""
    n = COUNTS[domain]
    if kind == "explicit_request":
        parents = select_parents(domain, kind, list(upstream_tasks(domain)), n)
        templates = list(EXPLICIT_REQUEST)
        return _sorted([_explicit_request(p, templates[i % len(templates)]) for i, p in enumerate(parents)])
    if kind == "hard_negative":
        parents = select_parents(domain, kind, hard_negative_candidates(domain), n)
        templates = list(HARD_NEGATIVE)
        return _sorted([_hard_negative(p, templates[i % len(templates)]) for i, p in enumerate(parents)])
    if kind == "out_of_scope":
        fields = {t.id: _scenario_fields(domain, t) for t in upstream_tasks(domain)}
        parents = select_parents(domain, kind, [t for t in upstream_tasks(domain) if fields[t.id]], n)
        pairs = _assign_requests(domain, parents, fields)
        return _sorted([_out_of_scope(domain, p, request, fields[p.id]) for p, request in pairs])
    raise ValueError(f"unknown derived kind {kind!r}: expected one of {', '.join(KINDS)}")
