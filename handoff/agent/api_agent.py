"""ApiAgent: an API model as the agent, through litellm (as tau2's LLMAgent and its litellm user
simulator call theirs), with what HandoffAgent has: tau2's system prompt with the domain policy,
the domain's tools as native tool calls (OpenAI schemas; no Hermes text), the format events and the
internal stop that finalize_simulation turns into the real termination.

Whose an error is (docs/agent.md, "An API model as the agent"):
- a rate limit (429), a server error (5xx), a connection error or a timeout is the infrastructure's:
  retried here with exponential backoff (`max_retries`, `retry_backoff_s`), and once the retries are
  spent, `ApiUnavailable`, which the sweep resubmits without charging the episode an attempt;
- a content-filter refusal (an error, or finish reason `content_filter`) is the agent's: the episode
  ends as `agent_error`;
- a malformed tool call is a format event: arguments that are not JSON `unparsed_tool_call` (the
  call is not made), JSON that is no object `invalid_arguments` (the turn is unusable), an unknown
  tool `unknown_tool`; a completion cut at max_tokens `truncated_generation`.
Keys come only from the environment (litellm reads OPENAI_API_KEY & co.; a config passes
`${oc.env:VAR}`). Cost: litellm's price for the response from its local cost map, or None with the
reason when litellm has no price for the model (never a made-up one).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tau2.data_model.message import AssistantMessage, Message, SystemMessage
from tau2.environment.tool import Tool
from tau2.utils.llm_utils import to_litellm_messages

from handoff.agent.handoff_agent import AgentEvent, PolicyAgent
from handoff.agent.parsing import ParsedTurn, add_call, json_or_none, undecodable
from handoff.engine.base import ApiUnavailable, Sampling
from handoff.rules.events import FormatKind
from handoff.settings import ApiModelSettings

MAX_BACKOFF_S = 60.0
INFRASTRUCTURE_STATUS = (408, 409, 429)  # timeout, conflict, rate limit: and every 5xx


def infrastructure_error(exc: BaseException) -> bool:
    """Whether litellm's exception is the infrastructure's (retried), not the agent's."""
    import litellm

    if isinstance(exc, (litellm.APIConnectionError, litellm.Timeout, litellm.RateLimitError)):
        return True
    if isinstance(exc, litellm.BadRequestError):  # content policy, context window, bad arguments: 400
        return False
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status in INFRASTRUCTURE_STATUS)


def complete_with_retries(request: Callable[[], object], settings: ApiModelSettings,
                          sleep: Callable[[float], None] = time.sleep, what: str = "agent"):
    """`request()` (a litellm completion), retried on the infrastructure's errors with backoff."""
    for attempt in range(settings.max_retries + 1):
        try:
            return request()
        except Exception as exc:  # sorted: the infrastructure's are retried, the rest raised
            if not infrastructure_error(exc):
                raise
            if attempt == settings.max_retries:
                raise ApiUnavailable(f"{settings.llm} ({what}): {type(exc).__name__} after {attempt + 1} "
                                     f"tries: {str(exc)[:500]}") from None
            sleep(min(MAX_BACKOFF_S, settings.retry_backoff_s * 2**attempt))
    raise AssertionError("unreachable")


def response_cost(response) -> tuple[float | None, str | None]:
    """litellm's price of `response` from its cost map, or (None, why) when it has none."""
    from litellm import completion_cost

    try:
        return float(completion_cost(completion_response=response)), None
    except Exception as exc:  # noqa: BLE001 - litellm raises for a model it cannot price
        return None, f"litellm has no price for {getattr(response, 'model', '?')}: {str(exc).splitlines()[0][:200]}"


def cached_tokens(usage) -> int:
    details = getattr(usage, "prompt_tokens_details", None)
    return int(getattr(details, "cached_tokens", 0) or 0)


