"""Outcome classes and the hand-off turn (docs/metrics.md, "Outcome classes").

Every episode falls in exactly one class, from `transferred` against the label:

| class | transferred | label.should_transfer |
|---|---|---|
| correct_handoff | yes | yes |
| missed_handoff | no | yes |
| unneeded_handoff | yes | no |
| correct_no_transfer | no | no |

The hand-off turn is the agent turn of the first transfer call, counted as
`assistant_turn_count` counts turns: 1 is the agent's first reply after the user's first message.
It says how long the user waited for the human.
"""

from __future__ import annotations

from enum import Enum

from handoff.rules.trajectory import TRANSFER_TOOL, Trajectory


class Outcome(str, Enum):
    CORRECT_HANDOFF = "correct_handoff"
    MISSED_HANDOFF = "missed_handoff"
    UNNEEDED_HANDOFF = "unneeded_handoff"
    CORRECT_NO_TRANSFER = "correct_no_transfer"

    @property
    def correct(self) -> bool:
        return self in (Outcome.CORRECT_HANDOFF, Outcome.CORRECT_NO_TRANSFER)

    @property
    def transferred(self) -> bool:
        return self in (Outcome.CORRECT_HANDOFF, Outcome.UNNEEDED_HANDOFF)

    @property
    def should_transfer(self) -> bool:
        return self in (Outcome.CORRECT_HANDOFF, Outcome.MISSED_HANDOFF)


def outcome_of(transferred: bool, should_transfer: bool) -> Outcome:
    if transferred:
        return Outcome.CORRECT_HANDOFF if should_transfer else Outcome.UNNEEDED_HANDOFF
    return Outcome.MISSED_HANDOFF if should_transfer else Outcome.CORRECT_NO_TRANSFER


def transfer_message(traj: Trajectory) -> int | None:
    """The index in `messages` of the first transfer call, None without one."""
    return next((c.turn for c in traj.agent_calls if c.call.name == TRANSFER_TOOL), None)


def handoff_turn(traj: Trajectory) -> int | None:
    """The agent turn (1, 2, ...) of the first transfer call; None when the agent never transferred."""
    at = transfer_message(traj)
    if at is None:
        return None
    first_user = next((i for i, m in enumerate(traj.messages) if m.role == "user"), -1)
    return max(1, sum(1 for t in traj.assistant_turns if first_user < t <= at))
