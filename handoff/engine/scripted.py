"""ScriptedEngine: the test double of an Engine. It replays given completions, in order, as the
token ids a model would have produced (tokenized with a real tokenizer), so the agent's decoding,
parsing and token bookkeeping run exactly as with vLLM.

A completion is a string (tokenized; the end-of-turn token is appended and the finish reason is
"stop"), a `Scripted` with `truncated=True` (no end token, finish reason "length"), or raw token
ids (`Scripted(token_ids=...)`, e.g. random ids). Like vLLM, a completion longer than the
request's `max_tokens` is cut there with finish reason "length". Every prompt is kept in `prompts`.
"""

from __future__ import annotations

from pydantic import BaseModel

from handoff.engine.base import Generation, Sampling


class Scripted(BaseModel):
    text: str = ""
    token_ids: list[int] | None = None
    truncated: bool = False


class ScriptExhausted(RuntimeError):
    """More requests than scripted completions: the test's script is too short."""


class ScriptedEngine:
    def __init__(self, tokenizer, completions: list[str | Scripted], end_token_id: int | None = None):
        self.tokenizer = tokenizer
        self.completions = [c if isinstance(c, Scripted) else Scripted(text=c) for c in completions]
        self.end_token_id = tokenizer.eos_token_id if end_token_id is None else end_token_id
        self.prompts: list[list[int]] = []
        self.samplings: list[Sampling] = []

    def generate(self, prompt_ids: list[int], sampling: Sampling, session_id: str | None = None) -> Generation:
        if len(self.prompts) >= len(self.completions):
            raise ScriptExhausted(f"request {len(self.prompts) + 1} but only {len(self.completions)} completions")
        scripted = self.completions[len(self.prompts)]
        self.prompts.append(list(prompt_ids))
        self.samplings.append(sampling)
        return self.replay(scripted, sampling.max_tokens)

    def replay(self, scripted: Scripted, max_tokens: int) -> Generation:
        ids = scripted.token_ids if scripted.token_ids is not None else self._encode(scripted.text)
        finish = "length" if scripted.truncated else "stop"
        if finish == "stop" and scripted.token_ids is None:
            ids = ids + [self.end_token_id]
        if len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(token_ids=ids, text=text, finish_reason=finish)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)