class ApiAgent(PolicyAgent):
    """tau2 agent over a litellm model (module docstring)."""

    def __init__(self, tools: list[Tool], domain_policy: str, settings: ApiModelSettings, sampling: Sampling,
                 completion: Callable | None = None):
        super().__init__(tools=tools, domain_policy=domain_policy, sampling=sampling)
        self.settings = settings
        self.history: list[Message] = []
        self._completion = completion

    def _add(self, history: list[Message], new: list[Message]) -> None:
        if not self.history:
            self.history = [SystemMessage(role="system", content=self.system_prompt), *history]
        self.history.extend(new)

    def request_args(self) -> dict:
        """litellm's arguments: the model, tools, sampling, then `llm_args` (which win)."""
        s, p = self.settings, self.sampling
        args = {"model": s.llm, "tools": [t.openai_schema for t in self.tools], "tool_choice": "auto",
                "temperature": p.temperature, "top_p": p.top_p, "max_tokens": p.max_tokens,
                "num_retries": 0, "max_retries": 0,  # litellm's and the OpenAI client's: the retries are ours
                "drop_params": True}
        if p.seed is not None:
            args["seed"] = p.seed
        if s.parallel_tool_calls is not None:
            args["parallel_tool_calls"] = s.parallel_tool_calls
        return {**args, **s.llm_args}

    def _request(self):
        import litellm

        completion = self._completion or litellm.completion
        return completion(messages=to_litellm_messages(self.history), **self.request_args())

    def _respond(self, assistant_index: int) -> AssistantMessage:
        import litellm

        started = time.perf_counter()
        try:
            response = complete_with_retries(self._request, self.settings)
        except litellm.ContextWindowExceededError as exc:
            return self._stop("context_window_exceeded", None, str(exc)[:500], assistant_index)
        except litellm.ContentPolicyViolationError as exc:
            return self._stop("agent_error", None, f"content filter: {str(exc)[:500]}", assistant_index)
        finally:
            self.log.request_s += time.perf_counter() - started
        cost = self._account(response)
        choice = response.choices[0]
        if choice.finish_reason == "content_filter":
            return self._stop("agent_error", None, "content filter: the provider withheld the completion",
                              assistant_index)
        if choice.finish_reason == "length":
            detail = f"cut at {response.usage.completion_tokens} tokens (limit {self.sampling.max_tokens})"
            return self._stop("context_window_exceeded", FormatKind.TRUNCATED_GENERATION, detail, assistant_index)
        turn = self._read(choice.message, assistant_index)
        for kind, detail in turn.events:
            self.log.events.append(AgentEvent(kind=kind, assistant_index=assistant_index, detail=detail))
        if turn.unusable is not None:
            return self._stop("agent_error", turn.unusable, turn.unusable_detail, assistant_index)
        usage = {"prompt_tokens": response.usage.prompt_tokens, "completion_tokens": response.usage.completion_tokens}
        reply = AssistantMessage(role="assistant", content=turn.content, tool_calls=turn.tool_calls or None,
                                 cost=cost, usage=usage)
        self.history.append(reply)
        return reply

    def _read(self, message, assistant_index: int) -> ParsedTurn:
        """The completion's text and native tool calls as a ParsedTurn (the engine agent's rules)."""
        content = message.content if message.content and message.content.strip() else None
        turn = ParsedTurn(content=content)
        for index, call in enumerate(message.tool_calls or []):
            name, raw = call.function.name or "", call.function.arguments or ""
            arguments = json_or_none(raw) if raw.strip() else {}
            why = "tool-call arguments are not JSON" if arguments is None and raw.strip() != "null" else \
                undecodable(name, raw, arguments)
            if why:
                turn.events.append((FormatKind.UNPARSED_TOOL_CALL, f"{name}: {why}: {raw[:200]}"))
                continue
            if not add_call(turn, self.domain_tools, f"call_{assistant_index}_{index}", name, arguments, raw):
                return turn
        if turn.content is None and not turn.tool_calls and turn.unusable is None:
            kind = FormatKind.UNPARSED_TOOL_CALL if turn.events else FormatKind.EMPTY_MESSAGE
            turn.events = [e for e in turn.events if e[0] is not kind]
            turn.unusable, turn.unusable_detail = kind, "neither text nor a tool call that could be made"
        return turn

    def _account(self, response) -> float | None:
        """Tokens and litellm's cost of one response; the episode's cost is None once one is unknown."""
        usage = response.usage
        self.log.turns += 1
        self.log.prompt_tokens += usage.prompt_tokens
        self.log.completion_tokens += usage.completion_tokens
        self.log.cached_prompt_tokens += cached_tokens(usage)
        cost, why = response_cost(response)
        if cost is None:
            self.log.cost_usd, self.log.cost_note = None, why
        elif self.log.cost_usd is not None:
            self.log.cost_usd += cost
        return cost
