"""The engine client (engines.RayEngineClient) on a virtual clock, with Ray's transport and actor table
stubbed (tests/support/transport.py): when a request's time counts. After a replica death the suspects
are served alone one after another; a request waiting meanwhile, for the lane or for its turn alone,
waits for another request's death, which is never its episode's fault (issue 46, defect 2): its
engine.request_timeout_s counts from its admission (the lane entered, the engine loaded)."""

from __future__ import annotations

import pytest

import handoff  # noqa: F401
from handoff.engine.base import Sampling
from handoff.sweep.engines import EngineUnavailableError, RayEngineClient
from tests.support.transport import Replica, transport

TIMEOUT = 20.0  # engine.request_timeout_s


@pytest.fixture
def world(monkeypatch):
    return transport(monkeypatch)


def test_a_suspect_waiting_for_its_turn_alone_is_not_timed_out(world):
    """The replica died under three requests at t=1; two suspects go alone first, 15 s each: this one is
    admitted alone at t=31, past request_timeout_s counted from its call (before: TimeoutError at t~21,
    its episode charged); served in 2 s, it succeeds."""
    replica = Replica(world, died_at=1.0, admitted_at=31.0, serve_s=2.0)
    client = RayEngineClient([replica], TIMEOUT, load_timeout_s=900)
    out = client.generate([1, 2], Sampling(), session_id="s")
    assert out.text == "ok" and replica.alone_calls == 1 and world.clock.now == pytest.approx(33.0, abs=1.0)


def test_a_request_held_back_by_a_suspect_is_timed_from_its_admission(world):
    """A request sent while suspects hold the lane (admitted at t=50, after them) takes 10 s: before, it
    timed out at t~20 and its episode was charged; now its 20 s start at its admission."""
    replica = Replica(world, admitted_at=50.0, serve_s=10.0)
    client = RayEngineClient([replica], TIMEOUT, load_timeout_s=900)
    assert client.generate([1, 2], Sampling(), session_id="s").text == "ok"
    assert world.clock.now == pytest.approx(60.0, abs=5.0)


def test_a_request_admitted_that_runs_over_its_time_still_times_out(world):
    replica = Replica(world, admitted_at=50.0, serve_s=100.0)
    client = RayEngineClient([replica], TIMEOUT, load_timeout_s=900)
    with pytest.raises(TimeoutError, match="request_timeout_s=20"):
        client.generate([1, 2], Sampling(), session_id="s")
    assert 70.0 <= world.clock.now <= 76.0 and world.cancelled


def test_a_lane_never_given_is_the_infrastructures_after_the_load_timeout(world):
    replica = Replica(world, admitted_at=10_000.0, serve_s=1.0)
    client = RayEngineClient([replica], TIMEOUT, load_timeout_s=300)
    with pytest.raises(EngineUnavailableError, match="load_timeout_s=300"):
        client.generate([1, 2], Sampling(), session_id="s")
    assert world.clock.now < 320.0
