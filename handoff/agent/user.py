"""The user simulator: tau2's own (prompt, guidelines, stop tokens, role flipping), generating
either on an Engine (the same engine types as the agent) or through an API model (tau2's litellm
UserSimulator, unchanged). Configurable per sweep with a `UserSpec`."""

from __future__ import annotations

import time

from pydantic import Field
from tau2.data_model.message import MultiToolMessage, UserMessage
from tau2.data_model.tasks import Task
from tau2.environment.tool import Tool
from tau2.user.base import BaseUser, UserError, UserState, ValidUserInputMessage
from tau2.user.user_simulator import UserSimulator

from handoff.agent.context import completion_text
from handoff.agent.handoff_agent import EngineAborted
from handoff.agent.messages import to_chat_dicts
from handoff.engine.base import ContextOverflowError, Engine, PoisonRequestError, Sampling
from handoff.settings import UserSimulatorConfig


class UserSpec(UserSimulatorConfig):
    """Who plays the user (handoff.settings.UserSimulatorConfig) and, on an engine, its sampling."""

    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=128))


class EngineUserSimulator(UserSimulator):
    """tau2's UserSimulator with generation on an Engine instead of litellm. The user simulator
    does not call tools in airline and retail; a user whose reply is empty or whose prompt no
    longer fits, or whose request kills its engine (PoisonRequestError), raises UserError (the episode
    ends with user_error). A request the engine aborted
    raises EngineAborted, as the agent's does: its partial text is no one's words."""

    def __init__(
        self,
        engine: Engine,
        chat,
        instructions: str,
        sampling: Sampling,
        max_context_tokens: int,
        tools: list[Tool] | None = None,
        session_id: str | None = None,
    ):
        super().__init__(tools=tools, instructions=instructions, llm=None, llm_args=None)
        self.engine, self.chat, self.sampling = engine, chat, sampling
        self.max_context_tokens = max_context_tokens
        self.session_id = session_id
        self.completion_tokens = 0
        self.prompt_tokens = 0
        self.cached_prompt_tokens = 0
        self.request_s = 0.0  # engine-seconds: time of its requests on the engine
        self.truncated_turns = 0  # replies cut at max_tokens or the context's room (the episode goes on with them)

    def set_seed(self, seed: int) -> None:
        self.sampling = self.sampling.model_copy(update={"seed": seed})

    def _generate_next_message(
        self, message: ValidUserInputMessage, state: UserState
    ) -> tuple[UserMessage, UserState]:
        state.messages.extend(message.tool_messages if isinstance(message, MultiToolMessage) else [message])
        prompt = self.chat.render(to_chat_dicts(state.system_messages + state.flip_roles()))
        room = self.max_context_tokens - len(prompt)
        if room <= 0:
            raise UserError(f"user simulator prompt of {len(prompt)} tokens exceeds {self.max_context_tokens}")
        sampling = self.sampling.model_copy(update={"max_tokens": min(self.sampling.max_tokens, room)})
        started = time.perf_counter()
        try:
            generation = self.engine.generate(prompt, sampling, self.session_id)
        except (ContextOverflowError, PoisonRequestError) as exc:  # a request that kills its engine ends the episode
            raise UserError(f"user simulator: {exc}") from exc
        finally:
            self.request_s += time.perf_counter() - started
        if generation.finish_reason == "abort":  # before its text is read: neither a reply nor a user_error
            raise EngineAborted("the engine aborted the user simulator's request")
        self.completion_tokens += len(generation.token_ids)
        self.prompt_tokens += len(prompt)
        self.cached_prompt_tokens += generation.cached_prompt_tokens
        self.truncated_turns += generation.finish_reason == "length"
        text = completion_text(self.chat, generation.token_ids).strip()
        if not text:
            raise UserError("user simulator produced an empty message")
        reply = UserMessage(role="user", content=text, cost=0.0)
        state.messages.append(reply)
        return reply, state


def make_user(
    spec: UserSpec,
    task: Task,
    engine: Engine | None = None,
    chat=None,
    tools: list[Tool] | None = None,
    session_id: str | None = None,
) -> BaseUser:
    """The user simulator for one episode of `task`, as `spec` says."""
    instructions = str(task.user_scenario)
    if spec.kind == "litellm":
        if not spec.llm:
            raise ValueError("user.kind=litellm needs user.llm (a litellm model name)")
        return UserSimulator(tools=tools, instructions=instructions, llm=spec.llm, llm_args=dict(spec.llm_args))
    if engine is None or chat is None:
        raise ValueError("user.kind=engine needs an engine and its chat format")
    return EngineUserSimulator(engine, chat, instructions, spec.sampling, spec.max_context_tokens, tools, session_id)


def user_usage(user: BaseUser) -> dict[str, int]:
    """What the user simulator generated (an engine's; litellm's is not counted): tokens, and replies
    cut at its max_tokens."""
    return {"user_completion_tokens": getattr(user, "completion_tokens", 0),
            "user_truncated_turns": getattr(user, "truncated_turns", 0)}
