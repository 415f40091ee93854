"""What a careful annotator checks in the derived tasks (handoff.tasks.authoring.audit), each defect class by its
general form; variety; and the behavioural proof with tau2's own evaluator (the behaviour record)."""

from __future__ import annotations

import json
import re

import pytest

import handoff  # noqa: F401  (prepares the process for tau2)
from handoff.tasks import DOMAINS, load_tasks, parse_derived_id, paths
from handoff.tasks.authoring import audit as checks
from handoff.tasks.authoring import kinds
from handoff.tasks.authoring.behaviour import AGENTS, run_parallel, task_sha256
from handoff.tasks.authoring.derive import product_classes
from handoff.tasks.authoring.manifests import behaviour_problems, derived_tasks, read_behaviour
from handoff.tasks.domains import DERIVED_DOMAINS
from handoff.tasks.domains.airline import TODAY
from handoff.tasks.ids import DERIVED_KINDS as KINDS
from handoff.tasks.upstream import raw_db, upstream_tasks

ROOT = paths.REPO_ROOT


def parents(domain: str) -> dict:
    return {t.id: t for t in upstream_tasks(domain)}


def with_text(task, **fields):
    """A copy of the task whose user instructions have `fields` replaced."""
    instructions = task.user_scenario.instructions.model_copy(update=fields)
    return task.model_copy(update={"user_scenario": task.user_scenario.model_copy(update={"instructions": instructions})})


def findings(domain: str, kind: str, task) -> set[str]:
    return {f.check for f in kinds.audit_tasks(domain, kind, [task], parents(domain), product_classes())}


# --- the committed tasks pass every check -------------------------------------------------------------------


@pytest.mark.parametrize("domain", DERIVED_DOMAINS)
@pytest.mark.parametrize("kind", KINDS)
def test_committed_tasks_pass_the_annotator_checks(domain, kind):
    tasks = load_tasks(domain, kinds=[kind])
    assert kinds.audit_tasks(domain, kind, tasks, parents(domain), product_classes()) == []
    assert len(tasks) >= {"airline": 18, "retail": 30, "telecom": 30}[domain]  # airline hard negatives: 18 (issue 32)


def _problem(task) -> str:
    """What the user calls about: the reason for the call, and on telecom the phone's faults too (τ²'s
    telecom tasks share three reasons, one per issue, and differ in the faults their initial state injects;
    a hard negative keeps its parent's reason)."""
    state = task.initial_state.model_dump_json() if task.initial_state else ""
    return f"{task.user_scenario.instructions.reason_for_call}\n{state}"


@pytest.mark.parametrize("domain", DERIVED_DOMAINS)
@pytest.mark.parametrize("kind", KINDS)
def test_instructions_and_reasons_vary(domain, kind):
    tasks = load_tasks(domain, kinds=[kind])
    assert checks.distinct_ratio(tasks) >= 0.8
    reasons = [_problem(t) for t in tasks]
    assert len(set(reasons)) / len(reasons) >= 0.8
    documented = re.search(rf"\| {domain} \| {kind} \| (\d+) \| (\d+) \|", (ROOT / "docs/tasks.md").read_text())
    assert documented, f"docs/tasks.md reports no distinct-instruction count for {domain}/{kind}"
    distinct = len({t.user_scenario.instructions.task_instructions for t in tasks})
    assert documented.groups() == (str(len(tasks)), str(distinct))


# --- each defect class, by its general form -----------------------------------------------------------------


@pytest.mark.parametrize("line, flagged", [
    ("You are friendly, patient and cheerful.", True),
    ("Be courteous and thank the agent warmly.", True),
    ("You stay calm whatever happens.", True),
    ("You are organized, optimistic.", True),
    ("You are happy with a refund to the original payment method.", False),  # a preference, not a trait
    ("You are not happy with the service.", False),
    ("You are willing to pay up to $100.", False),
])
def test_a_pleasant_trait_on_a_difficult_user_is_found(line, flagged):
    task = load_tasks("retail", kinds=["hard_negative"])[0]
    instructions = task.user_scenario.instructions
    changed = with_text(task, task_instructions=f"{instructions.task_instructions}\n\n{line}")
    assert ("persona_contradiction" in findings("retail", "hard_negative", changed)) is flagged


