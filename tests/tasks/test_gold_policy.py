"""The gold checker (handoff.tasks.authoring.gold_policy): every clause of data/policy/clauses.yaml with an action that
breaks it and one that does not, on the pinned tau2 database; the clause file against policy.md; the
hand-check record against the checker and the overrides; nothing flagged and unhandled on the checkout."""

from __future__ import annotations

import json

import pytest
import yaml
from tau2.data_model.tasks import Action

import handoff  # noqa: F401  (prepares the process for tau2)
from handoff.tasks import DOMAINS, get_task, load_tasks, parse_derived_id, paths
from handoff.tasks.authoring import gold_policy as gp
from handoff.tasks.authoring.kinds.hard_negative import hard_negative_candidates
from handoff.tasks.authoring.labelling import read_overrides
from handoff.tasks.authoring.manifests import derived_tasks, gold_problems
from handoff.tasks.labels import load_labels
from handoff.tasks.upstream import upstream_tasks

ROOT = paths.REPO_ROOT


def act(name: str, **arguments) -> Action:
    return Action(action_id=name, name=name, arguments=arguments)


def gold_action(domain: str, task_id: str, name: str) -> Action:
    return next(a for a in get_task(domain, task_id).evaluation_criteria.actions if a.name == name)


def flagged(domain: str, *actions: Action) -> set[str]:
    return {v.clause for v in gp.check_actions(domain, "example", list(actions))}


def flights(*pairs: tuple[str, str]) -> list[dict]:
    return [{"flight_number": n, "date": d} for n, d in pairs]


ONE_PASSENGER = [{"first_name": "Aarav", "last_name": "Ahmed", "dob": "1985-04-04"}]
M20IZO = flights(("HAT268", "2024-05-22"), ("HAT010", "2024-05-22"))  # aarav_ahmed_6699's economy trip
# 018BE2: juan_taylor_8806's business trip, booked 2024-05-06, no insurance, every flight upcoming.
J018BE2 = flights(("HAT176", "2024-05-27"), ("HAT263", "2024-05-27"),
                  ("HAT212", "2024-05-28"), ("HAT053", "2024-05-28"))
# 02EA8Y: lucas_hernandez_8985's economy trip, flown 2024-05-06 and 2024-05-14.
J02EA8Y = flights(("HAT230", "2024-05-06"), ("HAT097", "2024-05-06"),
                  ("HAT073", "2024-05-14"), ("HAT119", "2024-05-14"))


def booking(**changes) -> Action:
    """airline 35's gold booking (aarav_ahmed_6699, one passenger, credit_card_9074831), with changes."""
    arguments = {**gold_action("airline", "35", "book_reservation").arguments, **changes}
    return act("book_reservation", **arguments)


