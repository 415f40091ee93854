"""Format errors: the agent's recorded FormatEvents combined with what the messages show.

Seen in the messages:
- unparsed_tool_call: Hermes tool-call markup left in text (the parser could not decode it);
- unknown_tool: a call whose name the domain's toolkit does not have;
- invalid_arguments: a call the tool answered with an error AND whose arguments break the tool's
  signature (unexpected or missing names, wrong JSON types; see DomainTools.rejects_arguments).
  tau2 reports every tool exception the same way ("Error: <message>", error=True), so the
  message text cannot tell a rejected call from a business error ("Reservation X not found"):
  the signature check does. A failed call with well-formed arguments is a business error, part
  of solving the task, and no format error;
- empty_message: an assistant message with neither text nor tool calls;
- protocol_error: tau2 ended the episode with agent_error and no empty_message or
  invalid_arguments error at the final turn explains it (e.g. tau2's communication-protocol
  check, or an exception in the agent).
Only recorded by the agent (the turn never became a message): truncated_generation, and
invalid_arguments / empty_message for dropped turns. One error per kind and turn.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from handoff.rules.context import DomainTools, TaskContext
from handoff.rules.events import FormatKind
from handoff.rules.trajectory import Trajectory

HERMES_MARKUP = re.compile(r"</?tool_call>")
AGENT_ERROR = "agent_error"
_EXPLAINS_AGENT_ERROR = frozenset({FormatKind.EMPTY_MESSAGE, FormatKind.INVALID_ARGUMENTS})
_KIND_ORDER = list(FormatKind)


class FormatError(BaseModel):
    kind: FormatKind
    turn: int


def format_errors(traj: Trajectory, ctx: TaskContext | None = None) -> list[FormatError]:
    """All format errors of the episode, ordered by turn, then kind. The domain's tools come from
    `ctx` or, without one, from the trajectory's domain."""
    tools = ctx.tools if ctx is not None else DomainTools.for_domain(traj.domain)
    found = {(e.kind, e.turn) for e in traj.format_events}
    found |= _visible_in_messages(traj)
    found |= _calls_rejected(traj, tools)
    if traj.termination_reason == AGENT_ERROR:
        turn = _final_turn(traj)
        if not any(kind in _EXPLAINS_AGENT_ERROR and t >= turn for kind, t in found):
            found.add((FormatKind.PROTOCOL_ERROR, turn))
    ordered = sorted(found, key=lambda kt: (kt[1], _KIND_ORDER.index(kt[0])))
    return [FormatError(kind=kind, turn=turn) for kind, turn in ordered]


def _visible_in_messages(traj: Trajectory) -> set[tuple[FormatKind, int]]:
    found = set()
    for turn, msg in enumerate(traj.messages):
        if msg.role != "assistant":
            continue
        if not msg.has_text and not msg.tool_calls:
            found.add((FormatKind.EMPTY_MESSAGE, turn))
        if msg.content and HERMES_MARKUP.search(msg.content):
            found.add((FormatKind.UNPARSED_TOOL_CALL, turn))
    return found


def _calls_rejected(traj: Trajectory, tools: DomainTools) -> set[tuple[FormatKind, int]]:
    found = set()
    for turn, call, ok in traj.agent_calls:
        if call.name not in tools.names:
            found.add((FormatKind.UNKNOWN_TOOL, turn))
        elif ok is False and tools.rejects_arguments(call):
            found.add((FormatKind.INVALID_ARGUMENTS, turn))
    return found


def _final_turn(traj: Trajectory) -> int:
    """The turn tau2's agent_error concerns: the last message if the agent sent it, else the
    dropped turn that would have followed."""
    last = len(traj.messages) - 1
    return last if last >= 0 and traj.messages[last].role == "assistant" else last + 1