@pytest.mark.parametrize("line, flagged", [
    ("Make sure the agent processes the refund today.", True),
    ("Insist that the customer service agent must cancel the order itself.", True),
    ("When asked for your order id, give 1234567 first and then the right one.", True),
    ("Ask the agent to book the cheapest flight.", True),
    ("Keep asking for a human agent until you are transferred.", False),
    ("Give your user id if the agent asks for it.", False),
])
def test_a_request_for_a_solution_on_a_hand_off_task_is_found(line, flagged):
    task = load_tasks("airline", kinds=["explicit_request"])[0]
    changed = with_text(task, task_instructions=f"{task.user_scenario.instructions.task_instructions} {line}")
    assert ("asks_for_a_solution" in findings("airline", "explicit_request", changed)) is flagged


@pytest.mark.parametrize("kind", ["explicit_request", "out_of_scope"])
def test_a_kept_parent_script_line_is_found(kind):
    task = load_tasks("retail", kinds=[kind])[0]
    parent = parents("retail")[parse_derived_id(task.id).parent_id]
    script = next(s for s in checks.sentences(parent.user_scenario.instructions.reason_for_call) if len(s.split()) >= 6)
    changed = with_text(task, reason_for_call=f"{task.user_scenario.instructions.reason_for_call}\n\n{script}")
    assert "parent_script" in findings("retail", kind, changed)


def _delivered(predicate) -> tuple[dict, dict, dict]:
    """(user, order, item) of the first delivered item the predicate accepts."""
    db = raw_db("retail")
    for order in sorted(db["orders"].values(), key=lambda o: o["order_id"]):
        for item in order["items"]:
            if order["status"] == "delivered" and predicate(item):
                return db["users"][order["user_id"]], order, item
    raise AssertionError("no such item in db.json")


def _premises(user: dict, reason: str) -> list[str]:
    task = load_tasks("retail", kinds=["out_of_scope"])[0]
    changed = with_text(task, reason_for_call=reason, known_info=f"Your email is {user['email']}.")
    return checks.premise_problems("retail", changed, product_classes())


def test_false_retail_premises_are_found_and_true_ones_pass():
    classes = product_classes()
    user, order, item = _delivered(lambda i: i["name"] not in classes["powered"] | classes["heat"] | classes["leak"])
    name, oid = item["name"].lower(), order["order_id"]
    assert any("powered" in p for p in _premises(user, f"The {name} from order {oid} stopped working."))
    assert any("heat" in p for p in _premises(user, f"The {name} from order {oid} overheated and burned the desk."))
    assert any("leak" in p for p in _premises(user, f"The {name} from order {oid} leaked onto the floor."))
    assert any("not cheaper" in p for p in _premises(user, f"The {name} in order {oid} is now cheaper on the site."))
    assert any("not 1.00" in p for p in _premises(user, f"You paid $1.00 for the {name} in order {oid}."))
    assert _premises(user, f"You paid ${item['price']:.2f} for the {name} in order {oid}; another store sells it "
                           "for less.") == []
    options = {k for p in raw_db("retail")["products"].values() for v in p["variants"].values() for k in v["options"]}
    product = raw_db("retail")["products"][item["product_id"]]
    missing = sorted(options - {k for v in product["variants"].values() for k in v["options"]})[0]
    assert any(f"no {missing!r} option" in p for p in _premises(
        user, f"The {name} from order {oid} comes in a {missing} that is out of stock."))
    in_stock = next(v for v in product["variants"].values() if v["available"])
    key, value = sorted(in_stock["options"].items())[0]
    assert any("is in stock" in p for p in _premises(
        user, f"The {name} from order {oid} is also sold with {key} \"{value}\", but that version is out of stock."))
    other = next(u for u in raw_db("retail")["users"].values() if oid not in u["orders"])
    assert any("not the user" in p for p in _premises(other, f"The {name} from order {oid} stopped working."))
    powered_user, powered_order, powered = _delivered(lambda i: i["name"] in classes["powered"])
    assert _premises(powered_user, f"The {powered['name'].lower()} from your delivered order "
                                   f"{powered_order['order_id']} stopped working.") == []