# (clause, the domain, actions that break it, actions that do not)
CASES = [
    ("cancel_flown", "airline", [act("cancel_reservation", reservation_id="053UCP")],  # business, flown 05-12
     [act("cancel_reservation", reservation_id="018BE2")]),
    ("cancel_eligibility", "airline", [act("cancel_reservation", reservation_id="XEHM4B")],  # basic economy, old
     [act("cancel_reservation", reservation_id="1KUOX2")]),  # booked within 24 hours
    ("cancel_eligibility", "airline", [act("cancel_reservation", reservation_id="XEHM4B")],
     [act("cancel_reservation", reservation_id="06K2QN")]),  # a flight cancelled by the airline
    ("cancel_eligibility", "airline", [act("cancel_reservation", reservation_id="XEHM4B")],
     [act("cancel_reservation", reservation_id="018BE2")]),  # business
    ("cancel_insurance_reason", "airline", [act("cancel_reservation", reservation_id="59XX6W")],  # insured only
     [act("cancel_reservation", reservation_id="XEHM4B")]),  # no insurance: cancel_eligibility's case
    ("cabin_change_flown", "airline",
     [act("update_reservation_flights", reservation_id="02EA8Y", cabin="business", flights=J02EA8Y,
          payment_id="gift_card_9443446")],
     [act("update_reservation_flights", reservation_id="018BE2", cabin="economy", flights=J018BE2,
          payment_id="credit_card_2217221")]),
    ("basic_economy_flights", "airline",
     [act("update_reservation_flights", reservation_id="0171JI", cabin="basic_economy",
          flights=flights(("HAT162", "2024-05-21"), ("HAT058", "2024-05-21")), payment_id="gift_card_4636647")],
     [act("update_reservation_flights", reservation_id="0171JI", cabin="economy",
          flights=flights(("HAT162", "2024-05-21"), ("HAT143", "2024-05-21")), payment_id="gift_card_4636647")]),
    ("keep_route", "airline", [gold_action("airline", "29", "update_reservation_flights")],  # DTW-LGA to DTW-JFK
     [gold_action("airline", "15", "update_reservation_flights")]),
    ("payment_in_profile", "airline", [booking(payment_methods=[{"payment_id": "credit_card_2217221", "amount": 290}])],
     [booking()]),
    ("update_payment_in_profile", "airline",
     [act("update_reservation_baggages", reservation_id="018BE2", total_baggages=3, nonfree_baggages=0,
          payment_id="credit_card_9074831")],
     [act("update_reservation_baggages", reservation_id="018BE2", total_baggages=3, nonfree_baggages=0,
          payment_id="credit_card_2217221")]),
    ("update_payment_kind", "airline",
     [act("update_reservation_flights", reservation_id="M20IZO", cabin="business", flights=M20IZO,
          payment_id="certificate_9645872")],
     [act("update_reservation_flights", reservation_id="M20IZO", cabin="business", flights=M20IZO,
          payment_id="credit_card_9074831")]),
    ("booking_payment_limits", "airline",
     [booking(payment_methods=[{"payment_id": "credit_card_9074831", "amount": 145},
                               {"payment_id": "credit_card_4959530", "amount": 145}])],
     [booking()]),
    ("max_passengers", "airline", [booking(passengers=ONE_PASSENGER * 6)], [booking()]),
    ("bags_not_removed", "airline",
     [act("update_reservation_baggages", reservation_id="018BE2", total_baggages=1, nonfree_baggages=0,
          payment_id="credit_card_2217221")],
     [act("update_reservation_baggages", reservation_id="018BE2", total_baggages=2, nonfree_baggages=0,
          payment_id="credit_card_2217221")]),
    ("free_bag_allowance", "airline", [gold_action("airline", "33", "update_reservation_baggages")],  # 2 of 3 free
     [act("update_reservation_baggages", reservation_id="HXDUBJ", total_baggages=2, nonfree_baggages=0,
          payment_id="gift_card_6941833")]),  # yara_garcia_1905: gold, HXDUBJ economy, one passenger
    ("free_bag_allowance", "airline", [booking(total_baggages=3, nonfree_baggages=0)],  # silver economy: 2 free
     [booking(total_baggages=3, nonfree_baggages=1)]),
    ("passenger_details", "airline", [booking()],  # the user Aarav Ahmed, born 1981-05-26, booked as 1985-04-04
     [booking(passengers=[{"first_name": "Aarav", "last_name": "Ahmed", "dob": "1981-05-26"}])]),
    ("passenger_details", "airline", [booking(passengers=[{"first_name": "Raj", "last_name": "Patel",
                                                          "dob": "1980-12-03"}])],  # saved: Aarav Patel
     [booking(passengers=[{"first_name": "Ivan", "last_name": "Smith", "dob": "1990-01-01"}])]),  # not in the profile
    ("compensation", "airline", [gold_action("airline", "27", "send_certificate")],  # a delay, nothing changed
     [act("send_certificate", user_id="aarav_jackson_2879", amount=400)]),  # silver, XMSNJU: 4 passengers, cancelled
    ("cancel_pending_only", "retail", [act("cancel_pending_order", order_id="#W1023987", reason="no longer needed")],
     [act("cancel_pending_order", order_id="#W1006327", reason="no longer needed")]),
    ("cancel_reason", "retail", [act("cancel_pending_order", order_id="#W1006327", reason="changed my mind")],
     [act("cancel_pending_order", order_id="#W1006327", reason="ordered by mistake")]),
    ("modify_pending_only", "retail",
     [act("modify_pending_order_payment", order_id="#W1770559", payment_method_id="gift_card_5826260")],  # processed
     [act("modify_pending_order_payment", order_id="#W1080318", payment_method_id="gift_card_3749819")]),
    ("return_delivered_only", "retail",
     [act("return_delivered_order_items", order_id="#W1006327", item_ids=["5925362855"],
          payment_method_id="credit_card_4998749")],
     [act("return_delivered_order_items", order_id="#W1023987", item_ids=["8926329222"],
          payment_method_id="gift_card_9450778")]),
    ("exchange_delivered_only", "retail",
     [act("exchange_delivered_order_items", order_id="#W1006327", item_ids=["5925362855"],
          new_item_ids=["6700049080"], payment_method_id="credit_card_4998749")],
     [act("exchange_delivered_order_items", order_id="#W1023987", item_ids=["8926329222"],
          new_item_ids=["9956648681"], payment_method_id="gift_card_9450778")]),
    ("refund_destination", "retail", [gold_action("retail", "12", "return_delivered_order_items")],  # PayPal
     [gold_action("retail", "26", "return_delivered_order_items")]),
    ("payment_in_profile", "retail",
     [act("exchange_delivered_order_items", order_id="#W1023987", item_ids=["8926329222"],
          new_item_ids=["9956648681"], payment_method_id="credit_card_4998749")],  # another user's card
     [act("exchange_delivered_order_items", order_id="#W1023987", item_ids=["8926329222"],
          new_item_ids=["9956648681"], payment_method_id="gift_card_9450778")]),
    ("payment_differs", "retail",
     [act("modify_pending_order_payment", order_id="#W1080318", payment_method_id="credit_card_3577130")],
     [act("modify_pending_order_payment", order_id="#W1080318", payment_method_id="gift_card_3749819")]),
    ("gift_card_balance", "retail",
     [act("modify_pending_order_payment", order_id="#W1090976", payment_method_id="gift_card_9111522")],  # 32 < 1821.99
     [act("modify_pending_order_payment", order_id="#W1080318", payment_method_id="gift_card_3749819")]),  # 91 > 53.43
    ("modify_gift_card_covers_difference", "retail",
     [act("modify_pending_order_items", order_id="#W1068289", item_ids=["1994478369"], new_item_ids=["4510078629"],
          payment_method_id="gift_card_9105630")],  # 102.11 more, 91 on the card
     [act("modify_pending_order_items", order_id="#W1006327", item_ids=["5925362855"], new_item_ids=["6700049080"],
          payment_method_id="credit_card_4998749")]),
    ("exchange_gift_card_covers_difference", "retail", [gold_action("retail", "105", "exchange_delivered_order_items")],
     [act("exchange_delivered_order_items", order_id="#W1023987", item_ids=["8926329222"],
          new_item_ids=["9956648681"], payment_method_id="gift_card_9450778")]),
    ("modify_same_product", "retail",
     [act("modify_pending_order_items", order_id="#W1006327", item_ids=["5925362855"], new_item_ids=["4859937227"],
          payment_method_id="credit_card_4998749")],  # not available
     [act("modify_pending_order_items", order_id="#W1006327", item_ids=["5925362855"], new_item_ids=["6700049080"],
          payment_method_id="credit_card_4998749")]),
    ("exchange_same_product", "retail", [gold_action("retail", "18", "exchange_delivered_order_items")],  # same item
     [act("exchange_delivered_order_items", order_id="#W1023987", item_ids=["8926329222"],
          new_item_ids=["9956648681"], payment_method_id="gift_card_9450778")]),
]


