"""How timely and how well the agent handed off (docs/metrics.md, "Timeliness and hand-off quality").

- `handoff_delay`: agent turns from when the need was known to the hand-off: from the first turn
  for a task labelled 1, from the first user request for an episode that a request labelled 1
  (handoff.rules.attribution); None without a hand-off or for an episode labelled 0.
- `write_before_handoff`: the agent attempted a write before its first transfer call (on a task it
  should hand off, work the human may have to undo); None without a hand-off.
- `summary_complete`: the transfer call's `summary` names the user id the agent worked with and
  every reservation and order id the dialogue touched before it: written to, or named in a user or
  agent message (an id the agent only looked up while searching need not be named); None without
  a hand-off.
- `tried_before_handoff`: before the first transfer call, at least one action of the task's reference
  solution other than the transfer had been performed, by the agent or (telecom) by the user: a call
  that tau2's action comparison matches to a reference action of the same requestor and that its tool
  did not answer with an error. None without a hand-off, or when the reference solution holds nothing
  but a transfer (nothing to try: telecom's 20 gold transfers) or is unknown. An unneeded hand-off is
  "without trying" when it is False, "after trying" when it is True (docs/rules.md).
"""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

from handoff.rules.context import TaskContext
from handoff.rules.outcome import transfer_message
from handoff.rules.trajectory import TRANSFER_TOOL, Trajectory

USER_ID_LOOKUPS = frozenset({"find_user_id_by_email", "find_user_id_by_name_zip"})  # retail: they return the id
ID_ARGUMENTS = ("user_id", "reservation_id", "order_id")


class HandoffQuality(BaseModel):
    handoff_delay: int | None = Field(None, description="agent turns from the known need to the hand-off")
    write_before_handoff: bool | None = Field(None, description="a write was attempted before the first transfer call")
    summary_complete: bool | None = Field(None, description="the summary names the user id and the ids touched")
    tried_before_handoff: bool | None = Field(None, description="a reference action other than the transfer was "
                                              "performed (agent or user) before the first transfer call")


def handoff_quality(traj: Trajectory, ctx: TaskContext, handoff_turn: int | None, task_should: bool,
                    user_request_turn: int | None) -> HandoffQuality:
    at = transfer_message(traj)
    if at is None or handoff_turn is None:
        return HandoffQuality()
    start = 1 if task_should else user_request_turn
    before = [c for c in traj.agent_calls if c.turn < at]
    summary = next(str(c.call.arguments.get("summary", "")) for c in traj.agent_calls
                   if c.call.name == TRANSFER_TOOL)
    return HandoffQuality(
        handoff_delay=None if start is None else max(0, handoff_turn - start),
        write_before_handoff=any(c.call.name in ctx.tools.write for c in before),
        summary_complete=all(_named(i, summary) for i in touched_ids(traj, at, ctx)),
        tried_before_handoff=tried_before(traj, ctx, at),
    )


def tried_before(traj: Trajectory, ctx: TaskContext, before: int) -> bool | None:
    """Whether a reference action other than the transfer, of its own requestor, was performed without
    an error before message `before`; None when the reference solution holds no such action (or none is
    known)."""
    wanted = [a for a in ctx.reference_actions or () if a.name != TRANSFER_TOOL]
    if not wanted:
        return None
    performed = [("assistant", c) for c in traj.agent_calls] + [("user", c) for c in traj.user_calls]
    return any(c.turn < before and c.ok and ctx.matches_reference(c.call, requestor, wanted)
               for requestor, c in performed)


def touched_ids(traj: Trajectory, before: int, ctx: TaskContext) -> list[str]:
    """Before message `before`: the user id of the agent's calls (or a retail lookup's result), and
    the reservation and order ids of its calls that it wrote to or that a user or agent message
    names, in order of first use."""
    found: dict[str, None] = {}
    said = " ".join((m.content or "").lower() for m in traj.messages[:before] if m.role in ("user", "assistant"))
    for turn, call, ok in traj.agent_calls:
        if turn >= before:
            break
        for name in ID_ARGUMENTS:
            value = call.arguments.get(name)
            if isinstance(value, str) and value.strip() and (
                    name == "user_id" or call.name in ctx.tools.write or _named(value.strip(), said)):
                found[value.strip()] = None
        if call.name in USER_ID_LOOKUPS and ok:
            looked_up = _lookup_result(traj, turn, call.id)
            if looked_up:
                found[looked_up] = None
    return list(found)


def _lookup_result(traj: Trajectory, turn: int, call_id: str) -> str | None:
    for msg in traj.messages[turn + 1:]:
        if msg.role != "tool":
            break
        if not call_id or msg.id == call_id:
            text = (msg.content or "").strip()
            try:
                text = json.loads(text) if text.startswith('"') else text
            except json.JSONDecodeError:
                pass
            return text if isinstance(text, str) and text and " " not in text else None
    return None


def _named(identifier: str, summary: str) -> bool:
    return identifier.lstrip("#").lower() in summary.lower()