def test_a_lost_bag_on_a_reservation_without_bags_is_found():
    db = raw_db("airline")
    task = load_tasks("airline", kinds=["out_of_scope"])[0]

    def problems(reservation: dict) -> list[str]:
        flight = next(f for f in reservation["flights"] if f["date"] < TODAY
                      and db["flights"][f["flight_number"]]["dates"][f["date"]]["status"] == "landed")
        reason = f"Your checked bag did not arrive after flight {flight['flight_number']} on {flight['date']}."
        changed = with_text(task, reason_for_call=reason, known_info=f"Your user id is {reservation['user_id']}.")
        return checks.premise_problems("airline", changed, product_classes())

    def flown(r: dict) -> bool:
        return any(f["date"] < TODAY and db["flights"][f["flight_number"]]["dates"][f["date"]]["status"] ==
                   "landed" for f in r["flights"])

    reservations = sorted(db["reservations"].values(), key=lambda r: r["reservation_id"])
    assert any("no checked bags" in p for p in problems(next(r for r in reservations
                                                             if flown(r) and r["total_baggages"] == 0)))
    assert problems(next(r for r in reservations if flown(r) and r["total_baggages"] > 0)) == []


# --- behavioural proof ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def derived():
    return derived_tasks()


def test_the_behaviour_record_covers_every_task_and_meets_the_kinds(derived):
    assert behaviour_problems(ROOT, derived, rerun=0) == []
    record = read_behaviour(ROOT)
    for (domain, kind), tasks in derived.items():
        for task in tasks:
            entry = record[domain][task.id]
            assert entry["sha256"] == task_sha256(task)
            expected = kinds.kind(kind).expected
            assert expected and {a: entry[a] for a in expected} == expected


def test_the_record_agrees_with_tau2_on_every_task(derived):
    """Every derived task again, with tau2's evaluate_simulation on handoff.fasteval's environment
    (seconds); `handoff labels check` and test_task_sets re-run a sample on tau2's own environment."""
    record = read_behaviour(ROOT)
    items = [(d, t, AGENTS) for (d, _), tasks in derived.items() for t in tasks]
    for (domain, task, _), scores in zip(items, run_parallel(items, workers=1, fast=True)):
        assert scores == {a: record[domain][task.id][a] for a in AGENTS}, task.id


def test_upstream_transfer_only_count_is_documented():
    labels = json.loads((ROOT / paths.LABELS_FILE).read_text())["labels"]
    record = read_behaviour(ROOT)
    for domain in DOMAINS:
        negatives = [tid for tid in record[domain] if labels[domain][tid]["rule"] == "no_transfer"]  # base set
        passed = sum(record[domain][tid]["transfer_only"] == 1.0 for tid in negatives)
        sentence = f"{domain}: {passed} of {len(negatives)} upstream `no_transfer` tasks"
        assert sentence in (ROOT / "docs/tasks.md").read_text(), sentence


def test_a_wrong_record_fails_the_check(derived, tmp_path, monkeypatch):
    doc = json.loads((ROOT / paths.BEHAVIOUR_FILE).read_text())
    task = derived[("airline", "hard_negative")][0]
    doc["tasks"]["airline"][task.id]["transfer_only"] = 1.0
    (tmp_path / paths.BEHAVIOUR_FILE).parent.mkdir(parents=True)
    (tmp_path / paths.BEHAVIOUR_FILE).write_text(json.dumps(doc))
    problems = behaviour_problems(tmp_path, derived, rerun=0)
    assert problems == [f"{paths.BEHAVIOUR_FILE}: airline/{task.id}: transfer_only scored 1.0, expected 0.0"]
    del doc["tasks"]["retail"][derived[("retail", "out_of_scope")][0].id]
    (tmp_path / paths.BEHAVIOUR_FILE).write_text(json.dumps(doc))
    assert any("is not recorded for its current content" in p for p in behaviour_problems(tmp_path, derived, 0))


