"""finalize_simulation: from what tau2's Orchestrator returned to the episode as it really ended.

When the agent ended the episode with the internal stop message, tau2 recorded an agent stop.
Finalizing removes that message, restores the real termination reason, re-runs tau2's evaluator
(which gives 0 to every premature ending) and maps the agent's format events to message indices.

tau2's TerminationReason has no `context_window_exceeded`. Such an episode is recorded as
`termination_reason = agent_error` (tau2 then scores it as premature, as it should) and the real
reason is kept in `reward_info.info["handoff_termination"]`; `termination_of(sim)` reads it back.
The agent's format events and token usage go into `reward_info.info` as well
(handoff.rules.events), so that the SimulationRun alone scores as the reducer scores its record.
"""

from __future__ import annotations

from collections.abc import Callable

from tau2.data_model.message import AssistantMessage
from tau2.data_model.simulation import RewardInfo, SimulationRun, TerminationReason
from tau2.data_model.tasks import Task
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

from handoff.agent.handoff_agent import AgentLog, HandoffAgent
from handoff.rules.events import TERMINATION_DETAIL_INFO_KEY as DETAIL_KEY
from handoff.rules.events import TERMINATION_INFO_KEY as TERMINATION_KEY
from handoff.rules.events import FormatEvent, with_episode_info

Evaluate = Callable[..., RewardInfo]


def tau2_evaluate(simulation: SimulationRun, task: Task, domain: str) -> RewardInfo:
    """tau2's own evaluator, as `tau2 run` calls it."""
    return evaluate_simulation(
        simulation=simulation, task=task, evaluation_type=EvaluationType.ALL, solo_mode=False, domain=domain
    )


def finalize_simulation(
    sim: SimulationRun,
    task: Task,
    domain: str,
    log: AgentLog,
    evaluate: Evaluate | None = None,
    termination: str | None = None,
    detail: str = "",
) -> tuple[SimulationRun, list[FormatEvent]]:
    """The finalized SimulationRun (stop message removed, real termination reason, fresh reward)
    and the format events with `turn` = index in its messages. `termination` overrides the
    reason (run_episode passes the AgentError/UserError tau2 raised)."""
    sim = sim.model_copy(deep=True)
    messages = [m for m in sim.messages if not (isinstance(m, AssistantMessage) and HandoffAgent.is_stop(m))]
    for index, message in enumerate(messages):
        message.turn_idx = index
    sim.messages = messages
    if log.stop is not None and termination is None:
        termination, detail = log.stop.termination, log.stop.detail
    if termination is not None:
        sim.termination_reason = _tau2_reason(termination)
    sim.reward_info = (evaluate or tau2_evaluate)(simulation=sim, task=task, domain=domain)
    if termination is not None:
        sim.reward_info.info = {**(sim.reward_info.info or {}), TERMINATION_KEY: termination, DETAIL_KEY: detail}
    events = map_events(log, messages)
    sim.reward_info.info = with_episode_info(sim.reward_info.info, events, log.prompt_tokens, log.completion_tokens)
    return sim, events


def map_events(log: AgentLog, messages: list) -> list[FormatEvent]:
    """Agent events (counted in assistant messages) as FormatEvents indexing `messages`; the
    turn of a dropped message is len(messages)."""
    assistant_at = [i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)]
    events = []
    for event in log.events:
        turn = assistant_at[event.assistant_index] if event.assistant_index < len(assistant_at) else len(messages)
        events.append(FormatEvent(kind=event.kind, turn=turn, detail=event.detail))
    return events


def termination_of(sim: SimulationRun) -> str:
    """The real termination reason: tau2's, or the one tau2 cannot express."""
    info = sim.reward_info.info if sim.reward_info is not None else None
    return (info or {}).get(TERMINATION_KEY) or sim.termination_reason.value


def _tau2_reason(termination: str) -> TerminationReason:
    try:
        return TerminationReason(termination)
    except ValueError:
        return TerminationReason.AGENT_ERROR
