"""A replica's lane without Ray (an EngineHost on the scripted engine, in this process): a suspect
(a request that was in flight when its replica died) runs alone, so that a death while it runs is
its own doing; the requests that come meanwhile wait and then share the replica again."""

from __future__ import annotations

import asyncio

import handoff  # noqa: F401
from handoff.sweep.engines import Lane
from tests.sweep.test_schedule import _host


def test_a_suspect_waits_for_the_running_requests_and_holds_new_ones_back():
    async def main():
        lane, order = Lane(), []
        await lane.enter()  # a request running
        suspect = asyncio.create_task(lane.take("s"))
        await asyncio.sleep(0.01)
        assert not suspect.done() and lane.waiting == 1  # waits for the running request
        newcomer = asyncio.create_task(lane.enter())
        await asyncio.sleep(0.01)
        assert not newcomer.done()  # a waiting suspect goes first
        await lane.leave()
        await suspect
        order.append(("alone", lane.holder, lane.running))
        await asyncio.sleep(0.01)
        assert not newcomer.done()  # held back while the suspect runs
        await lane.give("other")  # another request's give does not free it
        assert lane.holder == "s"
        await lane.give("s")
        await newcomer
        return order, lane.running

    order, running = asyncio.run(main())
    assert order == [("alone", "s", 0)] and running == 1


def test_a_suspect_is_served_alone_and_the_replica_shares_again(tmp_path):
    """enter_alone, then the suspect's generate: the other requests sent meanwhile start only once it
    ended (the scripted service log: no span overlaps the suspect's), then run together."""
    host, _ = _host(tmp_path, "a", delay_s=0.2)

    async def main():
        first = asyncio.create_task(host.generate([1, 2], {}, "s0/r"))
        await asyncio.sleep(0.05)
        admitted = asyncio.create_task(host.enter_alone("suspect/r"))
        await asyncio.sleep(0.05)
        assert not admitted.done()  # s0 is being served
        await first
        await admitted
        others = [asyncio.create_task(host.generate([1, 2], {}, f"s{i}/r")) for i in (1, 2)]
        await asyncio.sleep(0.05)
        await host.generate([1, 2], {}, "suspect/r", alone=True)
        await asyncio.gather(*others)

    asyncio.run(main())
    spans = [tuple(map(float, line.split()[2:])) for line in (tmp_path / "service.log").read_text().splitlines()]
    s0, suspect, s1, s2 = spans
    assert s0[1] <= suspect[0] and suspect[1] <= min(s1[0], s2[0])
    assert max(s1[0], s2[0]) < min(s1[1], s2[1])  # the two others shared the replica again
    assert host._lane.holder is None and host._lane.running == 0


def test_a_request_held_back_by_a_suspect_is_not_admitted_until_it_runs(tmp_path):
    """EngineHost.admitted_s, what the client's request deadline counts: None while the request waits
    behind a suspect that holds the lane, then the time since it was let in; forgotten once served."""
    host, _ = _host(tmp_path, "a", delay_s=0.2)

    async def main():
        await host.enter_alone("suspect/r")
        waiting = asyncio.create_task(host.generate([1, 2], {}, "s1/r"))
        await asyncio.sleep(0.05)
        assert await host.admitted_s("s1/r") is None  # held back: not its time
        await host.generate([1, 2], {}, "suspect/r", alone=True)
        await asyncio.sleep(0.05)
        assert 0 <= await host.admitted_s("s1/r") < 0.2  # let in once the suspect was served
        await waiting
        assert await host.admitted_s("s1/r") is None

    asyncio.run(main())