def _patched_scenarios(monkeypatch, edit):
    from handoff.tasks.authoring import derive

    original = derive.scenarios

    def patched(domain: str) -> dict:
        doc = json.loads(json.dumps(original(domain)))
        edit(domain, doc)
        return doc

    monkeypatch.setattr(derive, "scenarios", patched)
    return derive


def test_the_build_refuses_a_contradicting_persona_line(monkeypatch):
    def edit(domain, doc):
        doc["hard_negative"]["conduct"]["rude"] = ["You are polite and patient with the agent."]

    _patched_scenarios(monkeypatch, edit)
    with pytest.raises(ValueError, match="airline/hard_negative: derived tasks fail the checks:\n.*-rude: "
                                         "persona_contradiction"):
        kinds.build_kind("airline", "hard_negative")


def test_the_build_refuses_a_false_premise(monkeypatch):
    def edit(domain, doc):
        doc["out_of_scope"]["requests"]["price_match"] = [
            "The {item} in your delivered order {order_id} is now cheaper on the website; you want the difference."]

    _patched_scenarios(monkeypatch, edit)
    with pytest.raises(ValueError, match="price_match: false_premise: the .* not cheaper"):
        kinds.build_kind("retail", "out_of_scope")


# --- issue 23: temperament lines by what they say, added lines against the parent's script, premises of every kind


@pytest.mark.parametrize("domain, line, temperament", [
    ("retail", "You are a funny guy but recently the work from home situation has made you a bit anxious.", True),
    ("retail", "You like to talk a lot and explain your situation.", True),
    ("retail", "You are polite, optimistic, organized.", True),
    ("airline", "You are reactive to the agent and will not say anything that is not asked.", True),
    ("retail", "You are brief and your memory is not too good sometimes, but you are polite.", True),  # a calm trait
    ("airline", "You are not good at math so you want the agent to calculate and decide for you.", False),  # a tool
    ("retail", "You like the cotton feeling.", False),  # an option value
    ("retail", "If the agent asks for confirmation, do not say yes immediately.", False),
    ("airline", "You are willing to admit that you are wrong if the agent corrects you.", False),  # a condition
    ("airline", "Your birthday is in your user profile so you prefer not to provide it.", False),  # not the user
    ("airline", "Since you live in Princeton, EWR and PHL are equally convenient for you.", False),  # a place
    ("airline", "You want to change the name from Mei Lee to Mei Garcia.", False),  # names
])
def test_temperament_lines_are_found_by_what_they_say(domain, line, temperament):
    assert checks.is_persona_line(line, domain) is temperament


def _hard_negative_of(domain: str, parent_id: str):
    return next(t for t in load_tasks(domain, kinds=["hard_negative"]) if parse_derived_id(t.id).parent_id == parent_id)


def test_an_added_line_that_contradicts_the_parent_script_is_found():
    # retail 47's user is scripted to "provide 9502126 first" (a wrong order id)
    task = _hard_negative_of("retail", "47")
    parent = parents("retail")["47"]
    assert checks.script_contradictions(task, parent) == []
    promising = with_text(task, task_instructions=task.user_scenario.instructions.task_instructions
                          + "\n\nAnswer every question truthfully.")
    assert "script_contradiction" in findings("retail", "hard_negative", promising)
    # a threat over a fault: only where the parent has none (airline 25 books a flight for a friend)
    plain = _hard_negative_of("airline", "25")
    threat = plain.model_copy(update={"user_scenario": plain.user_scenario.model_copy(
        update={"persona": "You threaten to leave unless the agent fixes this immediately."})})
    assert "script_contradiction" in findings("airline", "hard_negative", threat)
    faulty = next(t for t in load_tasks("airline", kinds=["hard_negative"])  # a parent with something at fault
                  if checks._FAULT.search(checks.scenario_text(parents("airline")[parse_derived_id(t.id).parent_id])))
    with_threat = faulty.model_copy(update={"user_scenario": faulty.user_scenario.model_copy(
        update={"persona": threat.user_scenario.persona})})
    assert checks.script_contradictions(with_threat, parents("airline")[parse_derived_id(faulty.id).parent_id]) == []


