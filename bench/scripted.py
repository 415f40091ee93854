"""The scripted agent and user of the throughput benchmark, for both runners.

Both runners run the very same code: handoff's HandoffAgent and EngineUserSimulator over the
sweep's scripted engine (`handoff.engine.scripted.ScriptedReplay`, the script of
conf/engine/scripted.yaml) called in-process with zero latency. For tau2's own runner they are
registered in tau2's registry under AGENT and USER (tau2.run.run_task builds LLMAgent
subclasses with (tools, domain_policy, llm, llm_args) and users with (tools, instructions, llm,
llm_args)).
"""

from __future__ import annotations

import asyncio
import os
import threading
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import yaml

ROOT = Path(__file__).resolve().parents[1]
AGENT, USER = "handoff_scripted_agent", "handoff_scripted_user"
MAX_CONTEXT = 8192


def model_path() -> str:
    cache_dir = os.environ.get("HANDOFF_CACHE", str(Path.home() / ".cache/handoff"))
    return f"{cache_dir}/models/smollm2-135m-instruct"


class ZeroLatencyScripted:
    """The sweep's scripted engine (completion chosen from the prompt), called synchronously."""

    def __init__(self, role: str):
        from handoff.engine.scripted import ScriptConfig, ScriptedReplay

        script = yaml.safe_load((ROOT / "conf/engine/scripted.yaml").read_text())["script"]
        checkpoint = SimpleNamespace(name="scripted", tokenizer=None, path=model_path())
        self.replay = ScriptedReplay(checkpoint, ScriptConfig(**script), role)

    def generate(self, prompt_ids, sampling, session_id=None):
        return asyncio.run(self.replay.generate(prompt_ids, sampling, session_id or ""))


_lock = threading.Lock()


@cache
def _shared(name: str):
    """Tokenizer-holding objects built once per process (tokenizer loading is not thread-safe)."""
    from handoff.engine.chat import ChatFormat

    if name == "chat":
        chat = ChatFormat(model_path(), "hermes")
        chat.render([{"role": "user", "content": "warm up"}])
        return chat
    return ZeroLatencyScripted(name)


def shared(name: str):
    with _lock:
        return _shared(name)


def settings():
    from handoff.agent.episode import EpisodeSettings

    return EpisodeSettings(max_steps=12, max_errors=4)


def make_user(task, session_id: str | None = None):
    from handoff.agent.user import UserSpec
    from handoff.agent.user import make_user as make

    return make(UserSpec(), task, engine=shared("user"), chat=shared("chat"), session_id=session_id)


def register_in_tau2() -> None:
    """Register the scripted agent and user in tau2's registry (idempotent)."""
    from tau2.agent.llm_agent import LLMAgent
    from tau2.registry import registry

    from handoff.agent.handoff_agent import HandoffAgent
    from handoff.agent.user import EngineUserSimulator

    class ScriptedHandoffAgent(HandoffAgent, LLMAgent):
        def __init__(self, tools, domain_policy, llm=None, llm_args=None):
            s = settings()
            HandoffAgent.__init__(self, tools, domain_policy, shared("agent"), shared("chat"),
                                  s.agent_sampling, s.max_context_tokens, s.tool_parser)

    class ScriptedUser(EngineUserSimulator):
        def __init__(self, tools=None, instructions=None, llm=None, llm_args=None):
            from handoff.agent.user import UserSpec

            spec = UserSpec()
            super().__init__(shared("user"), shared("chat"), instructions, spec.sampling,
                             spec.max_context_tokens, tools)

    with _lock:
        if AGENT not in registry.get_agents():
            registry.register_agent(ScriptedHandoffAgent, AGENT)
        if USER not in registry.get_users():
            registry.register_user(ScriptedUser, USER)
