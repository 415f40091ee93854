"""What one episode cost (handoff.records.Cost): tokens of agent and user, litellm's price of an API
model's (or None with the reason; never a made-up price), engine- and GPU-seconds of a local engine's,
and the episode's wall time by who it waited for (agent, user simulator, tools)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from tau2.data_model.message import UserMessage

from handoff.records import LOCAL_ENGINE, Cost

WALL_PARTS = ("agent", "user", "tool")


class PartClock:
    """Seconds spent in each part of an episode: `timed(part, fn)` wraps a callable to count its time."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    def timed(self, part: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - started

        return wrapper


def time_parts(agent, user, environment) -> PartClock:
    """A clock of the agent's and user's turns and the tools' answers (tau2's Orchestrator calls
    generate_next_message and Environment.get_response, here wrapped on these instances)."""
    clock = PartClock()
    agent.generate_next_message = clock.timed("agent", agent.generate_next_message)
    user.generate_next_message = clock.timed("user", user.generate_next_message)
    environment.get_response = clock.timed("tool", environment.get_response)
    return clock


def price(llm: str, prompt_tokens: int, completion_tokens: int) -> tuple[float | None, str | None]:
    """litellm's price of these tokens from its cost map, or (None, why) when it has none."""
    from litellm import cost_per_token

    try:
        prompt_usd, completion_usd = cost_per_token(model=llm, prompt_tokens=prompt_tokens,
                                                    completion_tokens=completion_tokens)
    except Exception as exc:  # noqa: BLE001 - litellm raises for a model it cannot price
        return None, f"litellm has no price for {llm}: {str(exc).splitlines()[0][:200]}"
    return float(prompt_usd + completion_usd), None


def api_user_usage(user, messages) -> dict:
    """Tokens and price of tau2's litellm user simulator, from the usage on its messages."""
    usages = [m.usage or {} for m in messages if isinstance(m, UserMessage)]
    prompt = sum(u.get("prompt_tokens") or 0 for u in usages)
    completion = sum(u.get("completion_tokens") or 0 for u in usages)
    usd, note = price(user.llm, prompt, completion)
    return {"prompt": prompt, "completion": completion, "usd": usd, "note": note}


def episode_cost(log, user, messages, clock: PartClock, replica_gpus: int, api_agent: bool) -> Cost:
    """The Cost of an episode whose agent kept `log` (AgentLog) and whose user is `user`."""
    on_engine = hasattr(user, "request_s")  # handoff.agent.user.EngineUserSimulator
    user_side = {"user_engine_s": user.request_s, "user_prompt_tokens": user.prompt_tokens,
                 "user_cached_tokens": user.cached_prompt_tokens, "user_usd_note": LOCAL_ENGINE} if on_engine else \
        _api_user(api_user_usage(user, messages))
    agent_engine_s = 0.0 if api_agent else log.request_s
    agent_side = {"agent_usd": log.cost_usd, "agent_usd_note": log.cost_note} if api_agent else \
        {"agent_usd_note": LOCAL_ENGINE, "agent_engine_s": agent_engine_s}
    engine_s = agent_engine_s + user_side.get("user_engine_s", 0.0)
    return Cost(agent_cached_tokens=log.cached_prompt_tokens, gpu_s=engine_s * replica_gpus,
                **{f"{part}_s": clock.seconds[part] for part in WALL_PARTS}, **agent_side, **user_side)


def _api_user(usage: dict) -> dict:
    return {"user_prompt_tokens": usage["prompt"], "user_usd": usage["usd"], "user_usd_note": usage["note"]}


def user_completion_tokens(user, messages) -> int:
    """The user simulator's generated tokens: an engine's count, or the usage on tau2's litellm user's messages."""
    if hasattr(user, "completion_tokens"):
        return user.completion_tokens
    return sum((m.usage or {}).get("completion_tokens") or 0 for m in messages if isinstance(m, UserMessage))
