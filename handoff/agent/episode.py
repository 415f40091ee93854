"""run_episode: one tau2 episode of handoff_agent against a user simulator, finalized and scored.

It drives tau2's Orchestrator directly (tau2.run.run_task cannot build custom agents) and turns
the AgentError / UserError that Orchestrator.step lets through into recorded terminations. The
sweep and Tau2AgentLoop (training) both call exactly this function.
"""

from __future__ import annotations

import time
import uuid

from pydantic import BaseModel, ConfigDict, Field
from tau2.agent.base import AgentError
from tau2.data_model.simulation import SimulationRun
from tau2.data_model.tasks import Task
from tau2.orchestrator.orchestrator import Orchestrator
from tau2.registry import registry
from tau2.user.base import BaseUser, UserError
from tau2.utils.llm_utils import get_cost
from tau2.utils.utils import get_now

from handoff.agent.context import TokenContext
from handoff.agent.cost import episode_cost, time_parts, user_completion_tokens
from handoff.agent.finalize import Evaluate, finalize_simulation
from handoff.agent.handoff_agent import AgentLog, HandoffAgent, PolicyAgent
from handoff.agent.user import user_format_events, user_usage
from handoff.engine.base import Engine, Sampling
from handoff.records import EpisodeRecord, Usage
from handoff.rules.events import FormatEvent
from handoff.settings import ApiModelSettings, EpisodeLimits


class EpisodeSettings(EpisodeLimits):
    """The limits of the sweep's `episode` group plus the agent's sampling and context for one
    episode. The user simulator's sampling belongs to its UserSpec (handoff.agent.user)."""

    agent_sampling: Sampling = Field(default_factory=lambda: Sampling(max_tokens=256))
    max_context_tokens: int = Field(8192, gt=0, description="the agent's prompt + completion limit")
    tool_parser: str = Field("hermes", description="vLLM tool parser name")
    api: ApiModelSettings | None = Field(None, description="an API model as the agent (ApiAgent), no engine")
    replica_gpus: int = Field(0, ge=0, description="GPUs of an engine replica: GPU-seconds = engine-seconds x this")


class EpisodeResult(BaseModel):
    """A finished episode: the finalized SimulationRun, the agent's format events and the user
    simulator's (telecom's user acts with tools: its slips are never the agent's), token usage, and the
    agent's token context (prompt + response ids with the mask of generated tokens)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    simulation: SimulationRun
    format_events: list[FormatEvent]
    usage: Usage
    user_format_events: list[FormatEvent] = Field(default_factory=list)
    agent_tokens: TokenContext | None = Field(exclude=True, description="None for an API agent")
    log: AgentLog
    domain: str
    seed: int
    wall_s: float

    def to_record(self, model: str, step: int = 0, trial: int = 0) -> EpisodeRecord:
        return EpisodeRecord(
            model=model,
            step=step,
            domain=self.domain,
            task_id=self.simulation.task_id,
            trial=trial,
            seed=self.seed,
            simulation=self.simulation.model_dump(mode="json"),
            format_events=self.format_events,
            user_format_events=self.user_format_events,
            usage=self.usage,
            wall_s=self.wall_s,
        )


def make_agent(domain_env, engine: Engine | None, chat, settings: EpisodeSettings, session_id: str) -> PolicyAgent:
    """The engine agent (HandoffAgent), or the API agent where `settings.api` names a model."""
    if settings.api is not None:
        from handoff.agent.api_agent import ApiAgent

        return ApiAgent(tools=domain_env.get_tools(), domain_policy=domain_env.get_policy(), settings=settings.api,
                        sampling=settings.agent_sampling)
    return HandoffAgent(
        tools=domain_env.get_tools(),
        domain_policy=domain_env.get_policy(),
        engine=engine,
        chat=chat,
        sampling=settings.agent_sampling,
        max_context_tokens=settings.max_context_tokens,
        tool_parser=settings.tool_parser,
        session_id=session_id,
    )


def agent_session(domain: str, task_id: str, seed: int) -> str:
    """The agent's session id: one per attempt (uuid), naming the episode (read by the scripted
    engine's known-answer agent, handoff.engine.scripted.handoff_decision)."""
    return f"{domain}/{task_id}-{seed}-{uuid.uuid4().hex[:8]}"


def run_episode(
    domain: str,
    task: Task,
    agent_engine: Engine | None,
    agent_chat,
    user: BaseUser,
    settings: EpisodeSettings,
    seed: int,
    evaluate: Evaluate | None = None,
    environment=None,
) -> EpisodeResult:
    """Run, finalize and score one episode. `user` comes from handoff.agent.user.make_user;
    `environment` defaults to a fresh tau2 environment of the domain. An API agent (`settings.api`)
    needs no engine nor chat (None)."""
    started = time.perf_counter()
    environment = environment or registry.get_env_constructor(domain)()
    session = agent_session(domain, task.id, seed)
    agent = make_agent(environment, agent_engine, agent_chat, settings, session_id=session)
    orchestrator = Orchestrator(
        domain=domain,
        agent=agent,
        user=user,
        environment=environment,
        task=task,
        max_steps=settings.max_steps,
        max_errors=settings.max_errors,
        seed=seed,
    )
    clock = time_parts(agent, user, environment)
    simulation, termination, detail = _run(orchestrator)
    simulation, events = finalize_simulation(simulation, task, domain, agent.log, evaluate, termination, detail)
    usage = Usage(
        prompt_tokens=agent.log.prompt_tokens,
        completion_tokens=agent.log.completion_tokens,
        agent_turns=agent.log.turns,
        **{**user_usage(user), "user_completion_tokens": user_completion_tokens(user, simulation.messages)},
        cost=episode_cost(agent.log, user, simulation.messages, clock, settings.replica_gpus, settings.api is not None),
    )
    return EpisodeResult(
        simulation=simulation,
        format_events=events,
        user_format_events=user_format_events(user, simulation.messages),
        usage=usage,
        agent_tokens=getattr(agent, "context", None),
        log=agent.log,
        domain=domain,
        seed=seed,
        wall_s=time.perf_counter() - started,
    )


def _run(orchestrator: Orchestrator) -> tuple[SimulationRun, str | None, str]:
    """Orchestrator.run, except that AgentError / UserError end the episode with that reason."""
    start_time = get_now()
    try:
        return orchestrator.run(), None, ""
    except AgentError as exc:
        reason, detail = "agent_error", str(exc)
    except UserError as exc:
        reason, detail = "user_error", str(exc)
    return _partial_run(orchestrator, start_time, reason), reason, detail[:500]


def _partial_run(orchestrator: Orchestrator, start_time: str, reason: str) -> SimulationRun:
    messages = orchestrator.get_trajectory()
    costs = get_cost(messages)
    return SimulationRun(
        id=str(uuid.uuid4()),
        task_id=orchestrator.task.id,
        start_time=start_time,
        end_time=get_now(),
        duration=0.0,
        termination_reason=reason,
        messages=messages,
        seed=orchestrator.seed,
        agent_cost=costs[0] if costs else None,
        user_cost=costs[1] if costs else None,
    )
