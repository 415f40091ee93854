"""ScriptedEngine: the test double of an Engine. It replays given completions, in order, as the
token ids a model would have produced (tokenized with a real tokenizer), so the agent's decoding,
parsing and token bookkeeping run exactly as with vLLM.

A completion is a string (tokenized; the end-of-turn token is appended and the finish reason is
"stop"), a `Scripted` with `truncated=True` (no end token, finish reason "length"), or raw token
ids (`Scripted(token_ids=...)`, e.g. random ids). Like vLLM, a completion longer than the
request's `max_tokens` is cut there with finish reason "length". Every prompt is kept in `prompts`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

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


class ScriptConfig(BaseModel):
    """engine.script for kind=scripted: completions per role, chosen statelessly from the prompt
    (the number of assistant turns already in it), so that a restarted actor replays the same.

    Timing, to stand in for an accelerator: a replica takes `load_delay_s` to load a checkpoint,
    and serves each request in `delay_s` with at most engine.max_num_seqs requests at once (a
    batch); more wait their turn. With `service_log` set, every replica appends one line per served
    request, `<replica pid> <checkpoint> <start> <end>` (time.time()), for bench.bench_schedule."""

    agent: list[str]
    user: list[str]
    delay_s: float = 0.0
    load_delay_s: float = 0.0
    turn_marker: str = "<|im_start|>assistant"
    fail_sessions: str | None = None  # regex: requests of matching sessions raise (a broken episode)
    fail_load: str | None = None  # regex on "<role>/<checkpoint name>": a matching replica fails to load
    service_log: str | None = None
    # The agent shares the user simulator's replicas when the paths match, as vLLM engines do (each
    # request's role from its session id): the rolling schedule's pinned slots, for tests.
    share_user_engine: bool = False
    # A known-answer agent: checkpoint name -> the probability that it hands off correctly. Such a
    # checkpoint's agent replays `agent` (which transfers) where it transfers, else `no_transfer`;
    # it transfers iff the task's label says so when a draw from the episode seed falls below
    # the probability, else it does the opposite (handoff_decision).
    accuracy: dict[str, Annotated[float, Field(ge=0, le=1)]] | None = None
    no_transfer: list[str] = ["I can help you with that myself; there is no need for a human agent."]
