"""Format events: what the agent recorded about unusable or malformed turns.

They are produced by the agent (handoff.agent) while an episode runs, because several of them never
appear as messages (the turn was dropped), and they are read by the rules and the reward.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from pydantic import BaseModel


class FormatKind(str, Enum):
    UNPARSED_TOOL_CALL = "unparsed_tool_call"
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_ARGUMENTS = "invalid_arguments"
    EMPTY_MESSAGE = "empty_message"
    TRUNCATED_GENERATION = "truncated_generation"
    PROTOCOL_ERROR = "protocol_error"


class FormatEvent(BaseModel):
    """One format problem. `turn` is the index in the finalized trajectory's `messages` of the
    assistant message it concerns; for a turn that was dropped (the episode ended on it) it is the
    index the message would have had, i.e. len(messages) at the end."""

    kind: FormatKind
    turn: int
    detail: str = ""


TERMINATION_INFO_KEY = "handoff_termination"
"""Key in a SimulationRun's `reward_info.info` holding a termination reason that tau2's
TerminationReason cannot express (e.g. `context_window_exceeded`); tau2 then records agent_error."""

TERMINATION_DETAIL_INFO_KEY = "handoff_termination_detail"
"""Key in `reward_info.info`: what the agent's internal stop said (e.g. which limit ended the episode)."""

FORMAT_EVENTS_INFO_KEY = "handoff_format_events"
"""Key in `reward_info.info`: the agent's format events (FormatEvent JSON, possibly []), so that a
SimulationRun written by handoff (a shard, `handoff export`) scores the same anywhere."""

TOKENS_INFO_KEY = "handoff_tokens"
"""Key in `reward_info.info`: {"prompt": n, "completion": n}, the agent's token usage."""


def with_episode_info(info: dict | None, events: Iterable[FormatEvent], prompt_tokens: int,
                      completion_tokens: int) -> dict:
    """`reward_info.info` with the agent's format events and token usage added."""
    return {**(info or {}), FORMAT_EVENTS_INFO_KEY: [e.model_dump(mode="json") for e in events],
            TOKENS_INFO_KEY: {"prompt": prompt_tokens, "completion": completion_tokens}}
