"""An API that is down for good (handoff.sweep.api_schedule.ApiOutages): the real driver on the
deterministic simulator's fake Ray and virtual clock (tests/support/sim.py), its API episodes run for
real by the API agent against a fault double that answers 503 to every request. Each ApiUnavailable
is resubmitted for free and keeps the model's outage clock running; past model.<key>.outage_s the
sweep ends with the model's shards failed as infrastructure, naming the model and the last error, and
no attempt charged; a resume once the API answers finishes them."""

from __future__ import annotations

import pytest

import handoff  # noqa: F401
from handoff.sweep.api_schedule import ApiOutages
from handoff.sweep.config import checkpoints, validate
from handoff.sweep.driver import Driver
from handoff.sweep.failures import ShardFailure
from handoff.sweep.plan import Episode, Shard
from handoff.sweep.run import compose
from handoff.sweep.rundir import SweepRun
from handoff.testing.openai_server import FaultServer, chat_completion
from tests.support import sim
from tests.support.agent import api_episode

OUTAGE_S = 120.0
UNAVAILABLE = (503, {"error": {"message": "overloaded", "type": "server_error"}})
BYE = (200, chat_completion({"content": "Goodbye."}))


@pytest.fixture(autouse=True)
def openai_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-double-0000")  # the double takes any key


def plan() -> list[Shard]:
    eps = [Episode(model="down", step=0, domain="airline", task_id=str(i), trial=0, seed=1) for i in range(4)]
    return [Shard(id=f"down-{i}", model="down", domain="airline", trial=0, episodes=eps[2 * i:2 * i + 2])
            for i in range(2)]


def sweep(run_dir, url: str):
    cfg = validate(compose([f"run_dir={run_dir}", "engine=scripted", "model=[api]", "model.api.name=down",
                            "model.api.llm=openai/double", f"+model.api.llm_args.api_base={url}",
                            "model.api.max_retries=1", "model.api.retry_backoff_s=0", f"+model.api.outage_s={OUTAGE_S}",
                            "model.api.concurrency=2", "workers.processes=1", "workers.threads=2",
                            "logger.mode=disabled"]))
    [api] = checkpoints(cfg)
    return cfg, api


def run_sweep(run_dir, url: str) -> tuple[sim.Sim, list]:
    """One sweep of plan() on the simulator; the episodes charged an attempt."""
    cfg, api = sweep(run_dir, url)
    shards = plan()
    schedule = sim.Schedule(0, 1, 2, 1, shards, {ep.key: sim.EpisodeSpec(1.0) for s in shards for ep in s.episodes})

    def episode(ep: dict) -> dict:
        result = api_episode(url, llm=api.api.llm, max_steps=4, task_id=ep["task_id"], max_retries=api.api.max_retries,
                             retry_backoff_s=api.api.retry_backoff_s)
        return result.to_record(ep["model"], step=ep["step"], trial=ep["trial"]).model_dump(mode="json")

    world = sim.Sim(schedule, "job", faults=False, bound_s=20 * OUTAGE_S, cfg=cfg, mode=sim.STAND_IN, api_episode=episode)
    driver = Driver(cfg, SweepRun(run_dir), [api], shards, progress=False, placement=sim.Placement(world))
    charged = []
    original = Driver._charge
    Driver._charge = lambda self, item, *a: (charged.append(item.episode.key), original(self, item, *a))[1]
    try:
        with sim.seams(world):
            driver.execute(ray=world)
    finally:
        Driver._charge = original
    return world, charged


def test_an_api_down_for_good_fails_its_shards_as_infrastructure_past_its_outage_bound(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with FaultServer([UNAVAILABLE]) as double:
        world, charged = run_sweep(run_dir, double.url)
    assert OUTAGE_S < world.now <= OUTAGE_S + 60  # the bound, then the next look and the probes in flight
    assert charged == []  # an outage is the infrastructure's: no attempt
    run = SweepRun(run_dir)
    for shard in plan():
        failed = run.read_failed(shard.id)
        assert failed.kind is ShardFailure.INFRASTRUCTURE and failed.attempts == 1
        assert failed.error.startswith(f"API model down (openai/double) unavailable for more than outage_s={OUTAGE_S:g}s")
        assert "resume the run once it answers. Last error: openai/double (agent): ServiceUnavailableError after 2 " \
               "tries" in failed.error and failed.error.endswith("overloaded")
    # while down, one probe episode at a time every outage_s/4, not the model's concurrency of 2
    assert double.requests <= 2 * (2 + OUTAGE_S / (OUTAGE_S / 4) + 2)
    assert "shard down-0 failed: API model down (openai/double) unavailable" in capsys.readouterr().err

    with FaultServer([BYE]) as healthy:  # the API answers again: a resume finishes the shards
        _, charged = run_sweep(run_dir, healthy.url)
    assert charged == [] and all(run.shard_path(s.id).exists() for s in plan()) and run.failed_ids() == []


class Api:
    def __init__(self, name: str, outage_s: float):
        from handoff.settings import ApiModelSettings

        self.name, self.api = name, ApiModelSettings(llm=f"openai/{name}", outage_s=outage_s, max_retries=2)


def test_the_outage_clock_runs_from_the_first_failure_and_a_recorded_episode_stops_it():
    from handoff.engine.base import ApiUnavailable

    outages = ApiOutages([Api("a", 100.0), Api("b", 100.0)])
    outages.failed("a", RuntimeError("an episode's own error"), 0.0)
    assert outages.room("a", 0.0) is None  # not an outage
    outages.failed("a", ApiUnavailable("a: 503"), 10.0)
    assert (outages.room("a", 10.0), outages.room("a", 35.0), outages.room("b", 10.0)) == (0, 1, None)
    outages.failed("a", ApiUnavailable("a: 429"), 60.0)  # still down: the clock runs from t=10
    assert outages.expired(110.0) == []
    [(name, error)] = outages.expired(110.5)
    assert name == "a" and "more than outage_s=100s" in error and error.endswith("Last error: a: 429")
    outages.failed("b", ApiUnavailable("b: 503"), 0.0)
    outages.answered("b")  # an episode of b recorded: up again
    assert outages.room("b", 1.0) is None and outages.expired(1000.0) == []
