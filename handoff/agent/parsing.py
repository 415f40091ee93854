"""Turn a model's completion into a tau2 assistant message, with vLLM's own tool parser.

The parser (Hermes by default: Qwen-style `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`)
decides what is a tool call. This module only classifies what it could not use, as format events:

- markup the parser could not decode stays in the text to the user: `unparsed_tool_call`;
- a call to a tool the domain does not have: `unknown_tool` (tau2 answers it with an error);
- arguments that are not a JSON object, or nothing at all: the turn is unusable.
A call that decodes but would break what comes after (a lone surrogate such as `"\\ud800"`, which
json accepts and UTF-8 cannot encode; arguments nested deeper than MAX_ARGUMENT_DEPTH, on which
json, pydantic and deepcopy recurse) counts as markup the parser could not decode.
Arguments that break a known tool's signature are judged when the tool has answered
(`rejected_calls`), as the rules define invalid_arguments: the tool rejected them.

Nothing here raises on model output: any text gives a `ParsedTurn`.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from functools import cache

from tau2.data_model.message import ToolCall, ToolMessage
from tau2.environment.tool import Tool

from handoff.rules.context import DomainTools
from handoff.rules.events import FormatKind
from handoff.rules.trajectory import Call

TOOL_CALL_MARKUP = ("<tool_call>", "</tool_call>")
CALL_REGION = re.compile(r"<tool_call>.*?</tool_call>|<tool_call>.*", re.DOTALL)  # as the Hermes parser reads it
MAX_ARGUMENT_DEPTH = 32  # the arguments object is level 1


@dataclass
class ParsedTurn:
    """What one completion means: text for the user and/or tool calls, and what went wrong.

    `unusable` names why the turn cannot be sent at all (the episode ends on it); the problems
    that do not stop the episode are in `events` as (kind, detail)."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    events: list[tuple[FormatKind, str]] = field(default_factory=list)
    unusable: FormatKind | None = None
    unusable_detail: str = ""


class ToolCallParser:
    """vLLM's tool parser (by registry name) bound to a tokenizer and the domain's tools."""

    def __init__(self, tokenizer, tools: list[Tool], parser_name: str = "hermes"):
        self._parser = _parser_class(parser_name)(tokenizer)
        self._tools = domain_tools(tools)

    def parse(self, text: str, call_id_prefix: str) -> ParsedTurn:
        """Parse one completion. Tool call ids are `<call_id_prefix>_<i>`: deterministic, so the
        same completions give the same trajectory in evaluation and in training."""
        try:
            info = self._parser.extract_tool_calls(text, request=None)
        except Exception as exc:  # noqa: BLE001  model output must never raise out of the agent
            return _as_text(text, f"tool parser failed: {type(exc).__name__}: {exc}")
        if not info.tools_called:
            return _as_text(text, "tool-call markup the parser could not decode")
        # The parser keeps only the text before the first call; the text between and after is the
        # user's too (and a tool call plus text is a multiple_actions_in_turn violation).
        outside = CALL_REGION.sub("", text) if TOOL_CALL_MARKUP[0] in text else info.content
        turn = ParsedTurn(content=_text_or_none(outside))
        if has_tool_call_markup(outside):  # a stray tag beside the calls (`...</tool_call></tool_call>`)
            turn.events.append((FormatKind.UNPARSED_TOOL_CALL, "tool-call markup outside the calls"))
        for index, call in enumerate(info.tool_calls):
            name, raw_arguments = call.function.name, call.function.arguments
            arguments = json_or_none(raw_arguments)
            why = undecodable(name, raw_arguments, arguments)
            if why:
                return _as_text(text, why)
            if not add_call(turn, self._tools, f"{call_id_prefix}_{index}", name, arguments, raw_arguments):
                return turn
        return turn

    def rejected_calls(self, calls: list[ToolCall], results: list[ToolMessage]) -> list[str]:
        return rejected_calls(self._tools, calls, results)


def domain_tools(tools: list[Tool]) -> DomainTools:
    """The rules' view of the domain's tools (names and signatures)."""
    return DomainTools(
        domain="", names=frozenset(t.name for t in tools), write=frozenset(), params={t.name: t.params for t in tools}
    )


def undecodable(name: str, raw_arguments: str, arguments) -> str | None:
    """Why a decoded call would break what comes after (None: it would not): arguments nested deeper
    than MAX_ARGUMENT_DEPTH, a lone surrogate."""
    if _too_deep(arguments, MAX_ARGUMENT_DEPTH):
        return f"tool-call arguments nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    if not all(map(_utf8, (name, raw_arguments, json.dumps(arguments, ensure_ascii=False)))):
        return "a lone surrogate in the tool call"
    return None


def add_call(turn: ParsedTurn, tools: DomainTools, call_id: str, name: str, arguments, raw_arguments: str) -> bool:
    """Add a decoded call to `turn`: False (the turn unusable) when its arguments are not a JSON
    object; a call to a tool the domain lacks is made, with an unknown_tool event."""
    if not isinstance(arguments, dict):
        turn.unusable = FormatKind.INVALID_ARGUMENTS
        turn.unusable_detail = f"{name}: arguments are not a JSON object: {raw_arguments[:200]}"
        return False
    turn.tool_calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
    if name not in tools.names:
        turn.events.append((FormatKind.UNKNOWN_TOOL, f"no tool named {name!r}"))
    return True


def rejected_calls(tools: DomainTools, calls: list[ToolCall], results: list[ToolMessage]) -> list[str]:
    """Names of the calls that the tool answered with an error and whose arguments break its
    signature (missing, unexpected or wrongly typed): invalid_arguments."""
    by_id = {call.id: call for call in calls}
    rejected = []
    for result in results:
        call = by_id.get(result.id)
        known = result.error and call is not None and call.name in tools.names
        if known and tools.rejects_arguments(Call(id=call.id, name=call.name, arguments=call.arguments)):
            rejected.append(call.name)
    return rejected


def has_tool_call_markup(text: str) -> bool:
    return any(tag in text for tag in TOOL_CALL_MARKUP)


def _as_text(text: str, why: str) -> ParsedTurn:
    content = _text_or_none(text)
    if content is None:
        return ParsedTurn(unusable=FormatKind.EMPTY_MESSAGE, unusable_detail="neither text nor tool calls")
    turn = ParsedTurn(content=content)
    if has_tool_call_markup(text):
        turn.events.append((FormatKind.UNPARSED_TOOL_CALL, why))
    return turn


def _text_or_none(text: str | None) -> str | None:
    return text if text is not None and text.strip() else None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _too_deep(value, levels: int) -> bool:
    if not isinstance(value, (dict, list)):
        return False
    children = value.values() if isinstance(value, dict) else value
    return levels == 0 or any(_too_deep(child, levels - 1) for child in children)


def json_or_none(raw: str):
    try:
        return json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return None


@cache
def _parser_class(name: str):
    from vllm.tool_parsers import ToolParserManager

    parser = ToolParserManager.get_tool_parser(name)
    # A decoding failure is a recorded format event here, not a traceback in the worker's log.
    logging.getLogger(parser.__module__).setLevel(logging.CRITICAL)
    return parser
