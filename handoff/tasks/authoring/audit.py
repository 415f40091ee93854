"""An annotator's checks of the derived tasks, each by the general form of a defect class.

- `persona_contradiction` (hard_negative): a line outside the persona asserts a calm or pleasant trait
  ("You are calm", "Be polite and ...", "You are curious, patient") while the persona is a difficult user.
- `script_contradiction` (hard_negative): a line the derivation adds contradicts the parent's script: it
  promises truthful, complete answers from a user scripted to hold something back or to lie first, or threatens
  over a fault ("if this is not fixed") the parent's issue does not have.
- `parent_script` (explicit_request, out_of_scope): a sentence of the parent's scripted scenario is kept
  in a task that must be handed off.
- `asks_for_a_solution` (explicit_request): the user is told to get the agent to do the
  job itself ("Be insistent that the agent should undo ...", "ask the agent to cancel ...", "When asked
  for the order id, provide ... first").
- `false_premise` (every kind): a fact the user is told is false in the domain's db.json, in the derived
  text or inherited from the parent (the order, item or product named and its status; the reservation or
  flight named, whether it is upcoming or landed, and, for a request about who flies, whether the user is a
  passenger; when a reservation was booked; a price claim; a product option; the kind of product for the
  complaint; bags on a reservation; telecom: the phone numbers named are the customer's lines, and the plan
  and the phone model named are those of the user's line).

Which checks a kind gets is its module's (handoff.tasks.authoring.kinds); a domain's premises are checked
by that domain's function here (PREMISES). `handoff labels build` refuses to write task sets with
findings; tests run the same checks.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from functools import cache
from typing import NamedTuple

from handoff.tasks.authoring.catalog import CATALOG
from handoff.tasks.domains.airline import NOW, TAKEN_OFF, TODAY
from handoff.tasks.ids import parse_derived_id
from handoff.tasks.upstream import raw_db, tool_names

CHECKS = ("persona_contradiction", "script_contradiction", "parent_script", "asks_for_a_solution", "false_premise")


class Finding(NamedTuple):
    check: str
    task_id: str
    message: str


def sentences(text: str | None) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text or "") if s.strip()]


def scenario_text(task) -> str:
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


# A line that sets the user's temperament has the user as its subject and says nothing about the task: no word of
# the domain's tools, database fields, statuses, products or options, no number, id, name or quote, no condition.
# "You are a funny guy but recently the work from home situation has made you a bit anxious." and "You like to
# talk very tersely." are temperament; "You are not good at math so you want the agent to calculate" (the
# calculate tool), "You are willing to admit that you are wrong if the agent corrects you" (a condition) and
# "You like the cotton feeling." (a product option) are the parent's script.
_ABOUT_THE_USER = re.compile(r"^\W*((also|now|but|and|so),?\s+)?(you|you're|be)\b", re.IGNORECASE)
_TASK_MARKS = re.compile(r"[\d#$\"]|(^|\s)'|\b(if|when|unless|until|only|after|before|how (much|many|long))\b",
                         re.IGNORECASE)
_NAME = re.compile(r"(?<=\s)[A-Z][a-z]+\b")  # a capitalized word inside the sentence: a person or a place
# Words of tool names, fields and option values that say nothing about the task in a sentence.
_GENERIC = {"get", "list", "all", "find", "details", "id", "name", "human", "agents", "direct", "types", "status",
            "user", "transfer", "think", "in", "on", "is", "as", "at", "to", "by", "of", "no", "not", "non", "none",
            "yes", "over", "back", "one", "way", "time", "last", "four", "full", "half", "hard", "high", "low", "set",
            "side", "soft", "warm", "mode", "type", "gets", "auto", "men", "ear", "air"}
# Words of money and of the conversation's object that the tools and the database name only in compounds.
_TASK_EXTRA = {"refund", "refunds", "refunded", "compensation", "voucher", "price", "cost", "pay", "paid", "fee",
               "fees", "money", "charge", "ticket", "trip", "bag", "bags", "seat", "seats", "member", "delay", "policy"}


def _field_words(value, out: set[str]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            out.update(re.findall(r"[a-z]+", key.lower()))
            _field_words(inner, out)
    elif isinstance(value, list) and value:
        _field_words(value[0], out)


@cache
def task_words(domain: str) -> frozenset[str]:
    """Words that make a sentence about the task: the domain's tool names, the field names, statuses, cabins and
    membership levels of its database records, and its product names."""
    db, words = raw_db(domain), set(_TASK_EXTRA)
    for name in tool_names(domain):
        words.update(name.split("_"))
    for collection in db.values():
        for record in list(collection.values())[:50]:
            _field_words(record, words)
            for key in ("status", "cabin", "membership", "name", "flight_type", "origin", "destination"):
                if isinstance(record.get(key), str):
                    words.update(re.findall(r"[a-z]+", record[key].lower()))
            for variant in record.get("variants", {}).values():
                for value in variant["options"].values():
                    words.update(re.findall(r"[a-z]+", str(value).lower()))
    words = {w for w in words if len(w) > 2} - _GENERIC
    return frozenset(words | {w + "s" for w in words})


def is_persona_line(sentence: str, domain: str) -> bool:
    """A sentence that sets the user's temperament (a parent's persona line), judged by what it says; a sentence
    that tells the user to show a calm or pleasant trait is one whatever else it says."""
    words = set(re.findall(r"[a-z]+", sentence.lower()))
    about_the_task = _TASK_MARKS.search(sentence) or _NAME.search(sentence) or words & task_words(domain)
    return bool(_ABOUT_THE_USER.search(sentence.strip()) and not about_the_task) or bool(_CALM_LINE.search(sentence))


def calm_lines(text: str | None) -> list[str]:
    return [s for s in sentences(text) if _CALM_LINE.search(s)]


def persona_findings(task) -> list[Finding]:
    return [
        Finding("persona_contradiction", task.id, f"a difficult user told: {line!r}")
        for line in calm_lines(scenario_text(task))
    ]


# A parent scripted to lie or hold something back, and an added line that promises truthful, complete answers.
_UNTRUTH = re.compile(
    r"\b(this is incorrect|is not true|lie|lying|pretend\w*|be adamant|make up|(do not|don't|not) (reveal|mention|"
    r"tell|say|provide|give)|without (revealing|mentioning)|(give|provide|say) [^.]{0,30}\b(\d+|wrong|incorrect)\b"
    r"[^.]{0,20}\bfirst)\b", re.IGNORECASE)
_FULL_DISCLOSURE = re.compile(
    r"\b(truthful\w*|correct answers?|every detail|answer\w* every question|(never|without) hold\w* back|"
    r"all the information|"
    r"the information (the agent|it) asks for|give the facts)\b", re.IGNORECASE)
# A threat that presupposes a fault ("if this is not fixed"), and a parent with nothing at fault.
_FAULT_THREAT = re.compile(r"\b(fix(es|ed)?|repair\w*|make (this|it) right)\b", re.IGNORECASE)
_FAULT = re.compile(
    r"\b(broken|damaged|defective|delay\w*|cancel\w*|wrong|mistake\w*|not working|stopped|lost|missing|"
    r"complain\w*|refund\w*|upset|angry|frustrat\w*|worn|sick|unwell|emergency)\b", re.IGNORECASE)


def added_lines(task, parent) -> list[str]:
    """Sentences of the task's persona and instructions that are not the parent's."""
    own = set(sentences(scenario_text(parent)))
    text = "\n".join(filter(None, [task.user_scenario.persona, scenario_text(task)]))
    return [s for s in sentences(text) if s not in own]


def script_contradictions(task, parent) -> list[str]:
    """Added lines that contradict the parent's script."""
    script = scenario_text(parent)
    added = added_lines(task, parent)
    found = []
    if _UNTRUTH.search(script):
        found += [f"promises full answers to a parent scripted to hold back or lie "
                  f"({_UNTRUTH.search(script).group(0)!r}): {s!r}" for s in added if _FULL_DISCLOSURE.search(s)]
    if not _FAULT.search(script):
        found += [f"threatens over a fault the parent does not have: {s!r}" for s in added if _FAULT_THREAT.search(s)]
    return found


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
    derived = _words(scenario_text(task))
    return [s for s in sentences(scenario_text(parent)) if len(_words(s).split()) >= 6 and _words(s) in derived]


