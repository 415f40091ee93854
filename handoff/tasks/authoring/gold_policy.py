"""The gold checker: every reference solution, upstream and derived, replayed in tau2's environment and
checked against the policy clauses that the database decides (data/policy/clauses.yaml).

Each clause cites its line of the domain's policy.md; a clause is checked on the database as it is just
before the gold action it governs (so a gold that first changes a reservation and then cancels it is
judged on the changed one). A gold that breaks a clause is never the parent of a derived task, and every
upstream gold that breaks one is hand-checked: data/policy/gold_resolutions.yaml records what was done
(`handoff labels override`, or kept with the reason); `handoff labels build` and `check` refuse a finding
that is not resolved there. docs/tasks.md, "Golds against the policy".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import Callable, NamedTuple

import yaml

from handoff.tasks import paths
from handoff.tasks.domains import facts
from handoff.tasks.domains.airline import TAKEN_OFF
from handoff.tasks.golds import resolutions, unreachable_golds
from handoff.tasks.ids import parse_derived_id
from handoff.tasks.upstream import has_gold_transfer, policy_path, upstream_tasks

__all__ = ["resolutions", "unreachable_golds"]  # the read side's (handoff.tasks.golds), used here too

INSTEAD = ("transfer", "deny")


@dataclass(frozen=True)
class Clause:
    domain: str
    id: str
    line: int
    quote: str
    tools: tuple[str, ...]
    instead: str  # what a correct agent does instead of what a breaking gold does
    rule: str
    check: str  # the name of the check function (the clause id unless the data names another)

    def cite(self) -> str:
        return f"{self.domain} policy.md line {self.line} ({self.quote!r})"


class Violation(NamedTuple):
    domain: str
    task_id: str
    clause: str
    step: int  # index of the gold action
    message: str
    applied: bool = True  # tau2's tool carried the action out (False: it raised, the database is unchanged)


@dataclass
class Context:
    now: datetime | None
    changed: set[str] = field(default_factory=set)  # reservations the gold changed or cancelled so far


# --- the checks: (db before the action, the action's arguments, context) -> what breaks the clause, or None -----
# Each domain's own: domain -> check name (the function's, unless given) -> function.

CHECKS: dict[str, dict[str, Callable]] = {"airline": {}, "retail": {}, "telecom": {}}


def check(domain: str, name: str | None = None) -> Callable:
    def register(fn: Callable) -> Callable:
        CHECKS[domain][name or fn.__name__] = fn
        return fn

    return register


def _reservation(db, args: dict):
    return db.reservations.get(args.get("reservation_id"))


def _taken_off(db, reservation) -> list[str]:
    """'<flight> on <date>' for each flight of the reservation that has taken off."""
    out = []
    for flight in reservation.flights:
        record = db.flights.get(flight.flight_number)
        status = record.dates.get(flight.date).status if record and flight.date in record.dates else None
        if status in TAKEN_OFF:
            out.append(f"{flight.flight_number} on {flight.date} ({status})")
    return out


@check("airline")
def cancel_flown(db, args: dict, ctx: Context) -> str | None:
    reservation = _reservation(db, args)
    flown = reservation and _taken_off(db, reservation)
    return f"reservation {reservation.reservation_id} has flown flights: {', '.join(flown)}" if flown else None


def _cancel_grounds(db, reservation, now: datetime) -> list[str]:
    """The grounds of policy lines 144-146 that hold (insurance, line 147, is not among them)."""
    grounds = []
    if datetime.fromisoformat(reservation.created_at) >= now - timedelta(hours=24):
        grounds.append("booked within 24 hours")
    for flight in reservation.flights:
        record = db.flights.get(flight.flight_number)
        if record and flight.date in record.dates and record.dates[flight.date].status == "cancelled":
            grounds.append(f"{flight.flight_number} on {flight.date} cancelled by the airline")
    if reservation.cabin == "business":
        grounds.append("business")
    return grounds


@check("airline")
def cancel_eligibility(db, args: dict, ctx: Context) -> str | None:
    reservation = _reservation(db, args)
    if reservation is None or _cancel_grounds(db, reservation, ctx.now) or reservation.insurance == "yes":
        return None
    return (f"reservation {reservation.reservation_id} ({reservation.cabin}, booked {reservation.created_at}, no "
            "insurance, no flight cancelled by the airline) meets no cancellation ground")


@check("airline")
def cancel_insurance_reason(db, args: dict, ctx: Context) -> str | None:
    reservation = _reservation(db, args)
    if reservation is None or _cancel_grounds(db, reservation, ctx.now) or reservation.insurance != "yes":
        return None
    return (f"reservation {reservation.reservation_id} can only be cancelled through its travel insurance: the "
            "user's reason must be health or weather")


def _flight_keys(flights) -> list[tuple[str, str]]:
    return [(f["flight_number"], f["date"]) if isinstance(f, dict) else (f.flight_number, f.date) for f in flights]


@check("airline")
def cabin_change_flown(db, args: dict, ctx: Context) -> str | None:
    reservation = _reservation(db, args)
    if reservation is None or args.get("cabin") == reservation.cabin:
        return None
    flown = _taken_off(db, reservation)
    return (f"cabin of {reservation.reservation_id} changed from {reservation.cabin} to {args['cabin']} after "
            f"{', '.join(flown)}") if flown else None


@check("airline")
def basic_economy_flights(db, args: dict, ctx: Context) -> str | None:
    reservation = _reservation(db, args)
    if reservation is None or reservation.cabin != "basic_economy":
        return None
    old, new = _flight_keys(reservation.flights), _flight_keys(args.get("flights", []))
    changed = set(old) != set(new)
    return f"flights of basic-economy reservation {reservation.reservation_id} changed" if changed else None


@check("airline")
def keep_route(db, args: dict, ctx: Context) -> str | None:
    reservation = _reservation(db, args)
    new = _flight_keys(args.get("flights", []))
    if reservation is None or not new or set(new) == set(_flight_keys(reservation.flights)):
        return None
    legs = [(db.flights[n].origin, db.flights[n].destination) for n, _ in new if n in db.flights]
    if len(legs) != len(new):
        return None  # an unknown flight: the tool rejects it
    start, end, stops = legs[0][0], legs[-1][1], {d for _, d in legs}
    keeps = start == reservation.origin and (
        end == reservation.destination if reservation.flight_type == "one_way"
        else end == reservation.origin and reservation.destination in stops
    )
    route = " -> ".join([start, *(d for _, d in legs)])
    return None if keeps else (f"{reservation.flight_type} {reservation.origin}-{reservation.destination} "
                               f"({reservation.reservation_id}) changed to {route}")


def _airline_payments(db, args: dict) -> tuple[object, list[str]]:
    """(the user who pays, the payment ids) of a booking or an update."""
    if "payment_methods" in args:
        return db.users.get(args.get("user_id")), [p["payment_id"] for p in args["payment_methods"]]
    reservation = _reservation(db, args)
    return (db.users.get(reservation.user_id) if reservation else None), [args.get("payment_id")]


@check("airline")
def payment_in_profile(db, args: dict, ctx: Context) -> str | None:
    user, ids = _airline_payments(db, args)
    missing = [i for i in ids if user is not None and i not in user.payment_methods]
    return f"{', '.join(missing)} not in {user.user_id}'s profile" if missing else None


@check("airline")
def update_payment_kind(db, args: dict, ctx: Context) -> str | None:
    user, (payment_id,) = _airline_payments(db, args)
    method = user.payment_methods.get(payment_id) if user else None
    kind_ok = method is None or method.source in ("gift_card", "credit_card")
    return None if kind_ok else f"{payment_id} is a {method.source}"


@check("airline")
def booking_payment_limits(db, args: dict, ctx: Context) -> str | None:
    user, ids = _airline_payments(db, args)
    sources = [user.payment_methods[i].source for i in ids if user and i in user.payment_methods]
    limits = {"certificate": 1, "credit_card": 1, "gift_card": 3}
    over = [f"{sources.count(s)} {s}s" for s, n in limits.items() if sources.count(s) > n]
    return f"the booking uses {', '.join(over)}" if over else None


@check("airline")
def max_passengers(db, args: dict, ctx: Context) -> str | None:
    count = len(args.get("passengers", []))
    return f"{count} passengers" if count > 5 else None


@check("airline")
def bags_not_removed(db, args: dict, ctx: Context) -> str | None:
    reservation = _reservation(db, args)
    if reservation is None or args.get("total_baggages", 0) >= reservation.total_baggages:
        return None
    return (f"checked bags of {reservation.reservation_id} lowered from {reservation.total_baggages} to "
            f"{args['total_baggages']}")


_MEMBER = re.compile(r"If the booking user is a (\w+) member")
_FREE_BAGS = re.compile(r"(\d+) free checked bags? for each (basic economy|economy|business) passenger")


@cache
def free_bags_per_passenger() -> dict[tuple[str, str], int]:
    """(membership, cabin) -> free checked bags per passenger, read from airline policy.md's table under
    'Checked bag allowance' (the line the free_bag_allowance clause cites)."""
    lines = _policy_lines("airline")
    start = next(i for i, line in enumerate(lines) if "Checked bag allowance" in line)
    table, member = {}, None
    for line in lines[start + 1:]:
        if _MEMBER.search(line):
            member = _MEMBER.search(line)[1]
        elif _FREE_BAGS.search(line):
            free = _FREE_BAGS.search(line)
            table[(member, free[2].replace(" ", "_"))] = int(free[1])
        elif line.strip():
            break  # "- Each extra baggage is 50 dollars.": the end of the table
    if len(table) != 9:
        raise ClauseError(f"airline policy.md: the checked bag allowance lists {len(table)} of 9 cases")
    return table


def _bag_booking(db, args: dict) -> tuple[object, str, int] | None:
    """(the booking user, the cabin, the number of passengers) of a booking or a baggage update."""
    if "reservation_id" not in args:
        return db.users.get(args.get("user_id")), args.get("cabin"), len(args.get("passengers", []))
    reservation = _reservation(db, args)
    return reservation and (db.users.get(reservation.user_id), reservation.cabin, len(reservation.passengers))


@check("airline")
def free_bag_allowance(db, args: dict, ctx: Context) -> str | None:
    booking = _bag_booking(db, args)
    if not booking or booking[0] is None:
        return None
    user, cabin, passengers = booking
    free = free_bags_per_passenger().get((user.membership, cabin), 0) * passengers
    total, nonfree = args.get("total_baggages", 0), args.get("nonfree_baggages", 0)
    if nonfree == max(0, total - free):
        return None
    return (f"{nonfree} of {total} checked bags charged, but {user.user_id} ({user.membership}) has {free} free "
            f"for {passengers} {cabin} passenger(s)")


def _profile_people(user) -> list:
    """The user and their saved passengers, as (first name, last name, date of birth) in lower case."""
    people = [(user.name.first_name, user.name.last_name, user.dob)]
    people += [(p.first_name, p.last_name, p.dob) for p in user.saved_passengers]
    return [tuple(str(v).lower() for v in person) for person in people]


@check("airline")
def passenger_details(db, args: dict, ctx: Context) -> str | None:
    user = db.users.get(args.get("user_id"))
    if user is None:
        return None
    problems = []
    for passenger in args.get("passengers", []):
        given = tuple(str(passenger.get(k, "")).lower() for k in ("first_name", "last_name", "dob"))
        for person in _profile_people(user):
            if sum(a == b for a, b in zip(given, person)) == 2:  # the same person, one detail not the profile's
                problems.append(f"passenger {' '.join(given[:2])} ({given[2]}) is {' '.join(person[:2])} "
                                f"({person[2]}) in {user.user_id}'s profile")
    return "; ".join(problems) or None


@check("airline")
def compensation(db, args: dict, ctx: Context) -> str | None:
    user = db.users.get(args.get("user_id"))
    if user is None:
        return None
    allowed = {}
    for rid in user.reservations:
        reservation = db.reservations.get(rid)
        if reservation is None or not (user.membership in ("silver", "gold") or reservation.insurance == "yes"
                                       or reservation.cabin == "business"):
            continue
        statuses = {db.flights[f.flight_number].dates[f.date].status for f in reservation.flights
                    if f.flight_number in db.flights and f.date in db.flights[f.flight_number].dates}
        if "cancelled" in statuses:
            allowed[100 * len(reservation.passengers)] = rid
        if "delayed" in statuses and rid in ctx.changed:
            allowed[50 * len(reservation.passengers)] = rid
    if args.get("amount") in allowed:
        return None
    grounds = ", ".join(f"${a} for {r}" for a, r in sorted(allowed.items())) or "none"
    return f"certificate of ${args.get('amount')} to {user.user_id} ({user.membership}); allowed: {grounds}"


# retail


def _order(db, args: dict):
    return db.orders.get(args.get("order_id"))


def _status_is(wanted: str) -> Callable:
    def status_check(db, args: dict, ctx: Context) -> str | None:
        order = _order(db, args)
        if order is None or order.status == wanted:
            return None
        return f"order {order.order_id} is {order.status!r}, not {wanted!r}"

    return status_check


for _name, _status in (("cancel_pending_only", "pending"), ("modify_pending_only", "pending"),
                       ("return_delivered_only", "delivered"), ("exchange_delivered_only", "delivered")):
    CHECKS["retail"][_name] = _status_is(_status)


def _payment_method(db, order, payment_id: str):
    user = db.users.get(order.user_id)
    return user.payment_methods.get(payment_id) if user else None


@check("retail", "payment_in_profile")
def retail_payment_in_profile(db, args: dict, ctx: Context) -> str | None:
    order = _order(db, args)
    payment_id = args.get("payment_method_id")
    if order is None or _payment_method(db, order, payment_id) is not None:
        return None
    return f"{payment_id} is not in the profile of {order.user_id}, who placed {order.order_id}"


def _original(order) -> str | None:
    return order.payment_history[0].payment_method_id if order.payment_history else None


@check("retail")
def refund_destination(db, args: dict, ctx: Context) -> str | None:
    order = _order(db, args)
    payment_id = args.get("payment_method_id")
    method = _payment_method(db, order, payment_id) if order else None
    if order is None or payment_id == _original(order) or (method is not None and method.source == "gift_card"):
        return None
    return f"refund of {order.order_id} to {payment_id}, not the original {_original(order)} or a gift card"


@check("retail")
def payment_differs(db, args: dict, ctx: Context) -> str | None:
    order = _order(db, args)
    same = order is not None and args.get("payment_method_id") == _original(order)
    return f"{order.order_id} is already paid with {_original(order)}" if same else None


@check("retail")
def gift_card_balance(db, args: dict, ctx: Context) -> str | None:
    order = _order(db, args)
    method = _payment_method(db, order, args.get("payment_method_id")) if order else None
    if method is None or method.source != "gift_card" or not order.payment_history:
        return None
    total = order.payment_history[0].amount
    return f"gift card balance {method.balance} < order total {total}" if method.balance < total else None


def _price_difference(db, order, args: dict) -> float | None:
    """The new items' price minus the old ones'; None when an item is unknown (the tool rejects it)."""
    prices = {i.item_id: i for i in order.items}
    total = 0.0
    for old, new in zip(args.get("item_ids", []), args.get("new_item_ids", [])):
        item = prices.get(old)
        variant = db.products[item.product_id].variants.get(new) if item and item.product_id in db.products else None
        if variant is None:
            return None
        total += variant.price - item.price
    return round(total, 2)


@check("retail")
def gift_card_covers_difference(db, args: dict, ctx: Context) -> str | None:
    order = _order(db, args)
    method = _payment_method(db, order, args.get("payment_method_id")) if order else None
    difference = _price_difference(db, order, args) if method is not None and method.source == "gift_card" else None
    if difference is None or method.balance >= difference:
        return None
    return f"gift card balance {method.balance} < price difference {difference}"


@check("retail")
def cancel_reason(db, args: dict, ctx: Context) -> str | None:
    reason = args.get("reason")
    return f"reason {reason!r}" if reason not in ("no longer needed", "ordered by mistake") else None


@check("retail")
def same_product_available(db, args: dict, ctx: Context) -> str | None:
    order = _order(db, args)
    if order is None:
        return None
    items = {i.item_id: i for i in order.items}
    problems = []
    for old, new in zip(args.get("item_ids", []), args.get("new_item_ids", [])):
        item = items.get(old)
        product = db.products.get(item.product_id) if item else None
        variant = product.variants.get(new) if product else None
        if variant is None:
            problems.append(f"{new} is not a variant of the product of {old}")
        elif new == old or not variant.available:
            problems.append(f"{new} is {'the same item' if new == old else 'not available'}")
    return "; ".join(problems) or None


# --- the clauses -------------------------------------------------------------------------------------------------


class ClauseError(ValueError):
    """data/policy/clauses.yaml disagrees with policy.md or with the checks."""


def _policy_lines(domain: str) -> list[str]:
    return policy_path(domain).read_text().splitlines()


def _cited(domain: str, entry: dict, where: str) -> None:
    lines = _policy_lines(domain)
    line = entry.get("line")
    if not isinstance(line, int) or not 1 <= line <= len(lines) or entry.get("quote", "") not in lines[line - 1]:
        raise ClauseError(f"{where}: policy.md line {line} does not contain {entry.get('quote')!r}")


@cache
def _document() -> dict:
    return yaml.safe_load((paths.REPO_ROOT / paths.POLICY_CLAUSES_FILE).read_text())


def parse_clauses(doc: dict) -> dict[str, tuple[Clause, ...]]:
    """The clauses of every domain, each checked against its policy.md line and its check function."""
    out = {}
    for domain, section in doc.items():
        if "now" in section:
            _cited(domain, section["now"], f"{domain}/now")
            if str(facts(domain).NOW).replace("T", " ") not in section["now"]["quote"]:
                raise ClauseError(f"{domain}/now: {section['now']['quote']!r} does not state "
                                  f"handoff.tasks.domains.{domain}.NOW ({facts(domain).NOW})")
        clauses, used = [], set()
        for clause_id, entry in section["clauses"].items():
            where = f"{paths.POLICY_CLAUSES_FILE}: {domain}/{clause_id}"
            _cited(domain, entry, where)
            name = entry.get("check", clause_id)
            if name not in CHECKS[domain]:
                raise ClauseError(f"{where}: no check function {name!r} in handoff.tasks.authoring.gold_policy")
            if entry.get("instead") not in INSTEAD:
                raise ClauseError(f"{where}: instead must be one of {', '.join(INSTEAD)}")
            used.add(name)
            clauses.append(Clause(domain, clause_id, entry["line"], entry["quote"], tuple(entry["tools"]),
                                  entry["instead"], " ".join(entry["rule"].split()), name))
        out[domain] = tuple(clauses)
        if set(CHECKS[domain]) - used:
            raise ClauseError(f"{domain}: check functions without a clause: "
                              f"{', '.join(sorted(set(CHECKS[domain]) - used))}")
    return out


@cache
def clauses(domain: str) -> tuple[Clause, ...]:
    return parse_clauses(_document())[domain]


@cache
def clause(domain: str, clause_id: str) -> Clause:
    return next(c for c in clauses(domain) if c.id == clause_id)


def _context(domain: str) -> Context:
    now = facts(domain).NOW
    return Context(now=datetime.fromisoformat(now) if now else None)


# --- replaying golds ---------------------------------------------------------------------------------------------


def check_actions(domain: str, task_id: str, actions: list) -> list[Violation]:
    """Replay the actions in a fresh tau2 environment of the domain (handoff.fasteval: tau2's Environment and
    tools) and check each against the clauses that govern its tool, on the database just before it runs."""
    from tau2.data_model.message import ToolCall

    from handoff.fasteval.environments import make_environment

    env, ctx = make_environment(domain), _context(domain)
    governing = {}
    for c in clauses(domain):
        for tool in c.tools:
            governing.setdefault(tool, []).append(c)
    found = []
    for step, action in enumerate(actions):
        messages = [(c.id, CHECKS[domain][c.check](env.tools.db, dict(action.arguments), ctx))
                    for c in governing.get(action.name, [])]
        result = env.get_response(ToolCall(id=f"call_{step}", name=action.name, arguments=action.arguments,
                                           requestor=action.requestor))
        found += [Violation(domain, task_id, clause_id, step, f"{action.name}: {message}", not result.error)
                  for clause_id, message in messages if message]
        if action.name in facts(domain).CHANGES and not result.error:
            ctx.changed.add(action.arguments.get("reservation_id"))
    return found


def check_gold(domain: str, task) -> list[Violation]:
    criteria = task.evaluation_criteria
    return check_actions(domain, task.id, list(criteria.actions or []) if criteria else [])


@cache
def _upstream_violations(domain: str) -> dict[str, tuple[Violation, ...]]:
    return {t.id: tuple(check_gold(domain, t)) for t in upstream_tasks(domain)}


def upstream_violations(domain: str, task_id: str) -> tuple[Violation, ...]:
    """The clauses an upstream task's gold breaks (cached per process)."""
    return _upstream_violations(domain)[task_id]


