"""An annotator's checks of the derived tasks, each by the general form of a defect class.

- `persona_contradiction` (hard_negative): a line outside the persona asserts a calm or pleasant trait
  ("You are calm", "Be polite and ...", "You are curious, patient") while the persona is a difficult user.
- `parent_script` (explicit_request, out_of_scope): a sentence of the parent's scripted scenario is kept
  in a task that must be handed off.
- `asks_for_a_solution` (explicit_request, out_of_scope): the user is told to get the agent to do the
  job itself ("Be insistent that the agent should undo ...", "ask the agent to cancel ...", "When asked
  for the order id, provide ... first").
- `false_premise` (out_of_scope): a fact the request states is false in the domain's db.json (the order,
  item, reservation or flight named; a price claim; a product option; the kind of product for the
  complaint; bags on a reservation).

`handoff labels build` refuses to write task sets with findings; tests run the same checks.
"""

from __future__ import annotations

import re
from functools import cache
from typing import NamedTuple

from handoff.tasks.upstream import raw_db

TODAY = "2024-05-15"  # airline policy: "The current time is 2024-05-15 15:00:00 EST."
CHECKS = ("persona_contradiction", "parent_script", "asks_for_a_solution", "false_premise")


class Finding(NamedTuple):
    check: str
    task_id: str
    message: str


def sentences(text: str | None) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text or "") if s.strip()]


def _scenario_text(task) -> str:
    instructions = task.user_scenario.instructions
    return "\n".join(filter(None, [instructions.reason_for_call, instructions.task_instructions]))


# --- persona against the kind ------------------------------------------------------------------------------

CALM_TRAITS = (
    "polite|calm|patient|happy|friendly|lenient|courteous|cheerful|optimistic|relaxed|relaxing|easy-?going|gentle|"
    "kind|nice|pleasant|grateful|cooperative"
)
# "You are curious, patient", "Be polite and thank", "You stay calm": a trait the user is told to show.
# "happy with the refund", "happy to exchange" state a preference, "not happy" agrees with a difficult user.
_CALM_LINE = re.compile(
    rf"\b(you are|you're|be|stay|remain|you stay|you remain)\s+(?!not\b)(?:[a-z-]+,?\s+){{0,4}}?({CALM_TRAITS})\b"
    r"(?!\s+(with|to|that|about|for)\b)",
    re.IGNORECASE,
)


# A line that sets the user's temperament: "You are polite, optimistic, organized.", "Be polite and ...".
_TEMPERAMENT = (
    f"{CALM_TRAITS}|organized|busy|messy|sad|insecure|shy|rigid|confident|cautious|pessimistic|dependent|"
    "independent|outgoing|logical|curious|flexible|creative|direct|brief|concise|impatient|emotional|stressed|"
    "distraught|upset|detail-oriented|mysterious"
)
_PERSONA_LINE = re.compile(
    rf"^(you are|you're|be)\s+((extremely|very|quite|now|a bit|pretty|rather)\s+)?({_TEMPERAMENT})\b"
    r"(?!\s+(with|to|that|about|for)\b)",
    re.IGNORECASE,
)


def is_persona_line(sentence: str) -> bool:
    """A sentence that sets the user's temperament (a parent's persona line)."""
    return bool(_PERSONA_LINE.search(sentence.strip()))


def calm_lines(text: str | None) -> list[str]:
    return [s for s in sentences(text) if _CALM_LINE.search(s)]


def _persona_findings(task) -> list[Finding]:
    return [
        Finding("persona_contradiction", task.id, f"a difficult user told: {line!r}")
        for line in calm_lines(_scenario_text(task))
    ]


# --- parent scripts and requests for a solution in a task that must be handed off ---------------------------

_HUMAN = re.compile(r"\b(human|person|representative|supervisor|manager|transfer\w*)\b", re.IGNORECASE)
_ASKS_AGENT = re.compile(
    r"\b(ask|asks|tell|insist|insistent|want|get|make sure|have|convince|push|request)\b[^.]{0,60}?"
    r"\b(the (customer service )?agent|get it)\b[^.]{0,30}?\b(to|should|must|for)\b|"
    r"\b(make sure|ensure|see to it)\b[^.]{0,20}?\bthe (customer service )?agent\b",
    re.IGNORECASE,
)
_SCRIPTED_ANSWER = re.compile(
    r"\bwhen (asked|the agent asks)\b[^.]*\b(provide|give|say|respond)\b[^.]*\b(first|exactly)\b|"
    r"\brespond exactly\b|\bif (and only if )?the agent (gives|offers|says)\b[^.]*\b(go for|choose|prefer)\b",
    re.IGNORECASE,
)


