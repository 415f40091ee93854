"""The normalized Trajectory: what the rules read from a tau2 SimulationRun, and nothing more.

Messages keep only role, text, tool calls (id, name, arguments), the tool error flag and the
requestor, so that thousands of episodes load and score in seconds. `turn` everywhere is an index
in `messages`, the same index as in the SimulationRun (tau2's MultiToolMessage is flattened, as
tau2 itself stores tool results).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field, ValidationError, field_validator

from handoff.errors import HandoffError
from handoff.rules.events import (
    FORMAT_EVENTS_INFO_KEY,
    TERMINATION_INFO_KEY,
    TOKENS_INFO_KEY,
    FormatEvent,
)

TRANSFER_TOOL = "transfer_to_human_agents"


class TrajectoryLoadError(HandoffError, ValueError):
    """A file or object that is not a tau2 SimulationRun / results JSON."""


class Call(BaseModel):
    id: str = ""
    name: str
    arguments: dict

    @field_validator("arguments", mode="before")
    @classmethod
    def _json_arguments(cls, value: Any) -> Any:
        # OpenAI-style payloads carry arguments as a JSON string.
        return json.loads(value) if isinstance(value, str) else value


class Msg(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[Call] = Field(default_factory=list)
    id: str = Field("", description="tool messages: the id of the call answered")
    error: bool = Field(False, description="tool messages: the tool raised")
    requestor: Literal["user", "assistant"] = "assistant"

    @field_validator("tool_calls", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return value or []

    @property
    def has_text(self) -> bool:
        return bool(self.content and self.content.strip())


class AgentCall(NamedTuple):
    """An assistant tool call with its result: `ok` is True/False for a tool message without/with
    the error flag, None when no result was recorded (the episode ended first)."""

    turn: int
    call: Call
    ok: bool | None


class Trajectory(BaseModel):
    task_id: str
    domain: str
    trial: int | None = None
    termination_reason: str
    tau2_reward: float | None = None
    messages: list[Msg]
    format_events: list[FormatEvent] = Field(default_factory=list)
    format_events_recorded: bool = Field(True, description="False: a SimulationRun without handoff's "
                                         "format events (not written by handoff); only the messages tell")
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @classmethod
    def from_simulation(
        cls,
        sim: Any,
        domain: str,
        format_events: Iterable[FormatEvent] | None = None,
        *,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
    ) -> Trajectory:
        """From a tau2 SimulationRun (object or its JSON dict). The agent's format events and token
        counts default to those handoff keeps in `reward_info.info` (handoff.rules.events), else
        to none and to the sum of the assistant messages' `usage`."""
        data = sim.model_dump(mode="json") if isinstance(sim, BaseModel) else sim
        try:
            messages = list(_flatten(data["messages"]))
            reward_info = data.get("reward_info") or {}
            info = reward_info.get("info") or {}
            recorded = format_events is not None or FORMAT_EVENTS_INFO_KEY in info
            if format_events is None:
                format_events = [FormatEvent.model_validate(e) for e in info.get(FORMAT_EVENTS_INFO_KEY, [])]
            usage = _usage(messages)
            if TOKENS_INFO_KEY in info:
                usage = (info[TOKENS_INFO_KEY]["prompt"], info[TOKENS_INFO_KEY]["completion"])
            return cls(
                task_id=str(data["task_id"]),
                domain=domain,
                trial=data.get("trial"),
                termination_reason=info.get(TERMINATION_INFO_KEY) or data["termination_reason"],
                tau2_reward=reward_info.get("reward"),
                messages=messages,
                format_events=list(format_events),
                format_events_recorded=recorded,
                prompt_tokens=usage[0] if prompt_tokens is None else prompt_tokens,
                completion_tokens=usage[1] if completion_tokens is None else completion_tokens,
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise TrajectoryLoadError(f"not a tau2 SimulationRun: {_short(exc)}") from exc

    @classmethod
    def load_results(cls, path: str | Path) -> list[Trajectory]:
        """All simulations of a tau2 results JSON (as `tau2 run` writes it)."""
        data = _read_json(path)
        if not (isinstance(data, dict) and "simulations" in data):
            raise TrajectoryLoadError(f"{path}: not a tau2 results JSON (no 'simulations')")
        return load_trajectories(path)

    @cached_property
    def agent_calls(self) -> list[AgentCall]:
        """Every assistant tool call in order, paired with its result."""
        return self._calls("assistant")

    @cached_property
    def user_calls(self) -> list[AgentCall]:
        """Every tool call of the user (telecom's user acts on their phone) in order, with its result."""
        return self._calls("user")

    def _calls(self, role: str) -> list[AgentCall]:
        calls = []
        for turn, msg in enumerate(self.messages):
            if msg.role == role and msg.tool_calls:
                results = _results_after(self.messages, turn)
                calls.extend(AgentCall(turn, call, _outcome(call, i, results)) for i, call in enumerate(msg.tool_calls))
        return calls

    @property
    def assistant_turns(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m.role == "assistant"]


class Tau2File(NamedTuple):
    """The simulations of one tau2 file, its domain, and the agent model it names (None if none);
    a results file's own `info` and embedded `tasks` (as JSON) too."""

    format: Literal["results", "list", "simulation"]
    domain: str
    agent: str | None
    simulations: list[dict]
    info: dict | None = None
    tasks: list | None = None


def read_tau2_file(path: str | Path, domain: str | None = None,
                   infer: Callable[[list[dict]], str | None] | None = None) -> Tau2File:
    """A tau2 results JSON (as `tau2 run` writes it), a JSON list of SimulationRuns or a single
    SimulationRun, gzip-compressed or not. `domain` is used where the file does not name one (a
    list, a SimulationRun, a results file without info.environment_info.domain_name) and is an
    error where it contradicts the file. Where the file names none, `infer` (its simulations ->
    the one domain their tasks and tools tell, or None) gives it, and a `domain` it contradicts is
    an error. The pinned tau2 writes no directory format (one file per simulation): a directory
    is refused."""
    if Path(path).is_dir():
        raise TrajectoryLoadError(f"{path}: a directory; the pinned tau2 writes one results JSON per run, "
                                  "not a file per simulation: pass the files")
    data = _read_json(path)
    if isinstance(data, dict) and "simulations" in data:
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        agent = (info.get("agent_info") or {}).get("llm")
        named = (info.get("environment_info") or {}).get("domain_name")
        tasks = data.get("tasks") if isinstance(data.get("tasks"), list) else None
        sims = _simulations(path, data["simulations"])
        return Tau2File("results", _domain(path, named, domain, None if named else _inferred(infer, sims)), agent,
                        sims, info, tasks)
    if isinstance(data, list) and all(isinstance(s, dict) and "messages" in s for s in data):
        return Tau2File("list", _domain(path, None, domain, _inferred(infer, data)), None, data)
    if isinstance(data, dict) and "messages" in data:
        return Tau2File("simulation", _domain(path, None, domain, _inferred(infer, [data])), None, [data])
    raise TrajectoryLoadError(f"{path}: neither a tau2 results JSON nor a SimulationRun JSON "
                              "(nor a JSON list of SimulationRuns)")


def load_trajectories(path: str | Path, domain: str | None = None) -> list[Trajectory]:
    """The trajectories of a tau2 file (`read_tau2_file`)."""
    found = read_tau2_file(path, domain)
    return [Trajectory.from_simulation(sim, found.domain) for sim in found.simulations]


def _inferred(infer: Callable[[list[dict]], str | None] | None, sims: list[dict]) -> str | None:
    return infer(sims) if infer is not None else None


def _domain(path: str | Path, named: str | None, given: str | None, inferred: str | None = None) -> str:
    """The file's domain: the one it names, else the one given, else the one its tasks and tools
    tell; a given one that contradicts the file is an error."""
    if named and given and named != given:
        raise TrajectoryLoadError(f"{path}: results are for domain {named!r}, not {given!r}: drop --domain "
                                  "(the file names its own)")
    if inferred and given and inferred != given:
        raise TrajectoryLoadError(f"{path}: its tasks and tools are the {inferred} domain's, not {given!r}: "
                                  "drop --domain or pass the file's own")
    if not (named or given or inferred):
        raise TrajectoryLoadError(f"{path}: the file does not name its domain (no info.environment_info.domain_name) "
                                  "and its tasks and tools do not tell one; pass --domain")
    return named or given or inferred


def _simulations(path: str | Path, sims: Any) -> list[dict]:
    if not (isinstance(sims, list) and all(isinstance(s, dict) for s in sims)):
        raise TrajectoryLoadError(f"{path}: 'simulations' is not a list of SimulationRuns")
    return sims


def transferred(traj: Trajectory) -> bool:
    """The agent called transfer_to_human_agents, whatever the tool returned."""
    return any(c.call.name == TRANSFER_TOOL for c in traj.agent_calls)


def _read_json(path: str | Path) -> Any:
    """A JSON file, gzip-compressed when its name ends in .gz."""
    try:
        raw = Path(path).read_bytes()
        return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TrajectoryLoadError(f"{path}: cannot read JSON: {_short(exc)}") from exc


def _flatten(messages: list[dict]) -> Iterable[dict]:
    for msg in messages:
        if msg["role"] == "tool" and "tool_messages" in msg:  # MultiToolMessage
            yield from msg["tool_messages"]
        else:
            yield msg


def _usage(messages: list[dict]) -> tuple[int, int]:
    prompt = completion = 0
    for msg in messages:
        usage = msg.get("usage") if msg["role"] == "assistant" else None
        if usage:
            prompt += usage.get("prompt_tokens") or 0
            completion += usage.get("completion_tokens") or 0
    return prompt, completion


def _results_after(messages: list[Msg], turn: int) -> list[Msg]:
    results = []
    for msg in messages[turn + 1 :]:
        if msg.role != "tool":
            break
        results.append(msg)
    return results


def _outcome(call: Call, position: int, results: list[Msg]) -> bool | None:
    """Pair by call id when one matches, else by position (tau2 answers calls in order)."""
    match = next((r for r in results if call.id and r.id == call.id), None)
    if match is None and position < len(results):
        match = results[position]
    return None if match is None else not match.error


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(map(str, err['loc']))}: {err['msg']}"
    return str(exc)
