"""handoff_agent: a tau2 agent whose turns come from an Engine (token ids in, token ids out).

Each turn: append the new user/tool messages to the token context, generate, decode, parse the
tool calls with vLLM's parser, and record what was malformed as format events. A turn that cannot
be used (cut at the token limit, empty, arguments that are not a JSON object, a prompt that no
longer fits the context) becomes the internal stop message: tau2's Orchestrator ends the episode
on it (as an agent stop), and `finalize_simulation` restores the real termination reason and
removes the message. Model output never raises out of this class.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from tau2.agent.base import LocalAgent, ValidAgentInputMessage
from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT
from tau2.data_model.message import (
    AssistantMessage,
    Message,
    MultiToolMessage,
    SystemMessage,
    ToolMessage,
)
from tau2.environment.tool import Tool

from handoff.agent.context import TokenContext, completion_text
from handoff.agent.messages import to_chat_dicts
from handoff.agent.parsing import ToolCallParser, domain_tools, rejected_calls
from handoff.engine.base import ContextOverflowError, Engine, Generation, PoisonRequestError, Sampling
from handoff.rules.events import FormatKind

INTERNAL_STOP = "###STOP###"
_STOP_KEY = "handoff_internal_stop"

Termination = Literal["agent_error", "context_window_exceeded"]


class EngineAborted(RuntimeError):
    """The engine aborted a request (shutdown, preemption): an infrastructure failure to retry,
    not something the model did."""


class AgentEvent(BaseModel):
    """A format event as the agent sees it: `assistant_index` counts the assistant messages before
    the one concerned (the opening greeting included); finalize maps it to a message index."""

    kind: FormatKind
    assistant_index: int
    detail: str = ""


class AgentStop(BaseModel):
    """Why the agent ended the episode with the internal stop message."""

    termination: Termination
    kind: FormatKind | None = Field(None, description="the format event behind it; None for context overflow")
    detail: str = ""


class AgentLog(BaseModel):
    """Everything the agent records besides the messages themselves."""

    events: list[AgentEvent] = Field(default_factory=list)
    stop: AgentStop | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    turns: int = 0
    request_s: float = 0.0  # time in the model's requests (an engine's: its engine-seconds)
    cost_usd: float | None = 0.0  # an API model's price (litellm's cost map); None: unknown (cost_note says why)
    cost_note: str | None = None


class HandoffAgentState(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages: list[Message]


class PolicyAgent(LocalAgent[HandoffAgentState]):
    """What every agent of ours shares, whatever generates its turns: tau2's system prompt with the
    domain policy, the tools, the format events and the internal stop. A subclass renders the new
    messages (`_add`) and answers (`_respond`)."""

    def __init__(self, tools: list[Tool], domain_policy: str, sampling: Sampling):
        super().__init__(tools=tools, domain_policy=domain_policy)
        self.sampling = sampling
        self.domain_tools = domain_tools(tools)
        self.log = AgentLog()

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(agent_instruction=AGENT_INSTRUCTION, domain_policy=self.domain_policy)

    def get_init_state(self, message_history: list[Message] | None = None) -> HandoffAgentState:
        return HandoffAgentState(messages=list(message_history or []))

    def set_seed(self, seed: int) -> None:
        self.sampling = self.sampling.model_copy(update={"seed": seed})

    @classmethod
    def is_stop(cls, message: AssistantMessage) -> bool:
        return bool(message.raw_data) and _STOP_KEY in message.raw_data

    def generate_next_message(
        self, message: ValidAgentInputMessage, state: HandoffAgentState
    ) -> tuple[AssistantMessage, HandoffAgentState]:
        new = message.tool_messages if isinstance(message, MultiToolMessage) else [message]
        self._judge_tool_results(state.messages, new)
        self._add(state.messages, new)
        state.messages.extend(new)
        reply = self._respond(sum(isinstance(m, AssistantMessage) for m in state.messages))
        state.messages.append(reply)
        return reply, state

    def _judge_tool_results(self, history: list[Message], new: list[Message]) -> None:
        """invalid_arguments for the previous turn's calls that the tools rejected."""
        last = history[-1] if history else None
        if not (isinstance(last, AssistantMessage) and last.tool_calls):
            return
        index = sum(isinstance(m, AssistantMessage) for m in history) - 1
        results = [m for m in new if isinstance(m, ToolMessage)]
        for name in rejected_calls(self.domain_tools, last.tool_calls, results):
            detail = f"{name}: the tool rejected the arguments"
            self.log.events.append(AgentEvent(kind=FormatKind.INVALID_ARGUMENTS, assistant_index=index, detail=detail))

    def _add(self, history: list[Message], new: list[Message]) -> None:
        """Take in the new user / tool messages (`history`: those before them)."""
        raise NotImplementedError

    def _respond(self, assistant_index: int) -> AssistantMessage:
        raise NotImplementedError

    def _stop(self, termination: Termination, kind: FormatKind | None, detail: str, index: int) -> AssistantMessage:
        self.log.stop = AgentStop(termination=termination, kind=kind, detail=detail)
        if kind is not None:
            self.log.events.append(AgentEvent(kind=kind, assistant_index=index, detail=detail))
        return AssistantMessage(role="assistant", content=INTERNAL_STOP, cost=0.0, raw_data={_STOP_KEY: termination})


