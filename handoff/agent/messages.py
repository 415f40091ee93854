"""tau2 messages as OpenAI-style chat dicts, the input of chat templates."""

from __future__ import annotations

from tau2.data_model.message import (
    AssistantMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)


def to_chat_dict(message) -> dict:
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.id, "content": message.content or ""}
    if isinstance(message, (AssistantMessage, UserMessage, SystemMessage)):
        out = {"role": message.role, "content": message.content or ""}
        calls = getattr(message, "tool_calls", None)
        if calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls
            ]
        return out
    raise TypeError(f"cannot render {type(message).__name__} as a chat message")


def to_chat_dicts(messages) -> list[dict]:
    return [to_chat_dict(m) for m in messages]
