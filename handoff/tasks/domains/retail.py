"""The retail domain's facts, in one place: what the derivation and the gold checker know of retail
beyond tau2's files. Its policy states no clock."""

from __future__ import annotations

NOW = None
CHANGES = ()  # no reservations

USER_DEVICE = False  # the user has no tools: derived tasks start from the domain's database alone

# Tasks per derived kind.
COUNTS = {"explicit_request": 36, "out_of_scope": 36, "hard_negative": 36}
# Upstream tasks whose user may ask for a human: never parents of hard negatives.
ASKS_FOR_HUMAN = {"25": "asks for a human if the refund cannot go to an amex card"}
