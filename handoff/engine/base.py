"""The engine protocol shared by evaluation (tau2 Orchestrator) and training (verl agent loop).

An engine knows nothing about chats or tools: it takes prompt token ids and returns the generated
token ids, their text and why generation stopped. Rendering and parsing live in the agent.
"""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_serializer

FinishReason = Literal["stop", "length", "abort"]


class Sampling(BaseModel):
    """Per-request sampling settings (a subset of vLLM's SamplingParams); unknown keys are refused.

    `repetition_penalty` is dumped only when set, so that the records and manifests of configs
    without it (every run before it existed) stay byte for byte the same."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, gt=0)
    repetition_penalty: float | None = Field(
        None, gt=0.0, le=2.0, description="vLLM's: > 1 discourages repeating tokens; None = vLLM's 1.0")
    seed: int | None = None
    logprobs: bool = False

    @model_serializer(mode="wrap")
    def _unset_penalty_left_out(self, handler):
        data = handler(self)
        if self.repetition_penalty is None:
            data.pop("repetition_penalty", None)
        return data


class Generation(BaseModel):
    """One completion: the generated ids, their decoded text and the finish reason."""

    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    logprobs: list[float] | None = None


class ContextOverflowError(ValueError):
    """The prompt already fills the model's context window: no token can be generated."""

    def __init__(self, prompt_tokens: int, max_model_len: int):
        super().__init__(
            f"prompt of {prompt_tokens} tokens leaves no room in a {max_model_len}-token context"
        )
        self.prompt_tokens = prompt_tokens
        self.max_model_len = max_model_len


class PoisonRequestError(RuntimeError):
    """A request that killed its engine each time it was served there alone (a prompt that crashes the
    engine or runs it out of memory): the episode's own failure, never retried. The agent ends its
    episode with an engine error (agent_error), the user simulator with user_error."""


@runtime_checkable
class Engine(Protocol):
    """Synchronous engine interface used by the agent and the user simulator.

    `session_id` names the conversation; engines with several replicas route all requests of one
    session to the same replica so that vLLM's prefix cache is reused turn after turn.
    """

    def generate(
        self, prompt_ids: list[int], sampling: Sampling, session_id: str | None = None
    ) -> Generation: ...