# --- premises against db.json (every kind: the derived text and what it inherits from the parent) -------------


def _facts_text(task) -> str:
    """Everything the user is told as fact: reason for the call, known info, instructions."""
    instructions = task.user_scenario.instructions
    return "\n".join(filter(None, [instructions.reason_for_call, instructions.known_info,
                                   instructions.task_instructions]))


@cache
def _user_keys(domain: str) -> tuple[tuple[str, re.Pattern, str, str, str], ...]:
    """(user id, its whole-word pattern, email, "first last", zip) of every db user, lower case. The
    patterns are compiled once: hundreds of users overflow `re`'s cache of 512, and recompiling them
    on every call took 6 of `handoff labels check`'s 28 s."""
    return tuple(
        (uid, re.compile(rf"\b{re.escape(uid)}\b"), u["email"].lower(),
         f"{u['name']['first_name']} {u['name']['last_name']}".lower(), str(u.get("address", {}).get("zip", "")))
        for uid, u in raw_db(domain)["users"].items()
    )


def find_user(domain: str, text: str) -> str | None:
    """The db user a text names by user id, email, or first and last name with zip code (telecom: the
    customer named by full name and the phone number of one of their lines); None unless exactly one."""
    if domain == "telecom":
        return _telecom_customer(text)
    lowered = text.lower()
    found = {
        uid for uid, pattern, email, name, zip_code in _user_keys(domain)
        if pattern.search(lowered) or email in lowered or (name in lowered and zip_code and zip_code in lowered)
    }
    return found.pop() if len(found) == 1 else None