def solution_requests(text: str | None) -> list[str]:
    """Sentences that tell the user to get the agent to solve the issue itself (not hand it off)."""
    return [
        s for s in sentences(text)
        if not _HUMAN.search(s) and (_ASKS_AGENT.search(s) or _SCRIPTED_ANSWER.search(s))
    ]


def _words(sentence: str) -> str:
    return " ".join(re.findall(r"[a-z0-9']+", sentence.lower()))


def kept_parent_lines(task, parent) -> list[str]:
    """Sentences (6 words or more) of the parent's reason and instructions found in the task's scenario."""
    derived = _words(_scenario_text(task))
    return [s for s in sentences(_scenario_text(parent)) if len(_words(s).split()) >= 6 and _words(s) in derived]


# --- out-of-scope premises against db.json -------------------------------------------------------------------


@cache
def _retail_index() -> tuple[dict, dict, dict]:
    db = raw_db("retail")
    variants = {vid: (p, v) for p in db["products"].values() for vid, v in p["variants"].items()}
    by_email = {u["email"].lower(): uid for uid, u in db["users"].items()}
    return db, variants, by_email


def _retail_user(task) -> str | None:
    db, _, by_email = _retail_index()
    known = (task.user_scenario.instructions.known_info or "").lower()
    for uid in db["users"]:
        if uid in known:
            return uid
    emails = [uid for email, uid in by_email.items() if email in known]
    return emails[0] if emails else None


_COMPLAINTS = {  # words of a complaint -> the product class (data/scenarios/retail.yaml) it needs
    "heat": re.compile(r"\b(overheat\w*|scorch\w*|burn\w*|melt\w*|smok\w*)\b", re.IGNORECASE),
    "leak": re.compile(r"\b(leak\w*|flood\w*|soak\w*)\b", re.IGNORECASE),
    "powered": re.compile(
        r"\b(stopped working|stops working|won't (turn|switch) on|does not (turn|switch) on|no longer (turns|switches) on|"
        r"(will|does) not charge|won't charge|dead)\b",
        re.IGNORECASE,
    ),
}
_OWN_PRICE = re.compile(r"\b(now cheaper|cheaper now|price (has )?(dropped|gone down)|costs less now|on sale)\b", re.I)
_OTHER_SHOP = re.compile(r"\b(another|other) (store|shop|retailer)\b|\bcompetitor\b", re.IGNORECASE)
_PAID = re.compile(r"\bpaid \$(\d+(?:\.\d\d)?)")


def _retail_premises(task, product_classes: dict[str, set[str]]) -> list[str]:
    db, variants, _ = _retail_index()
    text = task.user_scenario.instructions.reason_for_call
    lowered = text.lower()
    user = _retail_user(task)
    problems = [] if user else ["the user's known info names no db user"]
    for order_id in re.findall(r"#W\d{7}", text):
        order = db["orders"].get(order_id)
        if order is None:
            problems.append(f"order {order_id} does not exist")
            continue
        if order["user_id"] != user:
            problems.append(f"order {order_id} belongs to {order['user_id']}, not the user")
        if re.search(r"\bdelivered\b", lowered) and order["status"] != "delivered":
            problems.append(f"order {order_id} is {order['status']}, not delivered")
        named = [i for i in order["items"] if re.search(rf"\b{re.escape(i['name'].lower())}\b", lowered)]
        all_products = {p["name"].lower() for p in db["products"].values()}
        if not named and any(re.search(rf"\b{re.escape(n)}\b", lowered) for n in all_products):
            problems.append(f"the product named is not in order {order_id}")
        for item in named[:1]:
            problems += _item_premises(text, item, variants, product_classes)
    return problems


def _item_premises(text: str, item: dict, variants: dict, product_classes: dict[str, set[str]]) -> list[str]:
    product, variant = variants[item["item_id"]]
    name, problems = product["name"], []
    for kind, pattern in _COMPLAINTS.items():
        if pattern.search(text) and name not in product_classes[kind]:
            problems.append(f"a {name} cannot {pattern.search(text).group(0)} (not in the {kind!r} product class)")
    if _OWN_PRICE.search(text) and not _OTHER_SHOP.search(text) and not variant["price"] < item["price"]:
        problems.append(f"the {name} costs {variant['price']} now, paid {item['price']}: not cheaper")
    for paid in _PAID.findall(text):
        if abs(float(paid) - item["price"]) > 0.005:
            problems.append(f"the {name} was paid {item['price']}, not {paid}")
    options = {k for v in product["variants"].values() for k in v["options"]}
    every_option = {k for _, (p, _) in variants.items() for v in p["variants"].values() for k in v["options"]}
    for s in sentences(text):
        if not re.search(r"\b(stock|comes in|version|variant|sold)\b", s, re.IGNORECASE):
            continue
        for key in every_option - options:
            if re.search(rf"\b{re.escape(key)}\b", s, re.IGNORECASE):
                problems.append(f"a {name} has no {key!r} option")
        for key, value in re.findall(r"\b([a-z][a-z ]*?) \"([^\"]+)\"", s):
            key = key.split()[-1] if key not in options else key
            matching = [v for v in product["variants"].values() if str(v["options"].get(key)) == value]
            if not matching:
                problems.append(f"no {name} with {key} {value!r}")
            elif "out of stock" in s.lower() and any(v["available"] for v in matching):
                problems.append(f"the {name} with {key} {value!r} is in stock")
    return problems


