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
