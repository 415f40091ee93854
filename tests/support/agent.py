"""Shared by the agent tests: the SmolLM2 tokenizer with the Hermes template, scripted episodes."""

from __future__ import annotations

import json
from functools import cache

import handoff  # noqa: F401  (environment for tau2 before it is imported)
from handoff.agent.episode import EpisodeResult, EpisodeSettings, run_episode
from handoff.agent.user import UserSpec, make_user
from handoff.engine.base import Sampling
from handoff.engine.chat import ChatFormat
from handoff.engine.models import SMOLLM2, ensure
from handoff.engine.scripted import Scripted, ScriptedEngine
from handoff.tasks import get_task

AIRLINE_USER = "mia_li_3668"  # the user of airline task 0
MAX_CONTEXT = 8192


@cache
def chat() -> ChatFormat:
    return ChatFormat(str(ensure(SMOLLM2)))


def call(name: str, arguments) -> str:
    """A well-formed Hermes tool call."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def settings(**overrides) -> EpisodeSettings:
    values = {"max_steps": 30, "agent_sampling": Sampling(max_tokens=64), "max_context_tokens": 8192}
    return EpisodeSettings(**{**values, **overrides})


def scripted(completions: list[str | Scripted]) -> ScriptedEngine:
    return ScriptedEngine(chat().tokenizer, completions)


def run(agent_script, user_script, domain="airline", task_id="0", seed=7, **overrides) -> EpisodeResult:
    """One episode of the scripted agent against the scripted user (on the engine user simulator)."""
    task = get_task(domain, task_id)
    user = make_user(UserSpec(), task, engine=scripted(user_script), chat=chat(), domain=domain)
    return run_episode(domain, task, scripted(agent_script), chat(), user, settings(**overrides), seed)


API_USER_LINES = ["Hi, I need help with my reservation.", f"My user id is {AIRLINE_USER}.", "Thanks.", "###STOP###"]


def api_episode(url: str, llm: str = "hosted_vllm/tiny-hermes", user_lines=API_USER_LINES, max_steps: int = 10,
                task_id: str = "0", **api) -> EpisodeResult:
    """One airline episode of the API agent (handoff.agent.api_agent) at `url` (an OpenAI-compatible
    server) against the scripted user (an engine user); `api`: ApiModelSettings' other fields."""
    from handoff.settings import ApiModelSettings

    task = get_task("airline", task_id)
    user = make_user(UserSpec(), task, engine=scripted(user_lines), chat=chat())
    settings = ApiModelSettings(llm=llm, llm_args={"api_base": url}, **api)
    return run_episode("airline", task, None, None, user,
                       EpisodeSettings(max_steps=max_steps, agent_sampling=Sampling(max_tokens=64), api=settings),
                       seed=1)


def kinds(result: EpisodeResult) -> list[tuple[str, int]]:
    return [(e.kind.value, e.turn) for e in result.format_events]


def comparable(messages) -> list[tuple]:
    """Messages without timestamps: what must be identical between two runs of one script."""
    out = []
    for m in messages:
        calls = [(c.id, c.name, c.arguments) for c in getattr(m, "tool_calls", None) or []]
        out.append((m.role, m.content, calls, getattr(m, "error", None), getattr(m, "id", None)))
    return out


LOOKUP = call("get_user_details", {"user_id": AIRLINE_USER})
TRANSFER = call("transfer_to_human_agents", {"summary": "The user asks for a human agent."})

CASES = {  # airline task 0: a clean episode and each kind of unusable turn (the parity cases)
    "clean with transfer": ([LOOKUP, TRANSFER, "You will be transferred."], ["Hi, get me a human.", "###STOP###"]),
    "unparsed, unknown tool, rejected args": (
        ['<tool_call>{"name": "get_user_', call("fly", {}), call("get_reservation_details", {"id": 1}), "Bye."],
        ["Hi.", "Ok.", "###STOP###"],
    ),
    "truncated": ([LOOKUP, Scripted(text="Let me", truncated=True)], ["Hi.", "###STOP###"]),
    "empty": ([LOOKUP, ""], ["Hi.", "###STOP###"]),
    "non-object arguments": ([call("get_user_details", [AIRLINE_USER])], ["Hi.", "###STOP###"]),
    "context overflow": ([LOOKUP] * 3, ["Hi.", "More.", "###STOP###"]),
}


def max_context(name: str) -> int:
    # room for the first two turns only: the third prompt no longer fits
    return 5900 if name == "context overflow" else MAX_CONTEXT


def reducer_scores(tmp_path, records):
    """The reducer's ScoredEpisodes of these records (one run directory, one shard), in key order."""
    from handoff.report.reducer import reduce_run
    from handoff.testing.synthetic import write_records

    return reduce_run(write_records(tmp_path / "reduced-run", {"s0": records}, "scores")).episodes
