"""Chat rendering with the model's own tokenizer: OpenAI-style messages in, prompt token ids out.

Models whose chat template knows no tools (SmolLM2, for one) get the project's Hermes template
(templates/hermes.jinja): tools listed in the system turn, assistant tool calls as
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, tool results as `<tool_response>`.
"""

from __future__ import annotations

from functools import cached_property
from importlib import resources
from typing import Any

HERMES = "hermes"


def hermes_template() -> str:
    """The Hermes/Qwen-style tool-calling template shipped with the project."""
    return resources.files("handoff.engine").joinpath("templates/hermes.jinja").read_text()


def supports_tools(template: str | None) -> bool:
    """Whether a Jinja chat template renders the `tools` it is given."""
    return bool(template) and "tools" in template


class ChatFormat:
    """Renders chats for one model.

    `chat_template`: None uses the tokenizer's template, or Hermes when that template has no tool
    support; "hermes" forces the Hermes template; any other string is used as the Jinja template.
    """

    def __init__(self, tokenizer_path: str, chat_template: str | None = None):
        self.tokenizer_path = str(tokenizer_path)
        self.requested_template = chat_template

    @cached_property
    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.tokenizer_path)

    @cached_property
    def template(self) -> str:
        own = self.tokenizer.chat_template
        if self.requested_template == HERMES or (
            self.requested_template is None and not supports_tools(own)
        ):
            return hermes_template()
        return self.requested_template or own

    @property
    def uses_hermes(self) -> bool:
        return self.template == hermes_template()

    def render_text(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The prompt as text, ending with the assistant generation prompt."""
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            chat_template=self.template,
            add_generation_prompt=True,
            tokenize=False,
        )

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The prompt token ids (special tokens in the rendered text are parsed as such)."""
        return self.encode(self.render_text(messages, tools))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    @property
    def eos_token_id(self) -> int | None:
        return self.tokenizer.eos_token_id
