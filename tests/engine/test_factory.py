"""One engine interface (handoff.engine.base.AsyncEngine) for every engine kind, built by one factory
(handoff.engine.factory): both kinds have its members, of its kinds (coroutine, property, function);
the scripted engine works behind it; and each kind declares what the sweep asks of it."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import pytest

from bench.scripted import model_path
from handoff.engine.base import AsyncEngine, Sampling
from handoff.engine.factory import KINDS, build_engine, one_engine
from handoff.engine.scripted import ScriptedReplay
from handoff.engine.vllm_engine import AsyncVLLMEngine

SCRIPT = {"agent": ["I will transfer you now."], "user": ["I want a human."]}


def _checkpoint(name: str = "a", path: str | None = None) -> SimpleNamespace:
    """A ModelRef, as the sweep's Checkpoint gives it."""
    return SimpleNamespace(name=name, path=path or model_path(), tokenizer=None, max_model_len=8192)


def _scripted(**script) -> SimpleNamespace:
    """The attributes of the sweep's engine group that the factory reads."""
    return SimpleNamespace(kind="scripted", max_num_seqs=2, script={**SCRIPT, **script})


def test_both_engine_kinds_implement_the_async_engine_interface():
    declared = {name: member for name, member in vars(AsyncEngine).items() if not name.startswith("_")}
    assert set(declared) == {"generate", "stats", "reload", "shutdown", "dead", "describe"}
    for cls in (AsyncVLLMEngine, ScriptedReplay):
        for name, member in declared.items():
            found = getattr(cls, name, None)
            assert type(found) is type(member), f"{cls.__name__}.{name}: {found!r}, declared {member!r}"
            assert inspect.iscoroutinefunction(found) == inspect.iscoroutinefunction(member), f"{cls.__name__}.{name}"


def test_the_scripted_engine_serves_behind_the_interface():
    async def main():
        engine = await build_engine(_checkpoint(), _scripted(), "agent")
        prompt = engine.tokenizer.encode("<|im_start|>system\nhi<|im_end|>\n<|im_start|>assistant\n")
        generation = await engine.generate(prompt, Sampling(max_tokens=64), "retail/t-1-ab12/cd34")
        stats = await engine.stats()
        reloaded = await engine.reload(_checkpoint("b"))
        await engine.shutdown()
        return engine, prompt, generation, stats, reloaded

    engine, prompt, generation, stats, reloaded = asyncio.run(main())
    assert isinstance(engine, AsyncEngine) and isinstance(engine, ScriptedReplay)
    assert (generation.text, generation.finish_reason, generation.cached_prompt_tokens) == (
        "I will transfer you now.", "stop", 0)
    assert (stats.requests, stats.prompt_tokens, stats.cached_prompt_tokens, stats.generated_tokens) == (
        1, len(prompt), 0, len(generation.token_ids))
    assert not reloaded, "a scripted replica never reloads in place: the host builds a new one"
    assert not engine.dead and engine.describe() is None


def test_a_scripted_load_fails_where_fail_load_matches_role_and_checkpoint():
    engine = _scripted(fail_load="^user/a$")
    assert asyncio.run(build_engine(_checkpoint("a"), engine, "agent")).checkpoint.name == "a"
    with pytest.raises(RuntimeError, match="scripted load failure of user/a"):
        asyncio.run(build_engine(_checkpoint("a"), engine, "user"))


def test_engine_kinds_declare_what_the_sweep_asks_of_them():
    vllm, scripted = KINDS["vllm"], KINDS["scripted"]
    assert vllm.loads_weights and not scripted.loads_weights
    assert scripted.reads_script and not vllm.reads_script
    plain, shared = _scripted(), _scripted(share_user_engine=True)
    a, b = _checkpoint("a", "/m"), _checkpoint("b", "/m")
    assert one_engine(a, a, plain) and not one_engine(a, b, plain), "a plain replay answers in its own name"
    assert one_engine(a, b, shared) and not one_engine(a, _checkpoint("c", "/other"), shared)
    assert not scripted.shares_user_engine(plain) and scripted.shares_user_engine(shared)
    assert scripted.env(a, plain) == {}
    assert scripted.script_problems({**SCRIPT, "accuracy": {"z": 0.5}}, {"a"}) == [
        "engine.script.accuracy.z: no checkpoint of the sweep is named so (a)"]
    assert vllm.script_problems(None, {"a"}) == []
