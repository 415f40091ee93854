"""Derived task sets, built deterministically from the pinned tau2 tasks (docs/tasks.md).

Derived task id: "<kind>-<parent id>-<template>", e.g. "explicit_request-12-insist". A parent is used
at most once per kind, so the id is unique; the task inherits its parent's train/test split.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache

import yaml

from handoff.tasks import paths
from handoff.tasks.build import audit, catalog, gold_policy
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
# Tasks per derived kind. Airline has 18 hard-negative parents (solvable, no transfer, a gold that changes the
# database and follows the policy, handoff.tasks.build.gold_policy): all of them are used.
COUNTS = {
    "airline": {"explicit_request": 24, "out_of_scope": 24, "hard_negative": 18},
    "retail": {"explicit_request": 36, "out_of_scope": 36, "hard_negative": 36},
}
TODAY = "2024-05-15"  # airline policy: "The current time is 2024-05-15 15:00:00 EST."
TRANSFER_CLAUSE = (
    "Transfer the user to a human agent if and only if the request cannot be handled within the scope of your "
    "actions (both policies); transfer_to_human_agents: only transfer if the user explicitly asks for a human "
    "agent or you cannot solve the user's issue with the policy and the tools."
)

TEMPLATES = {
    "explicit_request": ("insist", "after_first_reply", "distrust"),
    "hard_negative": ("impatient", "rude", "threatening"),
}


@cache
def scenarios(domain: str) -> dict:
    """The hand-written text of the domain's derived tasks (data/scenarios/<domain>.yaml); ValueError for a text
    that does not end a sentence (in YAML, " #" starts a comment: an unquoted order id cuts the text short)."""
    doc = yaml.safe_load((paths.REPO_ROOT / paths.scenario_file(domain)).read_text())
    cut = [where for where, text in _texts(doc, "") if not text.rstrip().endswith((".", "!", "?", ")"))]
    if cut:
        raise ValueError(f"{paths.scenario_file(domain)}: texts that do not end a sentence (quote a text with '#'): "
                         + ", ".join(cut))
    return doc


def _texts(node, where: str):
    """(path, text) of every string in a YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _texts(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _texts(value, f"{where}/{i}")
    elif isinstance(node, str):
        yield where, node


@cache
def product_classes() -> dict[str, set[str]]:
    """Retail product classes for complaints (data/scenarios/retail_products.yaml)."""
    doc = yaml.safe_load((paths.REPO_ROOT / paths.PRODUCT_CLASSES_FILE).read_text())
    return {name: set(products) for name, products in doc.items() if isinstance(products, list)}


def damage_phrases() -> dict[str, str]:
    return yaml.safe_load((paths.REPO_ROOT / paths.PRODUCT_CLASSES_FILE).read_text())["damage"]


def _pick(options: list, index: int):
    return options[index % len(options)]


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
    """n parents, stratified by split (same train/test proportion as upstream; a split with fewer eligible
    parents gives all of them and the other split the rest), in a fixed pseudo-random order."""
    split_of = upstream_splits(domain)
    n_test = round(n * list(split_of.values()).count("test") / len(split_of))
    pools = {
        split: sorted((t for t in candidates if split_of[t.id] == split), key=lambda t: _order_key(domain, kind, t))
        for split in SPLITS
    }
    wanted = {"train": n - n_test, "test": n_test}
    for split, other in (("train", "test"), ("test", "train")):
        short = max(0, wanted[split] - len(pools[split]))
        wanted[split] -= short
        wanted[other] += short
    if any(wanted[s] > len(pools[s]) for s in SPLITS):
        raise ValueError(f"{domain}/{kind}: {sum(map(len, pools.values()))} eligible parents, {n} needed")
    chosen = [t for s in SPLITS for t in pools[s][:wanted[s]]]
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


def _request_of(domain: str, parent) -> str:
    requests = scenarios(domain)["explicit_request"]["requests"]
    if parent.id not in requests:
        raise ValueError(
            f"{paths.scenario_file(domain)}: explicit_request.requests has no entry for parent {parent.id}: "
            "write what this user needs in their own words"
        )
    return requests[parent.id].strip()


def _explicit_request(domain: str, parent, template: str, k: int):
    """The parent's user and need, told anew: no line of the parent's script, only the kind's behaviour."""
    from tau2.data_model.tasks import StructuredUserInstructions, Task, UserScenario

    text = scenarios(domain)["explicit_request"]["templates"][template]
    request = _request_of(domain, parent)
    behaviour = f"{_pick(text['openings'], k)} {_pick(text['persistence'], k // len(text['openings']))}"
    parent_instr = parent.user_scenario.instructions
    scenario = UserScenario(
        persona=_pick(text["personas"], k),
        instructions=StructuredUserInstructions(
            domain=domain,
            reason_for_call=f"{request} You want a human agent to handle this, not an automated assistant.",
            known_info=scenarios(domain)["explicit_request"].get("known_info", {}).get(parent.id,
                                                                                     parent_instr.known_info),
            unknown_info=parent_instr.unknown_info,
            task_instructions=behaviour,
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
        evaluation_criteria=_transfer_criteria(f"The user explicitly asks for a human agent. Their request: {request}"),
    )


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

    text = scenarios(domain)["hard_negative"]
    parent_instr = parent.user_scenario.instructions
    instructions = parent_instr.model_copy(
        update={
            "reason_for_call": strip_persona_lines(parent_instr.reason_for_call, domain),
            "task_instructions": "\n\n".join(filter(None, [
                strip_persona_lines(parent_instr.task_instructions, domain),
                _pick(text["conduct"][template], k),
                _pick(text["no_human"], k // len(text["conduct"][template])),
            ])),
        }
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
            "Deny requests that are against the policy (policy.md); transfer only if the request cannot be handled "
            "within the scope of the agent's actions (policy.md) or the user explicitly asks for a human agent (the "
            "transfer_to_human_agents tool description).",
        ),
        user_scenario=UserScenario(persona=_pick(text["personas"][template], k), instructions=instructions),
        initial_state=parent.initial_state,
        evaluation_criteria=parent.evaluation_criteria,
    )


# Upstream tasks whose user may ask for a human: never parents of hard negatives.
ASKS_FOR_HUMAN = {
    "airline": {"3": "asks for a supervisor if told she is a Silver member"},
    "retail": {"25": "asks for a human if the refund cannot go to an amex card"},
}


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
    DB check fails an agent that transfers instead) and follows the policy (handoff.tasks.build.gold_policy)."""
    writes = write_tools(domain)
    return [
        t for t in upstream_tasks(domain)
        if not has_gold_transfer(t)
        and t.id not in ASKS_FOR_HUMAN[domain]
        and any(a.name in writes for a in t.evaluation_criteria.actions or [])
        and gold_changes_db(domain, t)
        and gold_policy.gold_complies(domain, t)
    ]


# --- out of scope: a catalog request told by the parent task's user -----------------------------------


def _user_id(domain: str, task) -> str | None:
    """The db user of an upstream task: named by id, email, or name and zip code in what the user knows,
    or by the user_id of its reference actions. None unless exactly one user matches."""
    instr = task.user_scenario.instructions
    named = audit.find_user(domain, " ".join(filter(None, [instr.known_info, instr.reason_for_call])))
    found = {a.arguments["user_id"] for a in task.evaluation_criteria.actions or [] if "user_id" in a.arguments}
    if named:
        found.add(named)
    return found.pop() if len(found) == 1 else None


def route(reservation: dict) -> str:
    """"ORIGIN to DESTINATION"; the first flight's destination when the db gives the origin twice."""
    first = min(reservation["flights"], key=lambda f: f["date"])
    destination = reservation["destination"]
    return f"{reservation['origin']} to {first['destination'] if destination == reservation['origin'] else destination}"


def _first_date(reservation: dict) -> str:
    return min(f["date"] for f in reservation["flights"])


def _flown(reservation: dict) -> list[tuple[str, str]]:
    """(date, flight number) of the reservation's flights that landed before today."""
    flights = raw_db("airline")["flights"]
    return sorted(
        (f["date"], f["flight_number"]) for f in reservation["flights"]
        if f["date"] < TODAY and flights[f["flight_number"]]["dates"].get(f["date"], {}).get("status") == "landed"
    )


def _airline_fields(user: dict, request: catalog.OutOfScopeRequest) -> dict:
    """Facts of the user's db record: the earliest upcoming reservation (by first flight date, then id),
    the earliest landed flight, and the earliest landed flight of a reservation with checked bags; for a
    request about who flies, only reservations the user is a passenger of."""
    reservations = [raw_db("airline")["reservations"][r] for r in sorted(user["reservations"])]
    reservations = [r for r in reservations if not request.traveller or audit.is_passenger(user, r)]
    fields = {
        "known_info": f"You are {user['name']['first_name']} {user['name']['last_name']}. "
        f"Your user id is {user['user_id']}.",
        "city": user["address"]["city"],
        "method_count": len(user["payment_methods"]),
    }
    upcoming = sorted((r for r in reservations if _first_date(r) > TODAY and audit.is_upcoming(r)),
                      key=lambda r: (_first_date(r), r["reservation_id"]))
    if upcoming:
        trip = upcoming[0]
        fields |= {"reservation_id": trip["reservation_id"], "route": route(trip), "date": _first_date(trip)}
    flown = sorted((date, number, r["reservation_id"]) for r in reservations for date, number in _flown(r))
    if flown:
        fields["past_date"], fields["past_flight"] = flown[0][:2]
    bags = raw_db("airline")["reservations"]
    with_bags = [f for f in flown if bags[f[2]]["total_baggages"] > 0]
    if with_bags:
        fields["bag_date"], fields["bag_flight"], fields["bag_reservation"] = with_bags[0]
    return fields


_SOURCES = {"paypal": "a PayPal account", "gift_card": "a gift card"}


def _methods(user: dict) -> str:
    names = [
        _SOURCES.get(m["source"]) or f"a {m.get('brand', 'credit').title()} card"
        for _, m in sorted(user["payment_methods"].items())
    ]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _restock_option(item: dict) -> dict | None:
    """An option value of the item's product, other than the bought one, that every variant having it
    lacks in stock."""
    product = raw_db("retail")["products"][item["product_id"]]
    variants = list(product["variants"].values())
    for key in sorted(item["options"]):
        for value in sorted({str(v["options"][key]) for v in variants if key in v["options"]}):
            having = [v for v in variants if str(v["options"].get(key)) == value]
            if value != str(item["options"][key]) and not any(v["available"] for v in having):
                return {"option": key, "value": value}
    return None


def _item_fields(item: dict, item_class: str | None) -> dict | None:
    """Fields of one delivered item if it fits the request's class of product, else None."""
    name, classes = item["name"], product_classes()
    fields = {"item": name.lower(), "paid": f"{item['price']:.2f}", "lower": f"{round(item['price'] * 0.85, 2):.2f}"}
    if item_class == "powered":
        return fields if name in classes["powered"] else None
    if item_class == "damage":
        hazard = next((h for h in ("heat", "leak") if name in classes[h]), None)
        return fields | {"damage": damage_phrases()[hazard]} if hazard else None
    if item_class == "restock":
        option = _restock_option(item)
        return fields | option if option else None
    return fields


def _retail_fields(user: dict, request: catalog.OutOfScopeRequest) -> dict:
    """Facts of the user's db record; the order and item are the first delivered ones (by order id, then
    position in the order) that fit the request's class of product."""
    fields = {
        "known_info": f"You are {user['name']['first_name']} {user['name']['last_name']}, your email is "
        f"{user['email']} and your zip code is {user['address']['zip']}.",
        "email": user["email"], "first_name": user["name"]["first_name"], "last_name": user["name"]["last_name"],
        "methods": _methods(user),
    }
    orders = [raw_db("retail")["orders"][o] for o in sorted(user["orders"])]
    for order in (o for o in orders if o["status"] == "delivered"):
        for item in order["items"]:
            found = _item_fields(item, request.item_class)
            if found:
                return fields | found | {"order_id": order["order_id"]}
    return fields


def _wordings(domain: str, request: catalog.OutOfScopeRequest) -> list[str]:
    wordings = scenarios(domain)["out_of_scope"]["requests"].get(request.id)
    if not wordings:
        raise ValueError(f"{paths.scenario_file(domain)}: out_of_scope.requests has no wording for {request.id!r}")
    return wordings


def _fields(domain: str, user_id: str, request: catalog.OutOfScopeRequest) -> dict | None:
    """The user's facts for the request, or None when they cannot ground every wording of it."""
    user = raw_db(domain)["users"][user_id]
    fields = _airline_fields(user, request) if domain == "airline" else _retail_fields(user, request)
    fits = all(catalog.placeholders(w) <= fields.keys() for w in _wordings(domain, request))
    return fields if fits else None


def _assign_requests(domain: str, parents: list, users: dict) -> list[tuple]:
    """Give each parent the least used catalog request its user's data can ground, avoiding a request its
    user already makes in another task (ties: catalog order); returns (parent, request, fields, how often
    the request was used before)."""
    uses = {request.id: 0 for request in catalog.CATALOG[domain]}
    made: set[tuple[str, str]] = set()  # (user, request) pairs already used
    chosen = []
    for parent in parents:
        user = users[parent.id]
        grounded = [(r, f) for r in catalog.CATALOG[domain] if (f := _fields(domain, user, r))]
        if not grounded:
            raise ValueError(f"{domain}/{parent.id}: no out-of-scope request fits the user's data")
        request, fields = min(grounded, key=lambda pair: ((user, pair[0].id) in made, uses[pair[0].id]))
        chosen.append((parent, request, fields, uses[request.id]))
        uses[request.id] += 1
        made.add((user, request.id))
    return chosen


def _out_of_scope(domain: str, parent, request: catalog.OutOfScopeRequest, fields: dict, j: int, i: int):
    from tau2.data_model.tasks import StructuredUserInstructions, Task, UserScenario

    reason = _pick(_wordings(domain, request), j).format(**fields)
    text = scenarios(domain)["out_of_scope"]["instructions"]
    n_open, n_push = len(text["openings"]), len(text["pushback"])
    behaviour = " ".join([
        _pick(text["openings"], i), _pick(text["pushback"], i // n_open), _pick(text["endings"], i // (n_open * n_push)),
    ])
    scenario = UserScenario(
        instructions=StructuredUserInstructions(
            domain=domain, reason_for_call=reason, known_info=fields["known_info"], task_instructions=behaviour,
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


def _with_templates(kind: str, parents: list) -> list[tuple]:
    """(parent, template, k, i): templates round-robin along the parent order; k counts the template's uses."""
    templates = TEMPLATES[kind]
    return [(p, templates[i % len(templates)], i // len(templates), i) for i, p in enumerate(parents)]


def _build(domain: str, kind: str) -> list:
    n = COUNTS[domain][kind]
    if kind == "explicit_request":
        parents = select_parents(domain, kind, list(upstream_tasks(domain)), n)
        return [_explicit_request(domain, p, t, k) for p, t, k, _ in _with_templates(kind, parents)]
    if kind == "hard_negative":
        parents = select_parents(domain, kind, hard_negative_candidates(domain), n)
        return [_hard_negative(domain, p, t, k) for p, t, k, _ in _with_templates(kind, parents)]
    if kind == "out_of_scope":
        users = {t.id: _user_id(domain, t) for t in upstream_tasks(domain)}
        parents = select_parents(domain, kind, [t for t in upstream_tasks(domain) if users[t.id]], n)
        chosen = _assign_requests(domain, parents, users)
        return [_out_of_scope(domain, p, r, f, j, i) for i, (p, r, f, j) in enumerate(chosen)]
    raise ValueError(f"unknown derived kind {kind!r}: expected one of {', '.join(KINDS)}")


def build_kind(domain: str, kind: str) -> list:
    """The derived tasks of one kind, ordered by parent id; ValueError if any fails the annotator's checks
    (handoff.tasks.build.audit)."""
    tasks = _sorted(_build(domain, kind))
    parents = {t.id: t for t in upstream_tasks(domain)}
    findings = audit.audit(domain, kind, tasks, parents, product_classes())
    if findings:
        raise ValueError(f"{domain}/{kind}: derived tasks fail the checks:\n  " + "\n  ".join(
            f"{f.task_id}: {f.check}: {f.message}" for f in findings))
    return tasks
