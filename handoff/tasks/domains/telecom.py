"""The telecom domain's facts: what the derivation and the gold checker know of telecom beyond tau2's
files. Its policy (main_policy.md) states no clock; no gold changes a reservation."""

from __future__ import annotations

NOW = None
CHANGES = ()

# Dual control: the user acts on their own phone, which a task's initial state sets up (name, number, the
# fault). Derived tasks keep it (handoff.tasks.authoring.derive.initial_state).
USER_DEVICE = True

# Tasks per derived kind, like airline's and retail's (24-36). 50 base tasks can parent a hard negative
# (no transfer, a gold that writes and follows the policy): 30 of them are used.
COUNTS = {"explicit_request": 30, "out_of_scope": 30, "hard_negative": 30}
# Upstream tasks whose user may ask for a human: never parents of hard negatives (none in base: checked by
# tests/tasks/test_task_sets.py).
ASKS_FOR_HUMAN: dict[str, str] = {}
