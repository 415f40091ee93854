"""The telecom domain's facts: what the derivation and the gold checker know of telecom beyond tau2's
files. Its policy (main_policy.md) states no clock; no gold changes a reservation."""

from __future__ import annotations

NOW = None
CHANGES = ()

# Tasks per derived kind (none yet: telecom's derived tasks are not built).
COUNTS = {"explicit_request": 0, "out_of_scope": 0, "hard_negative": 0}
# Upstream tasks whose user may ask for a human: never parents of hard negatives.
ASKS_FOR_HUMAN: dict[str, str] = {}
