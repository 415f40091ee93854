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


EPISODE_RULE_USER_REQUEST = "user_request"
"""The rule of an episode label that a user request turned to 1 on a task labelled 0."""


class OutcomeDetail(str, Enum):
    """The outcome classes with the wrong ones split by who asked for the human
    (handoff.rules.attribution): an unneeded hand-off after a user request, after an agent offer or
    unprompted; a missed one where the user asked (request refused) or not."""

    CORRECT_HANDOFF = "correct_handoff"
    CORRECT_NO_TRANSFER = "correct_no_transfer"
    UNNEEDED_AFTER_REQUEST = "unneeded_handoff_after_user_request"
    UNNEEDED_AFTER_OFFER = "unneeded_handoff_after_agent_offer"
    UNNEEDED_UNPROMPTED = "unneeded_handoff_unprompted"
    MISSED_REQUEST_REFUSED = "missed_handoff_request_refused"
    MISSED_NOT_ASKED = "missed_handoff_not_asked"


_UNNEEDED_BY_INITIATOR = {"user": OutcomeDetail.UNNEEDED_AFTER_REQUEST,
                          "agent_offer": OutcomeDetail.UNNEEDED_AFTER_OFFER,
                          "agent": OutcomeDetail.UNNEEDED_UNPROMPTED}


def outcome_detail(outcome: Outcome, initiator: str | None, user_requested: bool) -> OutcomeDetail:
    """`initiator`: handoff.rules.attribution's (user / agent_offer / agent); `user_requested`: a user
    request came before the hand-off (anywhere, without one)."""
    if outcome is Outcome.UNNEEDED_HANDOFF:
        return _UNNEEDED_BY_INITIATOR[initiator or "agent"]
    if outcome is Outcome.MISSED_HANDOFF:
        return OutcomeDetail.MISSED_REQUEST_REFUSED if user_requested else OutcomeDetail.MISSED_NOT_ASKED
    return OutcomeDetail(outcome.value)


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