def test_premises_are_checked_for_every_kind_and_the_traveller():
    task = load_tasks("airline", kinds=["explicit_request"])[0]
    # NQNU5R (aarav_ahmed_6699) was flown on 2024-05-13/14: not upcoming
    flown = with_text(task, reason_for_call="You want to cancel your upcoming reservation NQNU5R.",
                      known_info="Your user id is aarav_ahmed_6699.")
    assert "reservation NQNU5R is not upcoming" in checks.premise_problems("airline", flown, product_classes())
    mine = with_text(flown, reason_for_call="You want to cancel your reservation NQNU5R.")
    assert checks.premise_problems("airline", mine, product_classes()) == []
    # a meal on a trip the user booked for others: who flies matters for a traveller request, not for a booking
    db = raw_db("airline")
    reservation = next(r for r in sorted(db["reservations"].values(), key=lambda r: r["reservation_id"])
                       if checks.is_upcoming(r) and not checks.is_passenger(db["users"][r["user_id"]], r))
    meal = next(t for t in load_tasks("airline", kinds=["out_of_scope"]) if t.id.endswith("special_meal"))
    request = with_text(meal, reason_for_call=f"You need a vegetarian meal on every flight of reservation "
                                              f"{reservation['reservation_id']}.",
                        known_info=f"Your user id is {reservation['user_id']}.")
    assert any("not a passenger" in p for p in checks.premise_problems("airline", request, product_classes()))
    booking = with_text(task, reason_for_call=request.user_scenario.instructions.reason_for_call,
                        known_info=request.user_scenario.instructions.known_info)
    assert not any("not a passenger" in p for p in checks.premise_problems("airline", booking, product_classes()))


def test_retail_products_named_as_the_users_are_checked():
    task = load_tasks("retail", kinds=["hard_negative"])[0]
    db = raw_db("retail")
    user = db["users"]["james_johnson_9321"]  # his only pending order #W1006327 holds no t-shirt
    known = f"Your email is {user['email']}."
    held = db["orders"]["#W1006327"]["items"][0]["name"].lower()
    assert checks.premise_problems("retail", with_text(
        task, reason_for_call=f"You want the {held} in your pending order changed.", known_info=known,
        task_instructions=""), product_classes()) == []
    assert any("t-shirt" in p for p in checks.premise_problems("retail", with_text(
        task, reason_for_call="You want the t-shirt in your pending order changed.", known_info=known,
        task_instructions=""), product_classes()))


def test_a_scenario_text_cut_short_is_refused(monkeypatch, tmp_path):
    """In YAML an unquoted " #W9300146" starts a comment: the request ended "in order" (retail 44, 105)."""
    from handoff.tasks.authoring import derive

    assert all(". You want a human agent" in t.user_scenario.instructions.reason_for_call
               for t in load_tasks("retail", kinds=["explicit_request"]))
    source = (ROOT / paths.scenario_file("retail")).read_text()
    assert '"44": "You want the desk lamp in order #W9300146' in source
    (tmp_path / paths.scenario_file("retail")).parent.mkdir(parents=True)
    (tmp_path / paths.scenario_file("retail")).write_text(source.replace(
        '"44": "You want the desk lamp in order #W9300146 changed to the cheapest one available, with the difference '
        'on a gift card."', '"44": You want the desk lamp in order #W9300146 changed.'))
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    derive.scenarios.cache_clear()
    try:
        with pytest.raises(ValueError, match="do not end a sentence .*: /explicit_request/requests/44"):
            derive.scenarios("retail")
    finally:
        derive.scenarios.cache_clear()


