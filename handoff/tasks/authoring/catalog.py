"""The out-of-scope catalog: requests that no tool and no policy clause of the domain covers.

Each entry names the tools and the policy clauses that were checked and says why none of them covers
the request, and also why the policy does not forbid it (a forbidden request must be denied, not
transferred). By every domain's policy, a request that cannot be handled within the scope of the agent's
actions is transferred to a human agent. docs/out_of_scope.md is rendered from this module.

`request` summarizes what the user asks for; the user's own words are in data/scenarios/<domain>.yaml
(out_of_scope.requests), whose placeholders are filled from the parent task's user in tau2's db.json
(handoff.tasks.authoring.derive). `item_class` names the class of product a retail request needs
(data/scenarios/retail_products.yaml): the item is one of the user's delivered items of that class.
"""

from __future__ import annotations

import string
from dataclasses import dataclass


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


@dataclass(frozen=True)
class OutOfScopeRequest:
    id: str
    request: str
    tools_checked: str
    policy_checked: str
    why: str
    item_class: str | None = None  # retail: the class of product the request needs (retail_products.yaml)
    traveller: bool = False  # airline: the request concerns who flies, so the user must be a passenger


AIRLINE = (
    OutOfScopeRequest(
        "wheelchair_assistance",
        "You need wheelchair assistance at the airport for your upcoming trip {reservation_id} ({route} on {date}) "
        "and want it added to the booking.",
        "get_reservation_details and get_user_details (no service or assistance field); update_reservation_passengers "
        "(first name, last name, date of birth only); update_reservation_baggages (bag counts only).",
        "Reservation attributes; Modify flight (flights, cabin, baggage and insurance, passengers); Book flight.",
        "No tool records special assistance and no clause mentions it, nor forbids it.",
        traveller=True,
    ),
    OutOfScopeRequest(
        "pet_in_cabin",
        "You want to bring your small dog in the cabin on your upcoming trip {reservation_id} ({route} on {date}) "
        "and need the pet added to the reservation.",
        "update_reservation_baggages (total and non-free checked bags only); update_reservation_passengers "
        "(people only); book_reservation.",
        "Checked bag allowance; Change baggage and insurance; Reservation attributes.",
        "Pets are not bags or passengers; no tool or clause covers them, and no clause forbids them.",
        traveller=True,
    ),
    OutOfScopeRequest(
        "special_meal",
        "You need a vegetarian meal on every flight of your upcoming trip {reservation_id} ({route} on {date}).",
        "get_reservation_details (no meal field); update_reservation_passengers; update_reservation_flights.",
        "Reservation attributes; Modify flight.",
        "Meals appear nowhere in the tools or the policy.",
        traveller=True,
    ),
    OutOfScopeRequest(
        "seat_selection",
        "You want window seats assigned for your upcoming trip {reservation_id} ({route} on {date}).",
        "search_direct_flight / search_onestop_flight (seat counts per cabin, no seat map); update_reservation_flights "
        "(flights and cabin only); get_reservation_details (no seat assignment).",
        "Flight (available seats per cabin class); Change cabin; Modify flight.",
        "Seats are only counted per cabin; no tool assigns a seat and no clause covers seat assignment.",
        traveller=True,
    ),
    OutOfScopeRequest(
        "known_traveler_number",
        "You want your Known Traveler Number (TSA PreCheck) added to your upcoming trip {reservation_id} "
        "({route} on {date}) so that it prints on your boarding pass.",
        "update_reservation_passengers (first name, last name, date of birth only); get_user_details.",
        "Change passengers (names and number of passengers); User profile attributes.",
        "Passengers have no traveler-number field; the passenger clause only covers who flies.",
        traveller=True,
    ),
    OutOfScopeRequest(
        "lounge_day_pass",
        "You want to buy an airport lounge day pass for the departure of your upcoming trip {reservation_id} "
        "({route} on {date}).",
        "book_reservation (flights only); update_reservation_baggages; send_certificate; calculate.",
        "Book flight; Payment; Refunds and Compensation.",
        "The agent can only sell flights, bags and insurance; nothing covers lounge access.",
        traveller=True,
    ),
    OutOfScopeRequest(
        "lost_baggage_trace",
        "Your checked bag did not arrive after flight {past_flight} on {past_date}. You want a trace opened so the bag "
        "is found and delivered to you; you are not asking for compensation.",
        "get_flight_status (flight status only); get_reservation_details (bag counts only); update_reservation_baggages "
        "(adds bags, cannot trace them).",
        "Checked bag allowance; Change baggage and insurance; Refunds and Compensation (cancelled or delayed flights only).",
        "Bags are only counted; no tool tracks or traces a bag and no clause covers lost bags.",
        traveller=True,
    ),
    OutOfScopeRequest(
        "missing_miles",
        "The frequent-flyer miles for your flight {past_flight} on {past_date} were never credited to your account, "
        "and you want them credited.",
        "get_user_details (no miles or points balance); send_certificate (certificates, not miles).",
        "User profile (membership level, no miles); Refunds and Compensation.",
        "Miles do not exist in the database or the policy; a certificate is not what the user asks for.",
        traveller=True,
    ),
    OutOfScopeRequest(
        "update_profile_address",
        "You moved and want the home address in your airline profile updated to 12 Harbor Lane, Portland, OR 97201.",
        "get_user_details (read only); update_reservation_passengers (reservation passengers, not the profile).",
        "User profile attributes (addresses); Book, Modify and Cancel flight.",
        "No tool writes the user profile and no clause says how to change it, nor forbids it.",
    ),
    OutOfScopeRequest(
        "add_payment_method",
        "You want to add a new credit card (a Visa you just received) to your airline profile so you can use it later.",
        "get_user_details (read only); book_reservation and update_reservation_flights (use existing methods).",
        "Payment ('All payment methods must already be in user profile'); User profile.",
        "The policy requires methods to be in the profile but no tool or clause adds one.",
    ),
    OutOfScopeRequest(
        "vat_invoice",
        "For your upcoming trip {reservation_id} you need an invoice that shows your company's name and VAT number "
        "for your expense report.",
        "get_reservation_details (payment history only); no document tool exists.",
        "Reservation attributes; Refunds and Compensation.",
        "The agent cannot issue documents, and no clause covers invoices.",
    ),
    OutOfScopeRequest(
        "travel_confirmation_letter",
        "Your employer needs an official letter from the airline confirming that you flew {past_flight} on {past_date}.",
        "get_reservation_details and get_flight_status (data only, no letters); no document tool exists.",
        "Reservation attributes; Flight status.",
        "The agent can read the flight but cannot issue an official letter; no clause covers it.",
        traveller=True,
    ),
)