@pytest.mark.parametrize("clause, domain, breaking, complying", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_clause_flags_what_breaks_it_and_nothing_else(clause, domain, breaking, complying):
    assert clause in flagged(domain, *breaking)
    assert clause not in flagged(domain, *complying)


def test_every_clause_has_a_case():
    assert {(d, c.id) for d in DOMAINS for c in gp.clauses(d)} == {(d, c) for c, d, _, _ in CASES}


def test_clauses_are_judged_on_the_database_the_gold_left():
    """A delay certificate is allowed once the gold has changed the delayed reservation (line 165); a
    cancellation is judged on the reservation as the gold left it (airline 7 upgrades, then cancels)."""
    assert flagged("airline", *get_task("airline", "7").evaluation_criteria.actions) == {
        "cancel_eligibility", "cancel_insurance_reason"}
    assert "cancel_pending_only" in flagged(
        "retail", act("cancel_pending_order", order_id="#W1006327", reason="no longer needed"),
        act("cancel_pending_order", order_id="#W1006327", reason="no longer needed"))


def test_the_free_bag_allowance_is_read_from_policy_md():
    table = gp.free_bags_per_passenger()
    assert table[("regular", "basic_economy")] == 0 and table[("silver", "economy")] == 2
    assert table[("gold", "economy")] == 3 and table[("gold", "business")] == 4 and len(table) == 9


def test_the_checker_finds_airline_23_33_35_and_nothing_new():
    """Issue 32: the two clauses of the free-bag allowance and of passenger details flag exactly these golds."""
    new = {"free_bag_allowance", "passenger_details"}
    found = {(d, t.id): {v.clause for v in gp.upstream_violations(d, t.id)} & new
             for d in DOMAINS for t in upstream_tasks(d)}
    assert {k: v for k, v in found.items() if v} == {
        ("airline", "23"): {"passenger_details"}, ("airline", "33"): {"free_bag_allowance"},
        ("airline", "35"): {"passenger_details"}}


def test_a_gold_is_unreachable_when_it_breaks_the_policy_and_the_tool_carried_it_out():
    unreachable = gp.unreachable_golds()
    assert {("airline", "23"), ("airline", "33"), ("airline", "35"), ("airline", "9")} <= unreachable
    assert ("retail", "105") not in unreachable  # the tool rejects its breaking exchange: nothing changed
    assert ("airline", "19") not in unreachable  # flagged, hand-checked as complying
    for domain in DOMAINS:
        for task in upstream_tasks(domain):
            assert gp.gold_reachable(domain, task) == ((domain, task.id) not in unreachable), f"{domain}/{task.id}"


def test_the_clause_file_cites_policy_md():
    for domain in DOMAINS:
        lines = gp.policy_path(domain).read_text().splitlines()
        for c in gp.clauses(domain):
            assert c.quote in lines[c.line - 1], c.cite()


def _doc() -> dict:
    return yaml.safe_load((ROOT / paths.POLICY_CLAUSES_FILE).read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["airline"]["clauses"]["cancel_flown"].update(line=140), "line 140 does not contain"),
    (lambda d: d["retail"]["clauses"]["cancel_reason"].update(check="no_such_check"), "no check function"),
    (lambda d: d["retail"]["clauses"]["cancel_reason"].update(instead="maybe"), "instead must be"),
    (lambda d: d["retail"]["clauses"].pop("cancel_reason"), "check functions without a clause: cancel_reason"),
    (lambda d: d["airline"]["now"].update(quote="The current time is 2025"), "airline/now"),
])
def test_a_clause_file_that_disagrees_with_policy_md_or_the_checks_is_refused(edit, message):
    doc = _doc()
    edit(doc)
    with pytest.raises(gp.ClauseError, match=message):
        gp.parse_clauses(doc)