class HandoffAgent(PolicyAgent):
    """tau2 agent over an Engine and a ChatFormat (the model's tokenizer and chat template)."""

    def __init__(
        self,
        tools: list[Tool],
        domain_policy: str,
        engine: Engine,
        chat,
        sampling: Sampling,
        max_context_tokens: int,
        tool_parser: str = "hermes",
        session_id: str | None = None,
    ):
        super().__init__(tools=tools, domain_policy=domain_policy, sampling=sampling)
        self.engine, self.chat = engine, chat
        self.max_context_tokens = max_context_tokens
        self.session_id = session_id
        self.parser = ToolCallParser(chat.tokenizer, tools, tool_parser)
        self.context = TokenContext(chat, tools=[tool.openai_schema for tool in tools])

    def _add(self, history: list[Message], new: list[Message]) -> None:
        if not self.context.ids:
            system = SystemMessage(role="system", content=self.system_prompt)
            self.context.start(to_chat_dicts([system, *history, *new]))
        else:
            self.context.add_messages(to_chat_dicts(new))

    def _respond(self, assistant_index: int) -> AssistantMessage:
        room = self.max_context_tokens - len(self.context.ids)
        if room <= 0:
            detail = f"prompt of {len(self.context.ids)} tokens, max context {self.max_context_tokens}"
            return self._stop("context_window_exceeded", None, detail, assistant_index)
        sampling = self.sampling.model_copy(update={"max_tokens": min(self.sampling.max_tokens, room)})
        started = time.perf_counter()
        try:
            generation = self.engine.generate(list(self.context.ids), sampling, self.session_id)
        except ContextOverflowError as exc:  # the engine's window is smaller than max_context_tokens
            return self._stop("context_window_exceeded", None, str(exc), assistant_index)
        except PoisonRequestError as exc:  # the request kills its engine: the episode ends on it
            return self._stop("agent_error", None, str(exc), assistant_index)
        self.log.request_s += time.perf_counter() - started
        self._account(generation)
        if generation.finish_reason == "abort":
            raise EngineAborted("the engine aborted the agent's request")
        if generation.finish_reason == "length":
            detail = f"cut at {len(generation.token_ids)} tokens (limit {sampling.max_tokens})"
            return self._stop("context_window_exceeded", FormatKind.TRUNCATED_GENERATION, detail, assistant_index)
        text = completion_text(self.chat, generation.token_ids)
        parsed = self.parser.parse(text, call_id_prefix=f"call_{assistant_index}")
        for kind, detail in parsed.events:
            self.log.events.append(AgentEvent(kind=kind, assistant_index=assistant_index, detail=detail))
        if parsed.unusable is not None:
            return self._stop("agent_error", parsed.unusable, parsed.unusable_detail, assistant_index)
        return AssistantMessage(
            role="assistant",
            content=parsed.content,
            tool_calls=parsed.tool_calls or None,
            cost=0.0,
            usage=_usage(generation, len(self.context.ids)),
        )

    def _account(self, generation: Generation) -> None:
        self.log.turns += 1
        self.log.prompt_tokens += len(self.context.ids)
        self.log.completion_tokens += len(generation.token_ids)
        self.log.cached_prompt_tokens += generation.cached_prompt_tokens
        self.context.add_generation(generation.token_ids, generation.logprobs)


def _usage(generation: Generation, context_len: int) -> dict:
    completion = len(generation.token_ids)
    return {"prompt_tokens": context_len - completion, "completion_tokens": completion}