_BAG_CLAIM = re.compile(r"\b(bag|bags|baggage|suitcase|luggage)\b[^.]*\b(did not arrive|never arrived|lost|missing|trace)\b", re.I)


def _airline_premises(task) -> list[str]:
    db = raw_db("airline")
    text = task.user_scenario.instructions.reason_for_call
    known = task.user_scenario.instructions.known_info or ""
    users = [uid for uid in db["users"] if uid in known]
    if len(users) != 1:
        return ["the user's known info names no single db user"]
    user = db["users"][users[0]]
    mine = [db["reservations"][r] for r in user["reservations"]]
    problems = []
    for rid in re.findall(r"\b[A-Z0-9]{6}\b", text):
        if rid in db["reservations"]:
            reservation = db["reservations"][rid]
            if reservation["user_id"] != user["user_id"]:
                problems.append(f"reservation {rid} is not the user's")
            elif re.search(r"\bupcoming\b", text) and min(f["date"] for f in reservation["flights"]) <= TODAY:
                problems.append(f"reservation {rid} is not upcoming")
            stated = re.search(rf"{rid} \(([A-Z]{{3}}) to ([A-Z]{{3}}) on (\d{{4}}-\d\d-\d\d)\)", text)
            first = min(reservation["flights"], key=lambda f: f["date"])
            ends = {reservation["destination"], first["destination"]}
            if stated and (stated[1] != reservation["origin"] or stated[2] not in ends or stated[3] != first["date"]):
                problems.append(f"reservation {rid} is not {stated.group(0)}")
        elif not re.fullmatch(r"\d+|[A-Z]+|HAT\d{3}", rid):
            problems.append(f"reservation {rid} does not exist")
    for number, date in re.findall(r"\b(HAT\d{3})\b[^.]*?\b(\d{4}-\d\d-\d\d)\b", text):
        holding = [r for r in mine if any(f["flight_number"] == number and f["date"] == date for f in r["flights"])]
        if not holding:
            problems.append(f"the user has no reservation with {number} on {date}")
            continue
        status = db["flights"][number]["dates"].get(date, {}).get("status")
        if date < TODAY and status != "landed":
            problems.append(f"{number} on {date} did not land ({status})")
        if _BAG_CLAIM.search(text) and not any(r["total_baggages"] > 0 for r in holding):
            problems.append(f"a lost bag on {number} on {date}, but the reservation has no checked bags")
    return problems


def premise_problems(domain: str, task, product_classes: dict[str, set[str]]) -> list[str]:
    """What the out-of-scope request states that db.json contradicts (empty when every premise holds)."""
    return _airline_premises(task) if domain == "airline" else _retail_premises(task, product_classes)


# --- all checks ------------------------------------------------------------------------------------------------


def audit(domain: str, kind: str, tasks: list, parents: dict, product_classes: dict[str, set[str]]) -> list[Finding]:
    """Findings for the derived tasks of one kind; `parents` maps parent id -> upstream task."""
    from handoff.tasks.derive import parse_derived_id

    findings = []
    for task in tasks:
        parent = parents[parse_derived_id(task.id).parent_id]
        if kind == "hard_negative":
            findings += _persona_findings(task)
        else:
            findings += [Finding("parent_script", task.id, f"keeps the parent's line {s!r}")
                         for s in kept_parent_lines(task, parent)]
        if kind == "explicit_request":
            findings += [Finding("asks_for_a_solution", task.id, f"asks the agent to solve it: {s!r}")
                         for s in solution_requests(_scenario_text(task))]
        if kind == "out_of_scope":
            findings += [Finding("false_premise", task.id, p) for p in premise_problems(domain, task, product_classes)]
    return findings


def distinct_ratio(tasks: list) -> float:
    """Share of distinct task_instructions among the tasks."""
    texts = [t.user_scenario.instructions.task_instructions for t in tasks]
    return len(set(texts)) / len(texts) if texts else 1.0