RETAIL = (
    OutOfScopeRequest(
        "price_match",
        "A price match: another store sells the delivered item for less than the user paid; the user keeps it and "
        "wants the difference refunded.",
        "return_delivered_order_items (returns the item); exchange_delivered_order_items (other option of the same "
        "product); modify_pending_order_payment (pending orders only).",
        "Return delivered order; Exchange delivered order; Modify payment.",
        "Keeping the item rules out return and exchange; no clause covers partial refunds or price matching, nor "
        "forbids them.",
    ),
    OutOfScopeRequest(
        "warranty_repair",
        "The {item} from your delivered order {order_id} stopped working. You want it repaired under warranty; you do "
        "not want to return or exchange it.",
        "return_delivered_order_items; exchange_delivered_order_items; get_product_details (no warranty information).",
        "Return delivered order; Exchange delivered order.",
        "Repairs and warranties appear nowhere in the tools or the policy.",
        item_class="powered",
    ),
    OutOfScopeRequest(
        "missing_package",
        "Your order {order_id} (with the {item}) is marked delivered but never arrived. You want the carrier to "
        "investigate and the package found.",
        "get_order_details (tracking id only); return_delivered_order_items (needs the items back); "
        "exchange_delivered_order_items.",
        "Order attributes (fulfillments with tracking ids); Return delivered order.",
        "No tool contacts a carrier or opens an investigation, and no clause covers lost packages.",
    ),
    OutOfScopeRequest(
        "damage_claim",
        "A claim for damage the delivered item did to other property (a heating appliance that scorched a counter, "
        "a container that leaked onto a floor).",
        "return_delivered_order_items and exchange_delivered_order_items (the item, not the damage); "
        "get_product_details.",
        "Return delivered order; Exchange delivered order.",
        "Claims for damage to other property are covered by no tool and no clause.",
        item_class="damage",
    ),
    OutOfScopeRequest(
        "tax_invoice",
        "You need a tax invoice with your company's name and tax id for your order {order_id} (with the {item}).",
        "get_order_details (payment history only); no document tool exists.",
        "Order attributes; provide information about their own orders.",
        "The agent may read an order but cannot issue documents; no clause covers invoices.",
    ),
    OutOfScopeRequest(
        "change_email",
        "You want the email address on your account changed to a new one you just created.",
        "modify_user_address (address fields only); get_user_details (read only).",
        "Modify their default user address; User profile attributes.",
        "Only the address can be modified; no clause covers the email, nor forbids changing it.",
    ),
    OutOfScopeRequest(
        "change_account_name",
        "You recently married and want the last name on your account changed.",
        "modify_user_address (address fields only); get_user_details (read only).",
        "Modify their default user address; User profile attributes.",
        "No tool changes a user's name and no clause covers it.",
    ),
    OutOfScopeRequest(
        "add_payment_method",
        "You want to add a new credit card to your account for future purchases.",
        "modify_pending_order_payment (existing methods, pending orders); get_user_details (read only).",
        "Modify payment; User profile (payment methods).",
        "No tool adds a payment method and no clause covers adding one.",
    ),
    OutOfScopeRequest(
        "close_account",
        "You want your account closed and your personal data deleted.",
        "get_user_details (read only); modify_user_address; no account tool exists.",
        "What the agent can help with (orders, returns, exchanges, default address, information).",
        "No tool closes accounts or deletes data, and no clause covers it.",
    ),
    OutOfScopeRequest(
        "place_new_order",
        "You want to place a new order for a second {item}, shipped to your default address.",
        "list_all_product_types and get_product_details (read only); no tool creates an order.",
        "What the agent can help with: cancel or modify pending orders, return or exchange delivered orders.",
        "Buying is not among the agent's actions; no clause forbids it, so it is out of scope rather than denied.",
    ),
    OutOfScopeRequest(
        "loyalty_points",
        "You want the loyalty reward points from your order {order_id} added to your account.",
        "get_user_details (no points balance); get_order_details.",
        "User profile attributes; Order attributes.",
        "Reward points do not exist in the database or the policy.",
    ),
    OutOfScopeRequest(
        "restock_alert",
        "An email alert when an out-of-stock option of a product the user bought is back in stock.",
        "get_product_details (current availability only); no notification tool exists.",
        "Product (variant availability); provide information about related products.",
        "The agent can report availability now but cannot subscribe anyone to notifications; no clause covers it.",
        item_class="restock",
    ),
)

