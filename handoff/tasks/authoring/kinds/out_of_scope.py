"""The out_of_scope kind: a request of the out-of-scope catalog (handoff.tasks.authoring.catalog) told by the
parent task's user, with facts of that user's db record; the agent must transfer and change nothing."""

from __future__ import annotations

from handoff.tasks import paths
from handoff.tasks.authoring import audit, catalog, derive
from handoff.tasks.authoring.audit import Finding
from handoff.tasks.authoring.behaviour import AGENTS
from handoff.tasks.authoring.kinds.base import Kind, derived_label
from handoff.tasks.domains import facts
from handoff.tasks.domains.airline import TODAY
from handoff.tasks.ids import derived_id
from handoff.tasks.upstream import raw_db, upstream_tasks


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
    name, classes = item["name"], derive.product_classes()
    fields = {"item": name.lower(), "paid": f"{item['price']:.2f}", "lower": f"{round(item['price'] * 0.85, 2):.2f}"}
    if item_class == "powered":
        return fields if name in classes["powered"] else None
    if item_class == "damage":
        hazard = next((h for h in ("heat", "leak") if name in classes[h]), None)
        return fields | {"damage": derive.damage_phrases()[hazard]} if hazard else None
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


def _telecom_fields(customer: dict, request: catalog.OutOfScopeRequest) -> dict:
    """Facts of the customer's db record: their own line (the customer's phone number), its plan and phone."""
    db = raw_db("telecom")
    line = next(db["lines"][i] for i in customer["line_ids"] if db["lines"][i]["phone_number"] ==
                customer["phone_number"])
    return {
        "known_info": f"You are {customer['full_name']} with phone number {line['phone_number']}.",
        "phone": line["phone_number"], "plan": db["plans"][line["plan_id"]]["name"],
        "device": db["devices"][line["device_id"]]["model"], "city": customer["address"]["city"],
    }


# The facts of a domain's db user that fill the placeholders of its wordings.
FIELDS = {"airline": _airline_fields, "retail": _retail_fields, "telecom": _telecom_fields}
USERS = {"telecom": "customers"}  # the db collection of the domain's users; others: "users"


def _wordings(domain: str, request: catalog.OutOfScopeRequest) -> list[str]:
    wordings = derive.scenarios(domain)["out_of_scope"]["requests"].get(request.id)
    if not wordings:
        raise ValueError(f"{paths.scenario_file(domain)}: out_of_scope.requests has no wording for {request.id!r}")
    return wordings


def _fields(domain: str, user_id: str, request: catalog.OutOfScopeRequest) -> dict | None:
    """The user's facts for the request, or None when they cannot ground every wording of it."""
    user = raw_db(domain)[USERS.get(domain, "users")][user_id]
    fields = FIELDS[domain](user, request)
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

    reason = derive.pick(_wordings(domain, request), j).format(**fields)
    text = derive.scenarios(domain)["out_of_scope"]["instructions"]
    n_open, n_push = len(text["openings"]), len(text["pushback"])
    behaviour = " ".join([
        derive.pick(text["openings"], i), derive.pick(text["pushback"], i // n_open),
        derive.pick(text["endings"], i // (n_open * n_push)),
    ])
    scenario = UserScenario(
        instructions=StructuredUserInstructions(
            domain=domain, reason_for_call=reason, known_info=fields["known_info"], task_instructions=behaviour,
        )
    )
    policies = (
        f"Tools checked: {request.tools_checked} Policy clauses checked: {request.policy_checked} "
        f"Why out of scope: {request.why} {derive.transfer_clause(domain)}"
    )
    return Task(
        id=derived_id("out_of_scope", parent.id, request.id),
        description=derive.description(
            "out_of_scope", parent, request.id,
            "The user asks for something no tool and no policy clause covers: the agent must call "
            "transfer_to_human_agents and change nothing.",
            policies,
        ),
        user_scenario=scenario,
        initial_state=derive.initial_state(domain, parent, identity_only=True),
        evaluation_criteria=derive.transfer_criteria(f"Out-of-scope request: {reason}"),
    )


def derive_tasks(domain: str) -> list:
    users = {t.id: _user_id(domain, t) for t in upstream_tasks(domain)}
    parents = derive.select_parents(domain, "out_of_scope", [t for t in upstream_tasks(domain) if users[t.id]],
                                    facts(domain).COUNTS["out_of_scope"])
    chosen = _assign_requests(domain, parents, users)
    return [_out_of_scope(domain, p, r, f, j, i) for i, (p, r, f, j) in enumerate(chosen)]


def checks(domain: str, task, parent) -> list[Finding]:
    return [Finding("parent_script", task.id, f"keeps the parent's line {s!r}")
            for s in audit.kept_parent_lines(task, parent)]


KIND = Kind(name="out_of_scope", label=derived_label("out_of_scope", True), agents=AGENTS,
            expected={"gold": 1.0, "nothing": 0.0, "transfer_only": 1.0}, derive=derive_tasks, checks=checks)
