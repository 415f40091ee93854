"""In-place weight reload (AsyncVLLMEngine.reload; a rolling sweep's engine slot moving on to a
checkpoint of the same architecture): greedy outputs after a reload equal a fresh engine's."""

from __future__ import annotations

import pytest

from handoff.engine import models
from handoff.engine.base import Sampling
from handoff.engine.vllm_engine import EngineSettings, VLLMEngine, reloadable
from handoff.sweep.engines import light_tokenizer
from handoff.testing.checkpoints import perturbed_copy
from tests.engine.test_engine import need

PROMPTS = ["What is 17 times 3?", "Write a haiku about refunds."]


def settings(path: str, **over) -> EngineSettings:
    return EngineSettings(**{"model": path, "max_model_len": 512, "max_num_seqs": 4, **over})


def outputs(engine: VLLMEngine, tok) -> list[list[int]]:
    return [engine.generate(tok.encode(p), Sampling(max_tokens=12)).token_ids for p in PROMPTS]


@pytest.mark.real_engine
def test_outputs_after_in_place_reload_equal_a_fresh_engines(tmp_path):
    base = need(models.SMOLLM2)  # tied embeddings: vLLM-CPU's packed lm_head must be repacked
    other = perturbed_copy(base, tmp_path / "perturbed")
    tok = light_tokenizer(base)
    with VLLMEngine(settings(other)) as engine:
        fresh = outputs(engine, tok)
    with VLLMEngine(settings(base)) as engine:
        before = outputs(engine, tok)  # these prompts' blocks are in the prefix cache now
        engine.reload(settings(other))
        reloaded = outputs(engine, tok)
    assert before != fresh, "the perturbed checkpoint should answer differently"
    assert reloaded == fresh


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
