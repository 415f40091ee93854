"""The text the episode index searches (report/episodes/, the `text` filter): what the user and the
agent said and the agent's tool calls (name and arguments), lowercased; tool results are left out
(they repeat the database). One file per shard, `transcripts/<shard>/search.js`, written with the
shard's transcript pages (incrementally) and loaded by the index only when a text filter is set."""

from __future__ import annotations

import json

from handoff.rules import Trajectory

SEARCH_FILE = "search.js"


def search_text(traj: Trajectory) -> str:
    """The episode's searchable text: one line per user or agent message, a tool call as name(args)."""
    lines = []
    for msg in traj.messages:
        if msg.role not in ("user", "assistant"):
            continue
        if msg.has_text:
            lines.append(msg.content)
        lines += [f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in msg.tool_calls]
    return "\n".join(lines).lower()