@cache
def _retail_index() -> tuple[dict, dict, dict]:
    db = raw_db("retail")
    variants = {vid: (p, v) for p in db["products"].values() for vid, v in p["variants"].items()}
    names = {p["name"].lower(): p["product_id"] for p in db["products"].values()}
    return db, variants, names


def _product_pattern(name: str) -> re.Pattern:
    return re.compile(rf"\b{re.escape(name)}(e?s)?\b", re.IGNORECASE)


_STATUS_WORDS = {"pending": re.compile(r"\bpending\b", re.I),
                 "delivered": re.compile(r"\b(delivered|received)\b", re.I)}


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


def _retail_products(sentence: str, orders: list[dict]) -> list[str]:
    """Products a sentence names that none of the user's orders (of the status the sentence says) holds."""
    _, _, names = _retail_index()
    problems = []
    for name in names:
        if not _product_pattern(name).search(sentence) or re.search(r"#W\d{7}", sentence):
            continue
        holding = [o for o in orders if any(i["name"].lower() == name for i in o["items"])]
        statuses = [s for s, pattern in _STATUS_WORDS.items() if pattern.search(sentence)]
        if not holding:
            problems.append(f"the user has no order with a {name}")
        elif len(statuses) == 1 and not any(o["status"] == statuses[0] for o in holding):
            problems.append(f"the user has no {statuses[0]} order with a {name}")
    return problems


def _retail_premises(task, product_classes: dict[str, set[str]]) -> list[str]:
    db, variants, _ = _retail_index()
    text = _facts_text(task)
    lowered = text.lower()
    user = find_user("retail", text)
    if user is None:
        return ["the user's known info names no single db user"]
    orders = [db["orders"][o] for o in db["users"][user]["orders"] if o in db["orders"]]
    problems = [p for s in sentences(text) for p in _retail_products(s, orders)]
    for order_id in re.findall(r"#W\d{7}", text):
        order = db["orders"].get(order_id)
        if order is None:
            problems.append(f"order {order_id} does not exist")
            continue
        if order["user_id"] != user:
            problems.append(f"order {order_id} belongs to {order['user_id']}, not the user")
        said = [s for s in sentences(text) if order_id in s]
        if any(re.search(r"\bdelivered\b", s, re.I) for s in said) and order["status"] != "delivered":
            problems.append(f"order {order_id} is {order['status']}, not delivered")
        named = [i for i in order["items"] if re.search(rf"\b{re.escape(i['name'].lower())}\b", lowered)]
        all_products = {p["name"].lower() for p in db["products"].values()}
        if not named and any(re.search(rf"\b{re.escape(n)}\b", " ".join(said).lower()) for n in all_products):
            problems.append(f"the product named is not in order {order_id}")
        for item in named[:1]:
            problems += _item_premises(task.user_scenario.instructions.reason_for_call, item, variants,
                                       product_classes)
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
def is_passenger(user: dict, reservation: dict) -> bool:
    """Whether the user flies on the reservation (a passenger with the user's first and last name)."""
    name = (user["name"]["first_name"].lower(), user["name"]["last_name"].lower())
    return any((p["first_name"].lower(), p["last_name"].lower()) == name for p in reservation["passengers"])


