"""What a task kind is: how its tasks are labelled, how the scripted agents must score on them
(handoff.tasks.authoring.behaviour), how they are derived and what the annotator checks of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from handoff.rules.label import Label


@dataclass(frozen=True)
class Kind:
    name: str
    label: Callable[[object], Label]  # task -> its label before overrides
    agents: tuple[str, ...]  # the scripted agents run on its tasks
    expected: dict[str, float]  # agent -> the tau2 reward it must get ({}: none required)
    derive: Callable[[str], list] | None = None  # domain -> its tasks (None: tau2's own)
    checks: Callable[[str, object, object], list] = lambda domain, task, parent: []  # the annotator's findings


def derived_label(name: str, should_transfer: bool) -> Callable[[object], Label]:
    """A derived kind's label: the same for every task of the kind, its rule the kind's name."""
    return lambda task: Label(should_transfer=should_transfer, rule=name)
