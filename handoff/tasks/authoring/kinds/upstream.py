"""The upstream kind: tau2's own tasks, labelled by their reference solution."""

from __future__ import annotations

from handoff.rules.label import Label
from handoff.tasks.authoring.kinds.base import Kind
from handoff.tasks.upstream import has_gold_transfer


def label(task) -> Label:
    if has_gold_transfer(task):
        return Label(should_transfer=True, rule="gold_transfer_action")
    return Label(should_transfer=False, rule="no_transfer")


# Only the transfer-only agent runs, nothing is required of it (docs/tasks.md reports how many it passes).
KIND = Kind(name="upstream", label=label, agents=("transfer_only",), expected={})