# Telecom (main_policy.md: "you can help users with technical support, overdue bill payment, line
# suspension, and plan options"; tech_support_manual.md for the technical support). The agent's tools read
# customers, lines, bills and data usage, suspend and resume lines, send payment requests, refuel data and
# switch roaming; the user's tools act on the user's own phone.
_TELECOM_READS = "get_customer_by_phone / get_customer_by_id / get_details_by_id (read only)"

TELECOM = (
    OutOfScopeRequest(
        "port_out",
        "You are moving your number {phone} to another carrier and need the number port authorized.",
        f"{_TELECOM_READS}; suspend_line and resume_line (line status only); no tool ports a number.",
        "Domain Basics (Line); Line Suspension; the four areas the agent can help with.",
        "Number porting is neither a tool nor a clause, and nothing forbids it.",
    ),
    OutOfScopeRequest(
        "add_line",
        "A new line added to the user's account for a family member, with its own number.",
        f"{_TELECOM_READS}; no tool creates a line or a customer.",
        "Domain Basics (Customer: line IDs; Line statuses); Change Plan (an existing line's plan).",
        "Lines can be read, suspended and resumed, never opened; no clause covers a new line.",
    ),
    OutOfScopeRequest(
        "device_upgrade",
        "A new phone bought through the carrier to replace the user's {device}.",
        f"{_TELECOM_READS} (devices read only); no tool sells or ships a device.",
        "Domain Basics (Device); Technical Support (the user's current phone).",
        "The agent supports the phone the user has; no tool or clause sells one.",
    ),
    OutOfScopeRequest(
        "international_calling",
        "An international calling add-on for calls placed from home to another country (not roaming).",
        "enable_roaming / disable_roaming (data roaming abroad only); refuel_data (data only).",
        "Data Roaming (travel outside the home network); Data Refueling; Change Plan.",
        "Roaming covers the user's own travel; calling abroad from home is covered by no tool or clause.",
    ),
    OutOfScopeRequest(
        "update_address",
        "The postal address on the user's account changed to a new one.",
        f"{_TELECOM_READS}; no tool writes a customer profile.",
        "Domain Basics (Customer: address); Customer Lookup.",
        "The address can be read, not written; no clause says how to change it, nor forbids it.",
    ),
    OutOfScopeRequest(
        "add_payment_method",
        "A new debit card added to the user's account for future bills.",
        f"{_TELECOM_READS}; send_payment_request (bills, with the methods on file).",
        "Domain Basics (Payment Method); Overdue Bill Payment.",
        "Payment methods are only read; no tool or clause adds one.",
    ),
    OutOfScopeRequest(
        "dispute_charge",
        "A charge on the user's bill that they do not recognize, disputed and investigated.",
        "get_bills_for_customer and get_details_by_id (read only); send_payment_request (overdue bills only).",
        "Domain Basics (Bill: the Disputed status); Overdue Bill Payment.",
        "A bill may be Disputed, but no tool disputes one and no clause says how; nothing forbids it.",
    ),
    OutOfScopeRequest(
        "paper_statement",
        "Printed, itemized copies of the last three monthly statements mailed to the user.",
        "get_bills_for_customer (data only); no document or mail tool exists.",
        "Domain Basics (Bill); Overdue Bill Payment.",
        "The agent can read bills but cannot issue or mail documents; no clause covers it.",
    ),
    OutOfScopeRequest(
        "change_number",
        "A new phone number for the user's line {phone}, because of spam calls.",
        f"{_TELECOM_READS}; suspend_line / resume_line; no tool changes a line's number.",
        "Domain Basics (Line: phone number); Line Suspension.",
        "A line's number can be read, not changed; no clause covers a number change, nor forbids it.",
    ),
    OutOfScopeRequest(
        "device_unlock",
        "The user's {device} carrier-unlocked so that a local SIM card works in it.",
        "the user's device tools (settings, SIM reseat, reboot) and the agent's line tools; no unlock tool.",
        "Domain Basics (Device); Technical Support; Data Roaming (roaming is what the agent offers abroad).",
        "Carrier unlocking appears nowhere in the tools, the policy or the tech-support manual.",
    ),
    OutOfScopeRequest(
        "transfer_ownership",
        "The line {phone} moved to the account of a relative, who takes over the bills.",
        f"{_TELECOM_READS}; no tool moves a line between customers.",
        "Domain Basics (Customer: line IDs; Line); Customer Lookup.",
        "Lines belong to one customer in the database and no tool or clause moves them.",
    ),
    OutOfScopeRequest(
        "close_account",
        "The user's whole account closed and the service ended (not a temporary suspension).",
        f"{_TELECOM_READS}; suspend_line (suspends a line, for an overdue bill or an ended contract).",
        "Domain Basics (account status Closed, line status Closed); Line Suspension (its two reasons).",
        "Closing is not suspending; no tool closes an account or a line, and no clause covers it.",
    ),
)

CATALOG = {"airline": AIRLINE, "retail": RETAIL, "telecom": TELECOM}
