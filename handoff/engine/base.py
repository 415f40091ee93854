"""The engine interfaces.

- `Engine`: what episodes see (the agent and the user simulator, in evaluation and in verl's agent
  loop): a synchronous `generate`.
- `AsyncEngine`: one engine replica, as the sweep's Ray actor (handoff.sweep.engines.EngineHost)
  drives it: `generate` with the prompt's cached-token count, `stats`, `reload`, `shutdown`, `dead`.
  AsyncVLLMEngine (handoff.engine.vllm_engine) and the scripted engine (handoff.engine.scripted)
  implement it; handoff.engine.factory builds one of the configured kind.

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
    """One completion: the generated ids, their decoded text and the finish reason, and how many of
    the prompt's tokens the engine's prefix cache served (0 for an engine without one)."""

    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    logprobs: list[float] | None = None
    cached_prompt_tokens: int = Field(0, ge=0)


class EngineStats(BaseModel):
    """An AsyncEngine's counters since it started."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    load_seconds: float = 0.0

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def count(self, prompt_ids: list[int], generation: Generation) -> None:
        self.requests += 1
        self.prompt_tokens += len(prompt_ids)
        self.cached_prompt_tokens += generation.cached_prompt_tokens
        self.generated_tokens += len(generation.token_ids)


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


class ApiUnavailable(RuntimeError):
    """An API model (handoff.agent.api_agent) kept answering with rate limits (429), server errors
    (5xx) or no connection after its retries: the infrastructure's failure, which the sweep resubmits
    without charging the episode an attempt (handoff.sweep.failures.classify)."""


@runtime_checkable
class Engine(Protocol):
    """Synchronous engine interface used by the agent and the user simulator.

    `session_id` names the conversation; engines with several replicas route all requests of one
    session to the same replica so that vLLM's prefix cache is reused turn after turn.
    """

    def generate(
        self, prompt_ids: list[int], sampling: Sampling, session_id: str | None = None
    ) -> Generation: ...


class ModelRef(Protocol):
    """The checkpoint an engine serves, as the sweep's Checkpoint (handoff.sweep.config) gives it:
    the attributes handoff.engine reads, so that it needs nothing else of the sweep."""

    name: str
    path: str
    tokenizer: str | None
    max_model_len: int


@runtime_checkable
class AsyncEngine(Protocol):
    """One engine replica: what the sweep's engine actor drives, whatever the engine's kind.

    Built inside a running event loop (handoff.engine.factory.build_engine); `request_id` is
    `<session id>/<hex>`, so an engine may route or script by the session."""

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        """Complete `prompt_ids`; the Generation counts the prompt tokens its prefix cache served.
        Raises ContextOverflowError when the prompt leaves no room for a token."""
        ...

    async def stats(self) -> EngineStats:
        """Its counters since it started (a copy)."""
        ...

    async def reload(self, checkpoint: ModelRef) -> bool:
        """Serve `checkpoint` from now on, in place: True once it does. False, with nothing changed,
        when this engine cannot take it in place (the caller shuts it down and builds another);
        raises when it tried and failed (then shut it down too)."""
        ...

    async def shutdown(self) -> None:
        """Stop and free what it holds (processes, memory); it serves nothing afterwards."""
        ...

    @property
    def dead(self) -> bool:
        """Whether it can serve no request any more (its process lost a part): the replica restarts."""
        ...

    def describe(self) -> str | None:
        """How it runs (dtype, threads), for the replica's log once it has loaded; None: nothing to say."""
        ...
