"""Episode and user-simulator settings, defined once: the sweep config embeds them (its `episode`
and `user` groups), the episode runner and Tau2AgentLoop take them. Light to import (no tau2)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """A config level that rejects unknown keys."""

    model_config = ConfigDict(extra="forbid")


class EpisodeLimits(Strict):
    """When tau2 stops an episode (the sweep's `episode` group)."""

    max_steps: int = Field(30, ge=2, description="tau2 orchestrator steps (messages)")
    max_errors: int = Field(4, ge=1, description="tool errors before tau2 stops the episode")


class UserSimulatorConfig(Strict):
    """Who plays the user: a hosted model on an engine, or an API model through litellm. The sweep's
    `user` group adds the engine's checkpoint; handoff.agent.user.UserSpec adds its sampling."""

    kind: Literal["engine", "litellm"] = "engine"
    max_context_tokens: int = Field(8192, gt=0)
    llm: str | None = Field(None, description="litellm model name (kind=litellm)")
    llm_args: dict = Field(default_factory=dict, description="litellm arguments (kind=litellm)")


class ApiModelSettings(Strict):
    """An API model as the agent (`model=api`, handoff.agent.api_agent): a litellm model name and its
    arguments (keys only from the environment: litellm reads OPENAI_API_KEY & co., or
    `llm_args.api_key: ${oc.env:VAR}`), the episodes it runs at once, and the retry policy for
    rate limits (429) and server errors (5xx): retried with exponential backoff, never the episode's."""

    llm: str = Field(min_length=1, description="litellm model name, e.g. gpt-4.1 or hosted_vllm/<name>")
    llm_args: dict = Field(default_factory=dict, description="litellm arguments (api_base, temperature, ...)")
    concurrency: int = Field(8, ge=1, description="episodes of this model at once (the driver's cap)")
    max_retries: int = Field(6, ge=0, description="retries of a 429/5xx/connection error, per request")
    retry_backoff_s: float = Field(1.0, ge=0, description="first backoff; doubled per retry (capped at 60 s)")
    outage_s: float = Field(900.0, gt=0, description="an outage (every request's retries spent, no episode "
                                                     "recorded since) this long fails the model's remaining shards "
                                                     "as infrastructure, for a resume to rerun")
    parallel_tool_calls: bool | None = Field(
        False, description="sent as parallel_tool_calls with the tools: False, as tau2's agent instruction "
                           "allows one action per turn; None: not sent")
