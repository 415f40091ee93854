"""The agent's prompt as one growing token sequence (what verl calls "continuous tokens").

The first prompt is the chat template rendered over the system prompt and the opening messages.
After that the sequence only grows: the model's own tokens are appended exactly as generated
(mask 1), and each batch of new messages (user text, tool results) is appended as the template
renders it, followed by the generation prompt (mask 0). Generated tokens are never re-rendered, so
the prompt of every turn extends the previous one (vLLM's prefix cache hits), and the token ids
and mask are exactly what a policy-gradient trainer needs (Tau2AgentLoop uses them as they are).

New messages are rendered as the template's suffix after a fixed synthetic conversation, the
usual trick for templates that can only render whole conversations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_MARK = "HANDOFF_TURN_END_MARK"
_SYNTHETIC = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
]


def _synthetic_assistant(new_messages: list[dict]) -> dict:
    """An assistant turn that the new messages can follow (tool results need tool calls)."""
    tool_ids = [m.get("tool_call_id", f"t{i}") for i, m in enumerate(new_messages) if m["role"] == "tool"]
    if not tool_ids:
        return {"role": "assistant", "content": _MARK}
    calls = [{"id": i, "type": "function", "function": {"name": "f", "arguments": {}}} for i in tool_ids]
    return {"role": "assistant", "content": "", "tool_calls": calls}


@dataclass
class TokenContext:
    """Token ids of the conversation as the agent's model sees it, with a mask of its own tokens."""

    chat: object  # handoff.engine.chat.ChatFormat
    tools: list[dict] | None
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    _turn_end: list[int] | None = None

    def start(self, messages: list[dict]) -> None:
        self._extend(self.chat.render(messages, self.tools), 0)

    def add_generation(self, token_ids: list[int], logprobs: list[float] | None = None) -> None:
        self._extend(token_ids, 1, logprobs)

    def add_messages(self, messages: list[dict]) -> None:
        """Close the model's last turn the way the template does, then append the new messages
        and the generation prompt."""
        if self.mask and self.mask[-1] == 1:
            self._extend(self._closing_after(self.ids), 0)
        prefix = _SYNTHETIC + [_synthetic_assistant(messages)]
        self._extend(self._suffix(prefix, messages), 0)

    def _extend(self, ids: list[int], value: int, logprobs: list[float] | None = None) -> None:
        self.ids.extend(ids)
        self.mask.extend([value] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None and len(logprobs) == len(ids) else [0.0] * len(ids))

    def _suffix(self, prefix: list[dict], messages: list[dict]) -> list[int]:
        base = self.chat.encode(_render_text(self.chat, prefix, self.tools))
        full = self.chat.render(prefix + messages, self.tools)
        if full[: len(base)] != base:
            raise ValueError("chat template does not render conversations append-only")
        return full[len(base):]

    def _closing_after(self, ids: list[int]) -> list[int]:
        """The template's tokens after an assistant message's text (e.g. `<|im_end|>` and a
        newline), minus the ones the model already generated (it usually stops on the first)."""
        turn_end = self._template_turn_end()
        for overlap in range(len(turn_end), 0, -1):
            if ids[-overlap:] == turn_end[:overlap]:
                return turn_end[overlap:]
        return turn_end

    def _template_turn_end(self) -> list[int]:
        if self._turn_end is None:
            conversation = _SYNTHETIC + [{"role": "assistant", "content": _MARK}]
            text = _render_text(self.chat, conversation, self.tools)
            self._turn_end = self.chat.encode(text[text.rindex(_MARK) + len(_MARK):])
        return self._turn_end


def _render_text(chat, messages: list[dict], tools: list[dict] | None) -> str:
    """The chat format's template without the generation prompt (ChatFormat always adds it)."""
    return chat.tokenizer.apply_chat_template(
        messages, tools=tools or None, chat_template=chat.template, add_generation_prompt=False, tokenize=False
    )


def completion_text(chat, token_ids: list[int]) -> str:
    """A completion's text: its end-of-turn token dropped, other special tokens kept (Hermes
    markers are special tokens in some tokenizers, and the parser must see them)."""
    if token_ids and token_ids[-1] == chat.eos_token_id:
        token_ids = token_ids[:-1]
    return chat.decode(token_ids, skip_special_tokens=False)
