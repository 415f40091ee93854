"""The reporting path on episodes that really ran: the scripted engine as agent and user in tau2's
Orchestrator (handoff.agent.run_episode, finalized and evaluated by tau2), written as shards,
then reduced, exported and reported."""

from __future__ import annotations

import json

import pytest
from tau2.data_model.simulation import Results
from tau2.metrics.agent_metrics import compute_metrics as tau2_metrics

from handoff.report import finish_run
from handoff.report.export import export_results
from handoff.testing.synthetic import write_records
from tests.support.agent import call, run

pytestmark = pytest.mark.slow  # the module's episodes take ~40 s to run (setup)

TRANSFER = call("transfer_to_human_agents", {"summary": "user wants a human"})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("real") / "run"
    episodes = [
        run([TRANSFER, "You are being transferred."], ["I want a human agent.", "###STOP###"]),
        run(["How can I help?", "Done."], ["Hello, I need help.", "###STOP###"], task_id="1"),
        run(["<tool_call>{not json</tool_call>", "Sorry."], ["Hi.", "###STOP###"], task_id="2"),
    ]
    records = [e.to_record("scripted", step=5) for e in episodes]
    config = {"logger": {"mode": "offline"}, "episode": {"max_steps": 30, "max_errors": 4}}
    return write_records(root, {"s0": records}, "real", config)


def test_real_episodes_reduce_log_report_and_export(run_dir, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    paths = finish_run(run_dir)
    metrics = json.loads(paths["metrics"].read_text())
    assert metrics["n_episodes"] == 3 and not metrics["corrupt_shards"]
    (group,) = [g for g in metrics["groups"] if (g["domain"], g["rule"]) == ("airline", "all")]
    confusion = group["metrics"]["handoff"]["confusion"]
    assert confusion == {"tp": 0, "fp": 1, "tn": 2, "fn": 0}  # tasks 0-2 should not be handed off
    assert group["metrics"]["format_errors_per_100_turns"]["any"]["k"] >= 1
    assert "wandb_errors" not in paths and list(paths["wandb"].glob("offline-run-*"))
    assert "| scripted | 5 | airline | [3](episodes/index.html#checkpoint=scripted&domain=airline) |" in paths["report_md"].read_text()
    pages = {p.stem.split("__")[2]: p.read_text() for p in paths["transcripts"].rglob("*.html")}
    assert sorted(pages) == ["0", "1", "2"]  # a transcript page per episode, with the rules' findings
    assert "data-kind='transfer'" in pages["0"] and "unneeded handoff" in pages["0"]
    assert "data-rule='unparsed_tool_call'" in pages["2"] and "data-kind" not in pages["1"]
    (exported,) = export_results(run_dir)
    results = Results.load(exported)
    assert len(results.simulations) == 3
    assert tau2_metrics(results).avg_reward == pytest.approx(group["metrics"]["tau2_reward"]["value"])
