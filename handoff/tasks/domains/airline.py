"""The airline domain's facts, in one place: the policy's clock and what the derivation, the annotator's
checks and the gold checker know of airline beyond tau2's files."""

from __future__ import annotations

# The one "now" of the task sets: airline policy.md line 3, "The current time is 2024-05-15 15:00:00 EST."
# (data/policy/clauses.yaml cites the line; the gold checker refuses a citation that does not state this).
NOW = "2024-05-15T15:00:00"
TODAY = NOW[:10]

TAKEN_OFF = frozenset({"flying", "landed"})  # policy, Flight: "flying: the flight has taken off"
# Tools that change a reservation: a certificate for a delay is allowed only after one (the gold checker).
CHANGES = ("cancel_reservation", "update_reservation_flights", "update_reservation_baggages",
           "update_reservation_passengers")

USER_DEVICE = False  # the user has no tools: derived tasks start from the domain's database alone

# Tasks per derived kind. 18 hard-negative parents (solvable, no transfer, a gold that changes the database
# and follows the policy, handoff.tasks.authoring.gold_policy): all of them are used.
COUNTS = {"explicit_request": 24, "out_of_scope": 24, "hard_negative": 18}
# Upstream tasks whose user may ask for a human: never parents of hard negatives.
ASKS_FOR_HUMAN = {"3": "asks for a supervisor if told she is a Silver member"}
