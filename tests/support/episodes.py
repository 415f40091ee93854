"""Test episodes for the rules, built with tau2's own message classes against a real tau2
environment: every tool result is what the pinned tau2 returns for that call (success, business
error, unknown tool, rejected arguments)."""

from __future__ import annotations

import itertools
from functools import cache

from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
from tau2.data_model.simulation import (
    AgentInfo,
    Info,
    Results,
    RewardInfo,
    SimulationRun,
    UserInfo,
)
from tau2.data_model.tasks import Task
from tau2.domains.airline import environment as airline
from tau2.domains.retail import environment as retail
from tau2.environment.environment import EnvironmentInfo

import handoff  # noqa: F401  (prepares the process for tau2)
from handoff.rules import FormatEvent, TaskContext, Trajectory
from handoff.rules.events import TERMINATION_INFO_KEY

DOMAINS = {"airline": airline, "retail": retail}
GREETING = "Hi! How can I help you today?"

# Retail: order #W8835847 (pending) of daiki_silva_2903; task 88 cancels it "ordered by mistake".
RETAIL_EMAIL = "daiki.silva6295@example.com"
RETAIL_ORDER = "#W8835847"
RETAIL_OTHER_ORDER = "#W7999678"
CANCEL = {"order_id": RETAIL_ORDER, "reason": "ordered by mistake"}


@cache
def task(domain: str, task_id: str) -> Task:
    return next(t for t in DOMAINS[domain].get_tasks() if t.id == task_id)


def context(domain: str, task_id: str | None = None) -> TaskContext:
    return TaskContext.for_task(domain, task(domain, task_id) if task_id is not None else None)


def tau2_results(domain: str, task_ids: list[str], simulations: list[SimulationRun], trials: int = 1) -> Results:
    """A tau2 results object, as `tau2 run` saves it."""
    info = Info(
        git_commit="test", num_trials=trials, max_steps=10, max_errors=4,
        user_info=UserInfo(implementation="user_simulator"), agent_info=AgentInfo(implementation="handoff_agent"),
        environment_info=EnvironmentInfo(domain_name=domain, policy=""),
    )  # fmt: skip
    return Results(info=info, tasks=[task(domain, t) for t in dict.fromkeys(task_ids)], simulations=simulations)


class Episode:
    """A conversation played against a fresh tau2 environment; methods return the new turn."""

    def __init__(self, domain: str = "retail", task_id: str = "0"):
        self.domain, self.task_id = domain, task_id
        self.env = DOMAINS[domain].get_environment()
        self.messages: list = [AssistantMessage(role="assistant", content=GREETING)]
        self._ids = itertools.count()

    def user(self, text: str) -> int:
        return self._add(UserMessage(role="user", content=text))

    def say(self, text: str | None) -> int:
        return self._add(AssistantMessage(role="assistant", content=text))

    def call(self, name: str, text: str | None = None, **arguments) -> int:
        return self.calls((name, arguments), text=text)

    def calls(self, *calls: tuple[str, dict], text: str | None = None) -> int:
        tool_calls = [ToolCall(id=f"call_{next(self._ids)}", name=n, arguments=a) for n, a in calls]
        turn = self._add(AssistantMessage(role="assistant", content=text, tool_calls=tool_calls))
        self.messages.extend(self.env.get_response(tc) for tc in tool_calls)
        return turn

    def last_result(self):
        return self.messages[-1]

    def simulation(self, termination: str = "user_stop", reward: float | None = 1.0, real_termination: str | None = None) -> SimulationRun:
        info = {TERMINATION_INFO_KEY: real_termination} if real_termination else None
        return SimulationRun(
            id=f"sim-{self.task_id}",
            task_id=self.task_id,
            start_time="2024-05-15T15:00:00",
            end_time="2024-05-15T15:01:00",
            duration=60.0,
            termination_reason=termination,
            reward_info=None if reward is None else RewardInfo(reward=reward, info=info),
            messages=self.messages,
            trial=0,
        )

    def trajectory(self, events: list[FormatEvent] = (), **simulation) -> Trajectory:
        return Trajectory.from_simulation(self.simulation(**simulation), self.domain, events)

    def _add(self, message) -> int:
        self.messages.append(message)
        return len(self.messages) - 1


def authenticated_retail(task_id: str = "88") -> Episode:
    """A retail episode where the user was found by email (daiki_silva_2903)."""
    ep = Episode("retail", task_id)
    ep.user(f"I want to cancel an order. My email is {RETAIL_EMAIL}.")
    ep.call("find_user_id_by_email", email=RETAIL_EMAIL)
    return ep
