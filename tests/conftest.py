"""Shared by every test: the process is prepared for tau2 (importing `handoff` does it) and the
fixtures more than one test module uses. Test helpers live in `tests/support/`; fixtures that bench/
and the tiny-model build also need live in `handoff.testing`."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

import handoff  # noqa: F401  (litellm's local cost map, quiet loguru: before tau2 is imported)

# Every Ray in the tests runs without token auth, this process's drivers included. Left unset, the first
# local ray.init() switches this process to token auth for good (Ray sets RAY_AUTH_MODE=token here);
# a driver in token mode then rejects the calls of a cluster started with auth disabled
# (tests/support/cluster.py), and that cluster's GCS destroys every actor the driver creates before it
# starts ("all references to the actor were removed").
os.environ["RAY_AUTH_MODE"] = "disabled"
# Nor does any Ray of the tests prestart idle workers for its first driver (as handoff.sweep.session.ray_cluster's
# embedded cluster does not) or collect metrics, which no test reads: on an idle local Ray of 2 CPUs, the
# two together cut the start from 6.2 to 3.8 CPU s and the daemons' idling from 3.4 to 1.7 CPU s a minute.
os.environ["RAY_prestart_worker_first_driver"] = "0"
os.environ["RAY_enable_metrics_collection"] = "0"


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for one module: 2 CPUs, a small object store, a short temp dir (AF_UNIX
    paths over 107 bytes fail), shut down afterwards. Never `ray stop`: it kills every Ray on the
    machine."""
    import ray

    tmp = tempfile.mkdtemp(prefix="rh-", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=128 << 20, _temp_dir=tmp,
             log_to_driver=False, namespace="handoff")
    yield ray
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_engine():
    """One in-process vLLM engine serving tiny-hermes (8192-token window, seed 0), started once for every
    real-engine test that asks for it (tests/engine/test_engine.py, tests/agent/test_agent_real_engine.py):
    one engine start instead of one per module. Closed at the end of the session."""
    from handoff.engine.models import TINY, ensure
    from handoff.engine.vllm_engine import EngineSettings, VLLMEngine

    engine = VLLMEngine(EngineSettings(model=str(ensure(TINY)), max_model_len=8192, seed=0))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def smollm2_engine():
    """One in-process vLLM engine serving SmolLM2-135M (8192-token window), loaded as on an AVX2-only CPU
    (no AVX512-BF16 or AMX in the flags it reads): in float32 on every machine. Shared by the SmolLM2
    float32 smoke test (tests/engine/test_engine.py) and the SmolLM2 episodes
    (tests/agent/test_agent_real_engine.py): one engine start instead of two."""
    from handoff.engine.cpu import proc_flags
    from handoff.engine.models import SMOLLM2, ensure
    from handoff.engine.vllm_engine import EngineSettings, VLLMEngine

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("handoff.engine.cpu.kernel_flags", lambda: proc_flags("flags\t: avx avx2 fma"))
        engine = VLLMEngine(EngineSettings(model=str(ensure(SMOLLM2)), max_model_len=8192))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_hermes_server(tmp_path_factory):
    """vLLM's own OpenAI server (CPU build) serving tiny-hermes with its Hermes tool parser on a free
    port (handoff.testing.openai_server.vllm_server), started once for every real-engine test that asks
    for it (tests/agent/test_api_agent.py, tests/sweep/test_sweep_api.py: one group under xdist's
    loadgroup, so one worker and one server); yields its base URL. Stopped at the end of the session."""
    from handoff.engine.models import TINY, ensure, is_built
    from handoff.testing.openai_server import vllm_server

    if not is_built(TINY):
        pytest.skip("tiny-hermes is not built (python -m handoff.engine.models tiny)")
    pytest.importorskip("vllm")
    with vllm_server(ensure(TINY), "tiny-hermes", log=tmp_path_factory.mktemp("vllm") / "server.log") as url:
        yield url


@pytest.fixture(scope="module")
def tasks():
    """Two labelled airline and retail tasks of every rule, for synthetic runs."""
    from handoff.testing.synthetic import sample_tasks

    return sample_tasks(2)


def xdist_group(item: pytest.Item) -> str:
    """Every real-engine test in one group, so that two vLLM engines never share the 2 CPUs; any other
    test with its module, so that module fixtures (a local Ray, a multi-node cluster) start once."""
    return "real_engine" if item.get_closest_marker("real_engine") else item.nodeid.split("::")[0]


def send_order(items: list) -> list:
    """The items in the order their groups go to the workers, longest work first: the real-engine
    group (the suite's longest chain: one worker runs it from the start, the other everything else
    beside it), then the groups with a test marked slow, then those that start Ray, then the rest;
    collection order within each. A group's tests stay together and in their order."""
    rank: dict[str, int] = {}
    for item in items:
        group = xdist_group(item)
        mine = 0 if group == "real_engine" else 1 if item.get_closest_marker("slow") else \
            2 if item.get_closest_marker("ray") else 3
        rank[group] = min(rank.get(group, 3), mine)
    return sorted(items, key=lambda item: rank[xdist_group(item)])


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """`make test` runs two pytest-xdist workers with --dist loadgroup: each worker takes whole groups,
    in the order of send_order (the Makefile's --no-loadscope-reorder keeps pytest-xdist from sorting
    them by their number of tests instead). A serial run keeps the collection order."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its collection is what the scheduler sends
        items[:] = send_order(items)