def is_upcoming(reservation: dict) -> bool:
    """No flight of the reservation is before today or has taken off."""
    flights = raw_db("airline")["flights"]
    return all(f["date"] > TODAY or (f["date"] == TODAY and flights[f["flight_number"]]["dates"].get(f["date"], {})
                                      .get("status") not in TAKEN_OFF) for f in reservation["flights"])


def _reservation_premises(sentence: str, rid: str, user: dict, traveller: bool) -> list[str]:
    reservation = raw_db("airline")["reservations"][rid]
    if reservation["user_id"] != user["user_id"]:
        return [f"reservation {rid} is not the user's"]
    problems = []
    if re.search(r"\bupcoming\b", sentence, re.I) and not is_upcoming(reservation):
        problems.append(f"reservation {rid} is not upcoming")
    stated = re.search(rf"{rid} \(([A-Z]{{3}}) to ([A-Z]{{3}}) on (\d{{4}}-\d\d-\d\d)\)", sentence)
    first = min(reservation["flights"], key=lambda f: f["date"])
    ends = {reservation["destination"], first["destination"]}
    if stated and (stated[1] != reservation["origin"] or stated[2] not in ends or stated[3] != first["date"]):
        problems.append(f"reservation {rid} is not {stated.group(0)}")
    if traveller and not is_passenger(user, reservation):
        problems.append(f"the user is not a passenger of {rid}")
    return problems


def _flight_premises(sentence: str, user: dict, mine: list[dict], traveller: bool) -> list[str]:
    db, problems = raw_db("airline"), []
    dated = re.findall(r"\b(HAT\d{3})\b[^.]*?\b(\d{4}-\d\d-\d\d)\b", sentence)
    undated = set(re.findall(r"\bHAT\d{3}\b", sentence)) - {n for n, _ in dated}
    for number, date in dated + [(n, None) for n in sorted(undated)]:
        holding = [r for r in mine if any(f["flight_number"] == number and date in (None, f["date"])
                                          for f in r["flights"])]
        on = f"{number} on {date}" if date else number
        if not holding:
            problems.append(f"the user has no reservation with {on}")
            continue
        if traveller and not any(is_passenger(user, r) for r in holding):
            problems.append(f"the user is not a passenger on {on}")
        if date is None:
            continue
        status = db["flights"][number]["dates"].get(date, {}).get("status")
        if date < TODAY and status != "landed":
            problems.append(f"{on} did not land ({status})")
        if _BAG_CLAIM.search(sentence) and not any(r["total_baggages"] > 0 for r in holding):
            problems.append(f"a lost bag on {on}, but the reservation has no checked bags")
    return problems


_BOOKED_WHEN = re.compile(r"\bbooked\b[^.]*?\b(this morning|today|yesterday|(?:about |around )?(\d+) hours? ago)\b",
                          re.IGNORECASE)


def _booking_time_premises(sentence: str, rid: str | None) -> list[str]:
    """A claim of when a reservation was booked ("this morning", "10 hours ago") against its created_at. The
    reservation is the one the sentence names, else the only one the text names."""
    claim = _BOOKED_WHEN.search(sentence)
    reservation = raw_db("airline")["reservations"].get(rid) if claim and rid else None
    if reservation is None:
        return []
    created, now = datetime.fromisoformat(reservation["created_at"]), datetime.fromisoformat(NOW)
    when = claim[1].lower()
    if claim[2]:
        holds = abs(now - timedelta(hours=int(claim[2])) - created) <= timedelta(hours=3)
    else:
        day = now.date() - timedelta(days=when == "yesterday")
        holds = created.date() == day and (when != "this morning" or created.hour < 12)
    return [] if holds else [f"reservation {rid} was booked {reservation['created_at']}, not {claim[1]!r}"]


