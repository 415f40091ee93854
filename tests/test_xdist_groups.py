"""`make test` relies on pytest-xdist's --dist loadgroup (tests/conftest.py tags each test with its
group: every real-engine test in one, any other with its module), so that two vLLM engines never
compete for the 2 CPUs and a module's Ray cluster starts once. With pytest 9 and pytest-xdist 3.8
the tags never reached the scheduler and groups were spread over both workers without a word."""

from __future__ import annotations

import pytest

import handoff  # noqa: F401


def test_this_test_runs_tagged_with_its_group(request):
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("not run by a pytest-xdist worker with --dist loadgroup")
    assert request.node.nodeid.endswith("@tests/test_xdist_groups.py"), request.node.nodeid


class Item:
    """What send_order reads of a pytest item: its node id and markers."""

    def __init__(self, nodeid: str, *markers: str):
        self.nodeid, self.markers = nodeid, set(markers)

    def get_closest_marker(self, name: str):
        return name if name in self.markers else None


def test_the_longest_groups_are_sent_first_and_stay_together():
    """The real-engine group first, then groups with a slow test, then Ray, then the rest; each group's
    tests together and in collection order (a module fixture starts once per worker)."""
    from tests.conftest import send_order

    items = [Item("tests/a.py::quick"), Item("tests/b.py::real", "real_engine"), Item("tests/b.py::unit"),
             Item("tests/c.py::ray_one", "ray"), Item("tests/c.py::unit"), Item("tests/d.py::unit"),
             Item("tests/d.py::slow", "slow", "ray"), Item("tests/e.py::real", "real_engine", "slow")]
    assert [i.nodeid for i in send_order(items)] == [
        "tests/b.py::real", "tests/e.py::real", "tests/d.py::unit", "tests/d.py::slow", "tests/c.py::ray_one",
        "tests/c.py::unit", "tests/a.py::quick", "tests/b.py::unit"]
