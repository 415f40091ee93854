"""An adaptive sweep whose metric no planned episode can count is refused before Ray (issue 46,
defect 5): recall over retail tasks none of which should transfer spent every round, then the report
failed with a TypeError (exit 1)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from handoff.errors import ConfigError
from handoff.sweep.run import compose, prepare

ADAPTIVE = ["engine=scripted", "model=[tiny_hermes]", "domain=[retail]", "adaptive.enabled=true",
            "adaptive.metric=handoff_recall", "logger.mode=disabled"]


def test_recall_over_tasks_that_never_transfer_is_refused_before_ray(tmp_path):
    """Through the real entry point: exit 2, metric and slice named, no Ray session, no run directory."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "handoff.sweep", *ADAPTIVE, "tasks.ids={retail:[0,1,2]}",
                           f"run_dir={run_dir}", f"cluster.temp_dir={tmp_path}/ray"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "adaptive.metric: handoff_recall counts no episode of the planned slice retail (3 tasks)" in proc.stderr
    assert not (tmp_path / "ray").exists() and not run_dir.exists()


def test_a_slice_with_a_should_transfer_task_or_another_metric_is_accepted(tmp_path):
    for extra in (["tasks.ids={retail:[0,10]}"], ["tasks.ids={retail:[0,1]}", "adaptive.metric=handoff_accuracy"]):
        overrides = [*ADAPTIVE, *extra, f"run_dir={tmp_path}/{len(extra)}"]
        prepared = prepare(compose(overrides), overrides)
        prepared.run.unlock()
    overrides = [*ADAPTIVE, "tasks.ids={retail:[0]}", f"run_dir={tmp_path}/refused"]
    with pytest.raises(ConfigError, match="handoff_recall counts no episode"):
        prepare(compose(overrides), overrides)
