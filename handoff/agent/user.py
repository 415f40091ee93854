"""The user simulator: tau2's own (prompt, guidelines, stop tokens, role flipping), generating
either on an Engine (the same engine types as the agent) or through an API model (tau2's litellm
UserSimulator, unchanged). Configurable per sweep with a `UserSpec`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache

from pydantic import Field
from tau2.data_model.message import MultiToolMessage, ToolMessage, UserMessage
from tau2.data_model.tasks import Task
from tau2.environment.tool import Tool
from tau2.user.base import BaseUser, UserError, UserState, ValidUserInputMessage
from tau2.user.user_simulator import UserSimulator

from handoff.agent.context import completion_text
from handoff.agent.handoff_agent import EngineAborted
from handoff.agent.messages import to_chat_dicts
from handoff.agent.parsing import ToolCallParser
from handoff.engine.base import ContextOverflowError, Engine, PoisonRequestError, Sampling
from handoff.rules.events import FormatEvent, FormatKind
from handoff.settings import UserSimulatorConfig


class UserSpec(UserSimulatorConfig):
    """Who plays the user (handoff.settings.UserSimulatorConfig) and, on an engine, its sampling."""

    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=128))


@cache
def domain_user_tools(domain: str) -> tuple[Tool, ...] | None:
    """The tools the user acts with in `domain` (telecom: their phone's), None where the user has none
    (airline, retail): tau2's user simulator then gets no tool guidelines either."""
    from tau2.registry import registry

    environment = registry.get_env_constructor(domain)()
    return tuple(environment.get_user_tools()) if environment.user_tools is not None else None


@dataclass(frozen=True)
class UserTurnEvent:
    """A format problem of the user simulator's turn `user_turn` (0-based, among the user's messages):
    recorded as the user's (EpisodeResult.user_format_events), never the agent's."""

    kind: FormatKind
    user_turn: int
    detail: str


def user_format_events(user: BaseUser, messages: list) -> list[FormatEvent]:
    """The user simulator's format events, each at the index in `messages` (the finalized trajectory) of
    the user message it concerns (len(messages) for a turn that never became one)."""
    indices = [i for i, m in enumerate(messages) if getattr(m, "role", None) == "user"]
    return [FormatEvent(kind=e.kind, turn=indices[e.user_turn] if e.user_turn < len(indices) else len(messages),
                        detail=e.detail) for e in getattr(user, "events", [])]


class EngineUserSimulator(UserSimulator):
    """tau2's UserSimulator with generation on an Engine instead of litellm. The user simulator
    does not call tools in airline and retail; in telecom it gets its tools in the prompt (the chat
    template's, as the agent's) and its completion is parsed by the agent's parser (Hermes), so a
    `<tool_call>` of a user tool becomes the user's call (requestor "user"), which tau2's orchestrator
    runs on the user's device and answers. What the parser flags is the user's format event, not the
    agent's; an unusable call (arguments that are not a JSON object) is sent as the user's text.
    A user whose reply is empty or whose prompt no longer fits, or whose request kills its engine
    (PoisonRequestError), raises UserError (the episode ends with user_error). A request the engine
    aborted raises EngineAborted, as the agent's does: its partial text is no one's words."""

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
        self.parser = ToolCallParser(chat.tokenizer, tools) if tools else None
        self.schemas = [tool.openai_schema for tool in tools] if tools else None
        self.events: list[UserTurnEvent] = []

    def set_seed(self, seed: int) -> None:
        self.sampling = self.sampling.model_copy(update={"seed": seed})

    def _generate_next_message(
        self, message: ValidUserInputMessage, state: UserState
    ) -> tuple[UserMessage, UserState]:
        new = message.tool_messages if isinstance(message, MultiToolMessage) else [message]
        self._judge_tool_results(state.messages, new)
        state.messages.extend(new)
        prompt = self.chat.render(to_chat_dicts(state.system_messages + state.flip_roles()), tools=self.schemas)
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
        reply = self._reply(text, sum(isinstance(m, UserMessage) for m in state.messages))
        state.messages.append(reply)
        return reply, state

    def _reply(self, text: str, user_turn: int) -> UserMessage:
        """The user's message: text, or the tool calls the parser finds in it (telecom)."""
        if self.parser is None:
            return UserMessage(role="user", content=text, cost=0.0)
        parsed = self.parser.parse(text, call_id_prefix=f"user_call_{user_turn}")
        self.events += [UserTurnEvent(kind, user_turn, detail) for kind, detail in parsed.events]
        if parsed.unusable is not None:
            self.events.append(UserTurnEvent(parsed.unusable, user_turn, parsed.unusable_detail))
            return UserMessage(role="user", content=text, cost=0.0)
        calls = [call.model_copy(update={"requestor": "user"}) for call in parsed.tool_calls]
        return UserMessage(role="user", content=parsed.content, tool_calls=calls or None, cost=0.0)

    def _judge_tool_results(self, history: list, new: list) -> None:
        """invalid_arguments of the user's previous calls that its tools rejected."""
        last = history[-1] if history else None
        if self.parser is None or not (isinstance(last, UserMessage) and last.tool_calls):
            return
        results = [m for m in new if isinstance(m, ToolMessage)]
        turn = sum(isinstance(m, UserMessage) for m in history) - 1
        self.events += [UserTurnEvent(FormatKind.INVALID_ARGUMENTS, turn, f"{name}: the tool rejected the arguments")
                        for name in self.parser.rejected_calls(last.tool_calls, results)]


def make_user(
    spec: UserSpec,
    task: Task,
    engine: Engine | None = None,
    chat=None,
    tools: list[Tool] | None = None,
    session_id: str | None = None,
    domain: str | None = None,
) -> BaseUser:
    """The user simulator for one episode of `task`, as `spec` says; with `domain` and no `tools`, the
    domain's user tools (domain_user_tools: telecom's phone)."""
    instructions = str(task.user_scenario)
    if tools is None and domain is not None:
        tools = list(domain_user_tools(domain) or []) or None
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
