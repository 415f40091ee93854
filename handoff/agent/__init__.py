"""The agent layer: handoff_agent (a tau2 agent over an Engine), Hermes parsing with vLLM's parser,
the user simulator, run_episode + finalize_simulation, and Tau2AgentLoop (verl, in verl_loop; not
imported here so that evaluation never needs verl). See docs/agent.md."""

from handoff.agent.episode import EpisodeResult, EpisodeSettings, run_episode
from handoff.agent.finalize import finalize_simulation, termination_of
from handoff.agent.handoff_agent import INTERNAL_STOP, HandoffAgent
from handoff.agent.user import UserSpec, make_user

__all__ = [
    "INTERNAL_STOP",
    "EpisodeResult",
    "EpisodeSettings",
    "HandoffAgent",
    "UserSpec",
    "finalize_simulation",
    "make_user",
    "run_episode",
    "termination_of",
]