# --- applied to the task sets -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def derived():
    return derived_tasks()


def test_nothing_is_flagged_and_unhandled(derived):
    assert gold_problems(ROOT, derived) == []


def test_no_derived_gold_breaks_a_clause_unless_its_parent_was_hand_checked_as_complying(derived):
    for (domain, _), tasks in derived.items():
        for task in tasks:
            found = gp.check_gold(domain, task)
            if found:
                parent = get_task(domain, parse_derived_id(task.id).parent_id)
                assert gp.resolutions()[domain][parent.id]["gold"] == "complies", task.id
    parents = {parse_derived_id(t.id).parent_id for t in load_tasks("airline", kinds=["hard_negative"])}
    assert not parents & {"7", "9", "23", "27", "29", "33", "35", "37", "39", "44"} and "19" in parents


def test_breaking_golds_never_parent_a_hard_negative():
    for domain in DOMAINS:
        for task in hard_negative_candidates(domain):
            assert gp.gold_complies(domain, task)
            entry = gp.resolutions()[domain].get(task.id)
            assert not gp.upstream_violations(domain, task.id) or entry["gold"] == "complies"


def test_overridden_breaking_golds_cite_their_clause():
    labels = load_labels()
    for domain in DOMAINS:
        for task_id, entry in gp.resolutions()[domain].items():
            label = labels[(domain, task_id)]
            assert label.overridden == (entry["label"] == "override"), f"{domain}/{task_id}"
            for clause_id in entry["findings"]:
                if label.overridden:
                    assert f"line {gp.clause(domain, clause_id).line}" in label.reason
            if entry["label"] == "override" and entry["findings"]:
                instead = {gp.clause(domain, c).instead for c in entry["findings"]}
                assert label.should_transfer == ("transfer" in instead), f"{domain}/{task_id}"