# --- the hand-check of flagged upstream golds ------------------------------------------------------------------

VERDICTS = ("complies", "breaks")
RESOLUTIONS = ("kept", "override")


def gold_complies(domain: str, task) -> bool:
    """Whether an upstream task's gold may parent a derived task: it breaks no clause, or the hand-check
    found that what the checker flagged is allowed (e.g. an insured cancellation for a health reason)."""
    found = sorted({v.clause for v in upstream_violations(domain, task.id)})
    entry = resolutions().get(domain, {}).get(task.id)
    return not found or bool(entry and entry.get("gold") == "complies" and sorted(entry.get("findings", [])) == found)


def gold_reachable(domain: str, task) -> bool:
    """Whether an agent that follows the policy can reach an upstream task's tau2 reward: False when the hand-check
    found that the gold breaks the policy and tau2's tools carried out one of its breaking actions (the correct
    agent's database then differs from the gold's). Derived from the checker; recorded as `reachable: false`
    in data/policy/gold_resolutions.yaml, where the reducer reads it (unreachable_golds)."""
    entry = resolutions().get(domain, {}).get(task.id) or {}
    return not (entry.get("gold") == "breaks" and any(v.applied for v in upstream_violations(domain, task.id)))


def _complies_as_parent(domain: str, task) -> bool:
    """A derived task whose gold is its parent's, hand-checked as complying (same findings)."""
    parent = next(t for t in upstream_tasks(domain) if t.id == parse_derived_id(task.id).parent_id)
    same = {v.clause for v in check_gold(domain, task)} == {v.clause for v in upstream_violations(domain, parent.id)}
    return same and gold_complies(domain, parent)


