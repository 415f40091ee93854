"""A telecom sweep on local Ray whose user acts: the user's tool call and its result are recorded in the
shard as the user's; the run's export imports back with tau2's reward agreeing (issue 47)."""

from __future__ import annotations

import json

import pytest

import handoff  # noqa: F401
from handoff.records import read_shard
from handoff.rundir import RunPaths
from handoff.sweep.run import compose, run_sweep

LOCKED = "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]"
STATUS_BAR = json.dumps({"name": "check_status_bar", "arguments": {}})


@pytest.mark.ray
def test_a_scripted_telecom_users_first_turn_is_its_own_tool_call_in_the_shard(ray_cluster, tmp_path, capsys):
    overrides = ["engine=scripted", "domain=telecom", f"tasks.ids=['{LOCKED}']", "workers.processes=1",
                 "logger.mode=disabled", f"run_dir={tmp_path / 'run'}",
                 f"engine.script.user=['<tool_call>{STATUS_BAR}</tool_call>','My status bar shows airplane mode.',"
                 "'###TRANSFER###']"]
    _, summary = run_sweep(compose(overrides), overrides, progress=False)
    assert summary.episodes_done == 1 and summary.episode_failures == 0
    (shard,) = RunPaths(tmp_path / "run").shards_dir.glob("*.jsonl")
    (record,) = read_shard(shard)
    messages = record.simulation["messages"]
    assert messages[1]["role"] == "user" and [(c["name"], c["requestor"]) for c in messages[1]["tool_calls"]] == [
        ("check_status_bar", "user")]
    assert messages[2]["role"] == "tool" and messages[2]["requestor"] == "user"
    assert "Airplane Mode" in messages[2]["content"]
    assert messages[3]["content"] == "My status bar shows airplane mode."
    assert record.format_events == [] and record.user_format_events == []
    assert record.task_id == LOCKED and record.simulation["reward_info"]["reward"] == 1.0
    from handoff.cli import main
    from handoff.report import reduce_run

    capsys.readouterr()
    assert main(["export", str(tmp_path / "run")]) == 0
    (exported,) = capsys.readouterr().out.split()
    assert main(["import", exported, "--run-dir", str(tmp_path / "imported")]) == 0
    assert "1 simulations, 1 agreed, 0 mismatched" in capsys.readouterr().out
    (episode,) = reduce_run(tmp_path / "imported").episodes
    assert (episode.score.domain, episode.score.task_id, episode.score.transferred) == ("telecom", LOCKED, True)