def _airline_premises(task, product_classes: dict[str, set[str]]) -> list[str]:
    """Reservations and flights the text names are the user's (and, for a request about who flies, ones the
    user is a passenger of); an upcoming trip has not started; a past flight landed; a lost bag was checked."""
    db, traveller = raw_db("airline"), _traveller_request(task)
    text = _facts_text(task)
    uid = find_user("airline", text)
    if uid is None:
        return ["the user's known info names no single db user"]
    user = db["users"][uid]
    mine = [db["reservations"][r] for r in user["reservations"] if r in db["reservations"]]
    problems, named = [], {r for r in re.findall(r"\b[A-Z0-9]{6}\b", text) if r in db["reservations"]}
    for sentence in sentences(text):
        rids = re.findall(r"\b[A-Z0-9]{6}\b", sentence)
        for rid in rids:
            if rid in db["reservations"]:
                problems += _reservation_premises(sentence, rid, user, traveller)
            elif not re.fullmatch(r"\d+|[A-Z]+|HAT\d{3}", rid):
                problems.append(f"reservation {rid} does not exist")
        problems += _flight_premises(sentence, user, mine, traveller)
        in_sentence = [r for r in rids if r in db["reservations"]]
        subject = in_sentence[0] if in_sentence else (min(named) if len(named) == 1 else None)
        problems += _booking_time_premises(sentence, subject)
    return problems


def _traveller_request(task) -> bool:
    ref = parse_derived_id(task.id)
    return bool(ref and ref.kind == "out_of_scope"
                and any(r.id == ref.template and r.traveller for r in CATALOG["airline"]))


_PHONE = re.compile(r"\b\d{3}-\d{3}-\d{4}\b")


def _customer_lines(customer_id: str) -> dict[str, dict]:
    """phone number -> line, of the customer's lines."""
    db = raw_db("telecom")
    lines = (db["lines"][line] for line in db["customers"][customer_id]["line_ids"] if line in db["lines"])
    return {line["phone_number"]: line for line in lines}


def _telecom_customer(text: str) -> str | None:
    found = {cid for cid, c in raw_db("telecom")["customers"].items()
             if c["full_name"] in text and any(number in text for number in _customer_lines(cid))}
    return found.pop() if len(found) == 1 else None


def _telecom_premises(task, product_classes: dict[str, set[str]]) -> list[str]:
    """The phone numbers the text names are the customer's lines; a plan or a device model it names is the
    plan or the device of the line of the first number named (the user's own phone)."""
    db, text = raw_db("telecom"), _facts_text(task)
    customer = _telecom_customer(text)
    if customer is None:
        return ["the user's known info names no single db customer"]
    lines = _customer_lines(customer)
    numbers = _PHONE.findall(text)
    problems = [f"{n} is not a line of {customer}" for n in dict.fromkeys(numbers) if n not in lines]
    own = lines.get(numbers[0]) if numbers else None
    if own is None:
        return problems
    plan, device = db["plans"].get(own["plan_id"], {}), db["devices"].get(own.get("device_id"), {})
    problems += [f"the line {own['phone_number']} is on the {plan.get('name')}, not the {p['name']}"
                 for p in db["plans"].values() if p["name"] in text and p is not plan]
    problems += [f"the phone of {own['phone_number']} is a {device.get('model')}, not a {d['model']}"
                 for d in db["devices"].values() if d["model"] in text and d is not device]
    return problems


PREMISES = {"airline": _airline_premises, "retail": _retail_premises, "telecom": _telecom_premises}


def premise_problems(domain: str, task, product_classes: dict[str, set[str]]) -> list[str]:
    """What the task tells the user as fact (its own text and what it inherits from its parent) that db.json
    contradicts; empty when every premise holds."""
    return PREMISES[domain](task, product_classes)


def premise_findings(domain: str, task, product_classes: dict[str, set[str]]) -> list[Finding]:
    return [Finding("false_premise", task.id, p) for p in premise_problems(domain, task, product_classes)]


def distinct_ratio(tasks: list) -> float:
    """Share of distinct task_instructions among the tasks."""
    texts = [t.user_scenario.instructions.task_instructions for t in tasks]
    return len(set(texts)) / len(texts) if texts else 1.0