def _entry_problems(domain: str, task, entry: dict | None, overrides: dict) -> list[str]:
    where = f"{paths.GOLD_RESOLUTIONS_FILE}: {domain}/{task.id}"
    found = sorted({v.clause for v in upstream_violations(domain, task.id)})
    if entry is None:
        return [f"{where}: not hand-checked (findings: {', '.join(found) or 'none'}; "
                f"gold transfer: {has_gold_transfer(task)})"] if found or has_gold_transfer(task) else []
    if not found and not has_gold_transfer(task):
        return [f"{where}: the checker flags nothing and the gold has no transfer: remove the entry"]
    problems = []
    if sorted(entry.get("findings") or []) != found:
        problems.append(f"{where}: findings {sorted(entry.get('findings') or [])}, the checker finds {found}")
    noted = str(entry.get("note", "")).strip()
    if entry.get("gold") not in VERDICTS or entry.get("label") not in RESOLUTIONS or not noted:
        problems.append(f"{where}: needs gold ({'|'.join(VERDICTS)}), label ({'|'.join(RESOLUTIONS)}) and a note")
    override = overrides.get((domain, task.id))
    if entry.get("label") == "override" and override is None:
        problems.append(f"{where}: label override, but {paths.OVERRIDES_FILE} has no override for it")
    if entry.get("label") == "kept" and override is not None:
        problems.append(f"{where}: label kept, but {paths.OVERRIDES_FILE} overrides it")
    reachable = gold_reachable(domain, task)
    if entry.get("reachable", True) is not reachable:
        problems.append(f"{where}: reachable {entry.get('reachable', True)}, the replay says {reachable} (false "
                        "when the gold breaks the policy and tau2 carried out a breaking action)")
    if override is not None:
        uncited = [c for c in found if f"line {clause(domain, c).line}" not in override.reason]
        if uncited:
            problems.append(f"{paths.OVERRIDES_FILE}: {domain}/{task.id}: the reason does not cite policy.md "
                            f"line {', '.join(str(clause(domain, c).line) for c in uncited)}")
    return problems


def problems(derived: dict, overrides: dict) -> list[str]:
    """What the gold checker flags and nothing handles: a derived task whose gold breaks a clause, an upstream
    gold that breaks one or transfers without a consistent hand-check entry. `derived`: (domain, kind) ->
    tasks; `overrides`: (domain, task id) -> Override."""
    out = []
    for (domain, _), tasks in sorted(derived.items()):
        out += [f"{domain}/{v.task_id}: its gold breaks {v.clause} ({clause(domain, v.clause).cite()}): {v.message}"
                for t in tasks if not _complies_as_parent(domain, t) for v in check_gold(domain, t)]
    for domain in sorted({d for d, _ in derived}):
        entries = resolutions().get(domain, {})
        ids = {t.id for t in upstream_tasks(domain)}
        out += [f"{paths.GOLD_RESOLUTIONS_FILE}: {domain}/{i}: unknown upstream task" for i in entries if i not in ids]
        for task in upstream_tasks(domain):
            out += _entry_problems(domain, task, entries.get(task.id), overrides)
    return out
