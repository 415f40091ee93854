"""Replays of a task's reference actions as tau2 SimulationRuns (for equality tests and benchmarks).

`replay(task, domain)` plays the task's gold actions as assistant tool calls, records each tool
result from a real environment, and ends with an assistant message stating the task's
`communicate_info`: tau2 gives it full reward. `wrong_write_variants(task)` yields the same replay
with one write changed: an argument altered, the last write repeated, or the last write dropped.
"""

from __future__ import annotations

import uuid
from typing import Iterator

from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
from tau2.data_model.simulation import SimulationRun, TerminationReason
from tau2.data_model.tasks import Action, Task
from tau2.environment.toolkit import ToolType

from handoff.fasteval.environments import make_environment


def replay(
    task: Task,
    domain: str,
    actions: list[Action] | None = None,
    termination: TerminationReason = TerminationReason.AGENT_STOP,
) -> SimulationRun:
    """A SimulationRun whose assistant performs `actions` (default: the gold ones) and says the
    task's communicate_info."""
    if actions is None:
        actions = list(task.evaluation_criteria.actions or [])
    env = initialized_environment(task, domain)
    messages: list = [UserMessage(role="user", content="Hello, I need help.")]
    for i, action in enumerate(actions):
        call = ToolCall(id=f"call_{i}", name=action.name, arguments=action.arguments,
                        requestor=action.requestor)
        cls = AssistantMessage if action.requestor == "assistant" else UserMessage
        messages.append(cls(role=call.requestor, content=None, tool_calls=[call]))
        messages.append(env.get_response(call))
    info = task.evaluation_criteria.communicate_info or []
    messages.append(AssistantMessage(role="assistant", content=" ".join(info) or "Done."))
    return SimulationRun(
        id=str(uuid.uuid4()), task_id=task.id, start_time="", end_time="", duration=0.0,
        termination_reason=termination, messages=messages,
    )


def initialized_environment(task: Task, domain: str):
    """A fresh environment of the domain in the task's initial state (as tau2's orchestrator and evaluator
    set it: telecom's tasks put the user's phone and line in their faulty state this way)."""
    env = make_environment(domain)
    state = task.initial_state
    if state is not None:
        env.set_state(state.initialization_data, state.initialization_actions, [])
    return env


def write_indices(task: Task, domain: str) -> list[int]:
    """Positions of the gold actions that call a WRITE tool."""
    tools = make_environment(domain).tools
    return [
        i for i, a in enumerate(task.evaluation_criteria.actions or [])
        if tools.has_tool(a.name) and tools.tool_type(a.name) == ToolType.WRITE
    ]


def _altered(arguments: dict) -> dict:
    """The arguments with one value changed (the last number, else the last string)."""
    changed = dict(arguments)
    for key in reversed(list(changed)):
        value = changed[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            changed[key] = value + 1
            return changed
    for key in reversed(list(changed)):
        if isinstance(changed[key], str):
            changed[key] = changed[key] + "0"
            return changed
    return changed


def wrong_write_variants(task: Task, domain: str) -> Iterator[tuple[str, list[Action]]]:
    """(name, actions) for replays with a wrong write; none when the task has no write."""
    gold = list(task.evaluation_criteria.actions or [])
    writes = write_indices(task, domain)
    if not writes:
        return
    last = writes[-1]
    altered = gold[last].model_copy(update={"arguments": _altered(gold[last].arguments)})
    yield "altered_argument", gold[:last] + [altered] + gold[last + 1:]
    yield "repeated_write", gold[: last + 1] + [gold[last]] + gold[last + 1:]
    yield "dropped_write", gold[:last] + gold[last + 1:]


def tau2_reward_info(simulation: SimulationRun, task: Task, domain: str):
    """tau2's own evaluate_simulation (EvaluationType.ALL), the reference fasteval must match;
    a module-level function so that tests can run it in worker processes."""
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    return evaluate_simulation(simulation, task, EvaluationType.ALL, False, domain)