def test_a_claim_of_when_a_reservation_was_booked_is_checked():
    """Issue 32: explicit_request-48 retold its parent's scripted "booked this morning" as fact; 3RK2T9 was booked
    on 2024-05-02. The claim is checked against created_at, in its sentence or for the only reservation named."""
    task = load_tasks("airline", kinds=["explicit_request"])[0]

    def problems(reason: str, known: str = "Your user id is anya_garcia_5901.") -> list[str]:
        return [p for p in checks.premise_problems("airline", with_text(task, reason_for_call=reason, known_info=known),
                                                   product_classes()) if "booked" in p]

    assert problems("You booked reservation 3RK2T9 this morning by mistake.") == [
        "reservation 3RK2T9 was booked 2024-05-02T06:02:56, not 'this morning'"]
    assert problems("You want to cancel 3RK2T9.", "Your user id is anya_garcia_5901. You booked it 10 hours ago.")
    assert problems("You booked reservation 3RK2T9 by mistake.") == []
    # 1KUOX2 (anya_khan_1074) was booked on 2024-05-14 at 17:16: "yesterday" holds, "this morning" does not
    user = raw_db("airline")["reservations"]["1KUOX2"]["user_id"]
    assert problems("You booked reservation 1KUOX2 yesterday.", f"Your user id is {user}.") == []
    assert problems("You booked reservation 1KUOX2 this morning.", f"Your user id is {user}.")
    fixed = next(t for t in load_tasks("airline", kinds=["explicit_request"]) if t.id.startswith("explicit_request-48"))
    assert "morning" not in checks._facts_text(fixed) and "hours ago" not in checks._facts_text(fixed)


# --- telecom: premises against db.toml, the Hard persona --------------------------------------------------------


@pytest.mark.parametrize("reason, problem", [
    ("You want a new number for your line 555-123-2002.", None),
    ("You want your Smartphone Pro Max unlocked; your line 555-123-2002 is on the Premium Plan.", None),
    ("You want the line 555-123-2009 moved to your daughter's account.", "555-123-2009 is not a line of C1001"),
    ("Your line 555-123-2002 is on the Basic Plan and you want more minutes.", "not the Basic Plan"),
    ("You want your Pixel 7 on 555-123-2002 carrier-unlocked.", "is a Smartphone Pro Max, not a Pixel 7"),
])
def test_false_telecom_premises_are_found_and_true_ones_pass(reason, problem):
    task = load_tasks("telecom", kinds=["out_of_scope"])[0]
    changed = with_text(task, reason_for_call=reason)
    problems = checks.premise_problems("telecom", changed, product_classes())
    assert (problems == []) if problem is None else any(problem in p for p in problems), problems
    nobody = with_text(task, known_info="You are Jane Doe.", reason_for_call="You want a new number.")
    assert checks.premise_problems("telecom", nobody, product_classes()) == [
        "the user's known info names no single db customer"]


def test_telecom_hard_negatives_use_taus_hard_persona_and_the_phone_keeps_its_fault():
    hard = next(t for t in upstream_tasks("telecom") if t.id.endswith("[PERSONA:Hard]")).user_scenario.persona
    opening = " ".join(checks.sentences(hard)[:2])  # "At 64 years old, ... uneasy and overwhelmed."
    tasks = load_tasks("telecom", kinds=["hard_negative"])
    with_hard = [t for t in tasks if t.user_scenario.persona.startswith(opening)]
    assert {parse_derived_id(t.id).template for t in with_hard} == {"impatient", "rude", "threatening"}
    assert len(with_hard) == 9, "docs/tasks.md: 9 of the 30 hard negatives are played by it"
    for task in tasks + load_tasks("telecom", kinds=["explicit_request"]):
        parent = parents("telecom")[parse_derived_id(task.id).parent_id]
        assert task.initial_state == parent.initial_state, "the user's phone starts with the parent's faults"
    for task in load_tasks("telecom", kinds=["out_of_scope"]):
        actions = task.initial_state.initialization_actions
        assert [a.func_name for a in actions] == ["set_user_info"], "only the user's name and number on the phone"