def _with_resolutions(monkeypatch, edit):
    doc = json.loads(json.dumps(gp.resolutions()))
    edit(doc)
    monkeypatch.setattr(gp, "resolutions", lambda: doc)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["airline"].pop("9"), "airline/9: not hand-checked (findings: cancel_flown"),
    (lambda d: d["retail"].pop("50"), "retail/50: not hand-checked (findings: none; gold transfer: True)"),
    (lambda d: d["airline"]["19"].update(findings=[]), "airline/19: findings [], the checker finds"),
    (lambda d: d["airline"]["29"].update(label="override"), "airline/29: label override, but"),
    (lambda d: d["airline"]["9"].update(label="kept"), "airline/9: label kept, but"),
    (lambda d: d["airline"].update({"0": d["airline"]["19"]}), "airline/0: the checker flags nothing"),
    (lambda d: d["retail"]["105"].update(gold="fine"), "retail/105: needs gold"),
    (lambda d: d["airline"]["33"].pop("reachable"), "airline/33: reachable True, the replay says False"),
    (lambda d: d["retail"]["105"].update(reachable=False), "retail/105: reachable False, the replay says True"),
])
def test_an_unhandled_or_inconsistent_hand_check_is_reported(derived, monkeypatch, edit, message):
    _with_resolutions(monkeypatch, edit)
    assert any(message in p for p in gold_problems(ROOT, derived)), gold_problems(ROOT, derived)


def test_an_override_reason_must_cite_the_clause(derived, repo_copy):
    path = repo_copy / paths.OVERRIDES_FILE
    doc = json.loads(path.read_text())
    doc["domains"]["airline"]["9"]["reason"] = "the reservation was flown"
    path.write_text(json.dumps(doc))
    assert any("airline/9: the reason does not cite policy.md line 141" in p for p in gold_problems(repo_copy, derived))


def test_the_build_refuses_and_the_check_reports_an_unhandled_gold(derived, repo_copy, monkeypatch):
    from handoff.tasks.authoring import manifests
    from handoff.tasks.labels import ManifestError

    monkeypatch.setattr(manifests, "derived_tasks", lambda: derived)
    _with_resolutions(monkeypatch, lambda d: d["airline"].pop("37"))
    before = {p: p.read_bytes() for p in (repo_copy / "data").rglob("*") if p.is_file()}
    with pytest.raises(ManifestError, match="airline/37: not hand-checked"):
        manifests.build(repo_copy)
    assert {p: p.read_bytes() for p in (repo_copy / "data").rglob("*") if p.is_file()} == before
    assert any("airline/37: not hand-checked" in p for p in manifests.check(repo_copy, rerun=0))


def test_checked_and_kept_golds_are_listed_in_the_docs():
    doc = (ROOT / "docs/tasks.md").read_text()
    for domain in DOMAINS:
        for task_id, entry in gp.resolutions()[domain].items():
            findings = ", ".join(f"`{c}`" for c in entry["findings"]) or "gold transfer"
            shown = task_id.replace("|", "\\|")  # telecom ids hold pipes: escaped in a markdown table
            assert f"| {domain} | {shown} | {findings} | {entry['gold']} | {entry['label']} |" in doc


def test_overrides_reference_known_tasks():
    tasks = {d: {t.id for t in load_tasks(d)} for d in DOMAINS}
    assert read_overrides(ROOT / paths.OVERRIDES_FILE, tasks)
    assert all(t in {u.id for u in upstream_tasks(d)} for d in DOMAINS for t in gp.resolutions()[d])


def test_labels_golds_lists_the_hand_check_and_fails_on_anything_unhandled(derived, monkeypatch, capsys):
    from handoff.cli import main as cli_main
    from handoff.tasks.authoring import manifests

    monkeypatch.setattr(manifests, "derived_tasks", lambda: derived)
    assert cli_main(["labels", "golds"]) == 0
    out = capsys.readouterr().out
    assert "airline/33: gold breaks, label kept, tau2 reward unreachable" in out
    assert "airline/9: gold breaks, label override" in out and "cancel_flown (airline policy.md line 141" in out
    assert "retail/26: gold breaks, label override (gold transfer)" in out
    _with_resolutions(monkeypatch, lambda d: d["retail"].pop("105"))
    assert cli_main(["labels", "golds"]) == 1
    assert "retail/105: not hand-checked" in capsys.readouterr().err
