"""In-place weight reload (AsyncVLLMEngine.reload, the AsyncEngine's, and reload_weights under it; a
rolling sweep's engine slot moving on to a checkpoint of the same architecture): greedy outputs after
a reload equal a fresh engine's, with the prompt cached on the old weights and a request running
during the reload."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from handoff.engine import models
from handoff.engine.base import Sampling
from handoff.engine.scripted import light_tokenizer
from handoff.engine.vllm_engine import AsyncVLLMEngine, EngineSettings, RequestAborted, reloadable
from handoff.testing.checkpoints import perturbed_copy
from tests.engine.test_engine import need


def settings(path: str, **over) -> EngineSettings:
    return EngineSettings(**{"model": path, "max_model_len": 512, "max_num_seqs": 4, **over})


# ~600 tokens: several full KV blocks, which the prefix cache keeps (a partial block it does not)
POLICY = " ".join(f"Clause {i}: a refund for booking {1000 + i} is due within {i + 3} days of the request."
                  for i in range(30)) + " Summarize the policy."
COUNT = ", ".join(str(i) for i in range(1, 41)) + ","  # greedy SmolLM2 goes on counting: a long request


async def _answer(engine: AsyncVLLMEngine, prompt: list[int]) -> list[int]:
    return (await engine.generate(prompt, Sampling(max_tokens=12))).token_ids


async def _reload_while_a_request_runs(base: str, other: str, prompt: list[int], count: list[int]):
    """One engine: `prompt` answered on a fresh engine of `other`'s weights; reloaded to `base`, the
    prompt cached on base's weights while a long request runs; reloaded to `other` in place, `prompt`
    answered again. Returns (fresh, before, after, what became of the long request)."""
    engine = AsyncVLLMEngine(settings(other, max_model_len=2048))
    try:
        fresh = await _answer(engine, prompt)
        await engine.reload_weights(settings(base, max_model_len=2048))
        long = asyncio.ensure_future(engine.generate(count, Sampling(max_tokens=1500), "long"))
        while await engine._llm.reset_prefix_cache():  # vLLM resets only while no request holds blocks
            await asyncio.sleep(0.05)
        before = await _answer(engine, prompt)  # the prompt's blocks, of base's weights, are cached now
        checkpoint = SimpleNamespace(name="other", path=other, tokenizer=None, max_model_len=2048)  # a ModelRef
        assert await engine.reload(checkpoint), "the same architecture and settings reload in place"
        after = await _answer(engine, prompt)
        long_outcome = await asyncio.gather(long, return_exceptions=True)
        return fresh, before, after, long_outcome[0]
    finally:
        await engine.shutdown()


@pytest.mark.real_engine
def test_a_reload_aborts_running_requests_and_serves_no_stale_cache(tmp_path):
    """vLLM refuses to reset the prefix cache while a request runs: the reload aborts it first, and the
    prompt cached on the old weights is computed afresh on the new ones (before: the reset was
    refused without a word, and the new checkpoint answered from the old one's keys and values).
    The fresh answer comes from the same engine before its first reload: one engine start, not two."""
    base = need(models.SMOLLM2)
    other = perturbed_copy(base, tmp_path / "perturbed")
    tok = light_tokenizer(base)
    prompt, count = tok.encode(POLICY), tok.encode(COUNT)
    fresh, before, after, long = asyncio.run(_reload_while_a_request_runs(base, other, prompt, count))
    assert before != fresh, "the perturbed checkpoint should answer differently"
    assert isinstance(long, RequestAborted), long
    assert after == fresh


def test_reload_needs_same_settings_config_and_tokenizer(tmp_path):
    base = need(models.SMOLLM2)
    other = tmp_path / "other"
    other.mkdir()
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (other / f).write_bytes((models.model_dir(models.SMOLLM2) / f).read_bytes())
    assert reloadable(settings(base), settings(str(other)))
    assert not reloadable(settings(base), settings(str(other), max_num_seqs=8))
    assert not reloadable(settings(base), settings(need(models.TINY)))
    (other / "tokenizer_config.json").write_text("{}")
    assert not reloadable(settings(base), settings(str(other)))
