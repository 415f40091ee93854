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
