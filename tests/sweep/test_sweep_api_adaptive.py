"""Adaptive rounds with an API model in the set: the API agent (through litellm, against a local
double that always says goodbye: it never hands off) beside a scripted known-answer checkpoint that
is always right; the rounds run and decide both alike (8 retail tasks are too few to call them apart
at margin 0: both stay undecided and run both rounds)."""

from __future__ import annotations

import pytest

import handoff  # noqa: F401
from bench.scripted import model_path
from handoff.report.adaptive import recorded_rounds
from handoff.rundir import RunPaths
from handoff.sweep.run import compose, run_sweep
from handoff.testing.openai_server import FaultServer, chat_completion


@pytest.mark.ray
def test_adaptive_rounds_with_an_api_model(ray_cluster, tmp_path):
    (tmp_path / "ckpts" / "global_step_1").mkdir(parents=True)
    run_dir = tmp_path / "run"
    with FaultServer([(200, chat_completion({"content": "Goodbye."}))]) as double:
        overrides = [
            "engine=scripted", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=8", "shard_size=4",
            "workers.processes=1", "workers.threads=4", "model=[api,checkpoints]", "model.api.name=api-double",
            "model.api.llm=hosted_vllm/double", f"+model.api.llm_args.api_base={double.url}",
            f"model.checkpoints.glob={tmp_path}/ckpts/global_step_*", f"model.checkpoints.tokenizer={model_path()}",
            "model.checkpoints.chat_template=hermes", "+engine.script.accuracy={policy-step1: 1.0}",
            "user=litellm", "user.llm=hosted_vllm/double", f"+user.llm_args.api_base={double.url}",
            "episode.max_steps=4", "adaptive.enabled=true", "adaptive.margin=0", "adaptive.max_trials=2",
            "logger.mode=disabled", f"run_dir={run_dir}"]
        _, summary = run_sweep(compose(overrides), overrides, progress=False)
        assert double.requests > 0
    rounds = recorded_rounds(RunPaths(run_dir).read_manifest())
    assert [r.round for r in rounds] == [1, 2]
    for r in rounds:  # the API model has its verdict in each round, as the checkpoint has
        assert {name: v.episodes for name, v in r.verdicts.items()} == {"api-double": 8 * r.round,
                                                                        "policy-step1": 8 * r.round}
    assert summary.shards_failed == [] and summary.episodes_done == summary.episodes_total == 32
