"""API models in a sweep's config and plan, without Ray: `model=api` validates into a checkpoint with
no engine; a missing key fails before anything starts; several API models in one sweep; the engine
planning reserves nothing for them (no GPU refused); their episodes run at most `concurrency` at once."""

from __future__ import annotations

from collections import deque

import pytest

import handoff  # noqa: F401
from handoff.sweep.api_schedule import ApiPlacement
from handoff.sweep.config import API_PATH, ConfigError, checkpoints, user_checkpoint, validate
from handoff.sweep.driver import ShardState, check_resources
from handoff.sweep.plan import Episode, Shard
from handoff.sweep.pool import EnginePool
from handoff.sweep.run import compose

BASE = ["engine=scripted", "user=litellm", "user.llm=hosted_vllm/user", "+user.llm_args.api_base=http://127.0.0.1:1/v1"]


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0000")


def sweep(tmp_path, *overrides: str):
    return validate(compose([f"run_dir={tmp_path}/run", *BASE, *overrides]))


def test_an_api_model_is_a_checkpoint_without_an_engine(tmp_path):
    cfg = sweep(tmp_path, "model=[api,tiny_hermes]", "model.api.concurrency=3", "+model.api.llm_args.api_base=http://h/v1")
    api, local = sorted(checkpoints(cfg), key=lambda c: c.api is None)
    assert api.name == "gpt-4.1" and api.path == f"{API_PATH}gpt-4.1" and api.api.concurrency == 3
    assert api.api.llm_args == {"api_base": "http://h/v1"} and api.api.parallel_tool_calls is False
    assert local.api is None and "api" not in local.model_dump(mode="json")  # old manifests' checkpoints match


def test_several_api_models_in_one_sweep(tmp_path):
    cfg = sweep(tmp_path, "model=[api]", "+model.claude={name: claude, llm: anthropic/claude-sonnet-4-20250514}")
    assert sorted((c.name, c.api.llm) for c in checkpoints(cfg)) == [
        ("claude", "anthropic/claude-sonnet-4-20250514"), ("gpt-4.1", "gpt-4.1")]


def test_a_missing_key_fails_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigError, match=r"model\.api\.llm: gpt-4\.1 needs OPENAI_API_KEY in the environment"):
        sweep(tmp_path, "model=[api]")
    sweep(tmp_path, "model=[api]", "+model.api.llm_args.api_key=${oc.env:MY_KEY,sk-none}")  # a key passed: accepted


def test_an_api_model_gives_exactly_one_source(tmp_path):
    with pytest.raises(ConfigError, match="give exactly one of path, paths, glob, llm"):
        sweep(tmp_path, "model=[api]", "+model.api.path=/models/x")


@pytest.mark.parametrize("user", [[], ["user=smollm2"]], ids=["api user", "engine user"])
def test_engine_planning_reserves_nothing_for_api_models(tmp_path, user):
    cfg = sweep(tmp_path, "model=[api]", "engine=gpu", *user)
    engine_ckpts = [c for c in checkpoints(cfg) if c.api is None]
    pool = EnginePool(cfg, engine_ckpts, user_checkpoint(cfg), placement=None)
    assert pool.engine_sets() == (1 if user else 0)
    if not user:  # no GPU anywhere, and nothing refused: no engine needs one
        check_resources(cfg, pool.engine_sets(), cpus=2, gpus=0, node_gpus=0, node_cpus=2)
    else:
        with pytest.raises(ConfigError, match="GPUs"):
            check_resources(cfg, pool.engine_sets(), cpus=2, gpus=0, node_gpus=0, node_cpus=2)


class Inner:
    """A stand-in engine placement: hands out its queue, counts what it is told."""

    def __init__(self, n: int):
        self.queue, self.finished_slots, self.requeued = deque(range(n)), [], []

    def has_work(self):
        return bool(self.queue)

    def take(self, n, alive):
        out = []
        while self.queue and len(out) < n:
            out.append(("st", self.queue.popleft(), "engines", "engine-slot"))
        return out

    def finished(self, slot, record):
        self.finished_slots.append(slot)

    def requeue(self, st, ep):
        self.requeued.append(ep)

    def engine_sets(self):
        return ["an engine set"]


def _states(name: str, n: int) -> deque:
    eps = [Episode(model=name, step=0, domain="airline", task_id=str(i), trial=0, seed=i) for i in range(n)]
    st = ShardState(Shard(id=f"{name}-0", model=name, domain="airline", trial=0, episodes=eps), {})
    return deque((st, ep) for ep in eps)


def test_api_episodes_run_within_concurrency_beside_the_engine_placement(tmp_path):
    cfg = sweep(tmp_path, "model=[api]", "model.api.concurrency=2",
                "+model.other={name: other, llm: gpt-4.1-mini, concurrency: 1}")
    ckpts = checkpoints(cfg)
    inner = Inner(3)
    placement = ApiPlacement(ckpts, {c.name: _states(c.name, 4) for c in ckpts}, inner)
    first = placement.take(10, set())
    api = [t for t in first if t[3] != "engine-slot"]
    assert sorted(t[1].model for t in api) == ["gpt-4.1", "gpt-4.1", "other"]  # each within its concurrency
    assert all(t[2].replicas == [] and t[2].checkpoint.api for t in api)  # no engine replica for them
    assert len(first) - len(api) == 3 and placement.engine_sets() == ["an engine set"]
    assert placement.take(10, set()) == []  # full: nothing more until one finishes
    placement.finished(api[0][3], None)
    placement.requeue(api[0][0], api[0][1])
    again = placement.take(10, set())
    assert [(t[1].model, t[1].task_id) for t in again] == [(api[0][1].model, api[0][1].task_id)]
    placement.finished("engine-slot", None)
    assert inner.finished_slots == ["engine-slot"] and placement.has_work()
