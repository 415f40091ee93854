"""`handoff score PATH [--domain D]` on a SimulationRun JSON and a tau2 results JSON, and its
exit status 2 with a clear message on bad input."""

from __future__ import annotations

import json

import pytest

from handoff.cli import main
from tests.support.episodes import CANCEL, Episode, authenticated_retail, tau2_results


def run(capsys, *argv: str) -> tuple[int, list[dict], str]:
    code = main(["score", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def confirmed_cancel() -> Episode:
    ep = authenticated_retail("88")
    ep.user("Yes, go ahead.")
    ep.call("cancel_pending_order", **CANCEL)
    return ep


def unconfirmed_transfer() -> Episode:
    ep = Episode("retail", "10")
    ep.user("Human please.")
    ep.call("transfer_to_human_agents", summary="wants a human", text="Transferring you.")
    return ep


def results_file(tmp_path, episodes: list[Episode], domain: str = "retail"):
    results = tau2_results(domain, [ep.task_id for ep in episodes], [ep.simulation(reward=0.0) for ep in episodes])
    path = tmp_path / "results.json"
    results.save(path)
    return path


def test_single_simulation(tmp_path, capsys):
    path = tmp_path / "sim.json"
    path.write_text(confirmed_cancel().simulation(reward=1.0).model_dump_json())
    code, (row,), _ = run(capsys, path, "--domain", "retail")
    assert code == 0
    assert row["task_id"] == "88" and row["transferred"] is False
    assert row["label"]["should_transfer"] is False and row["label"]["rule"] == "no_transfer"
    assert row["violations"] == [] and row["format_errors"] == []
    assert row["tau2_reward"] == 1.0 and row["reward"] == 1.0


def test_results_file_one_line_per_simulation(tmp_path, capsys):
    code, rows, _ = run(capsys, results_file(tmp_path, [confirmed_cancel(), unconfirmed_transfer()]))
    assert code == 0 and [r["task_id"] for r in rows] == ["88", "10"]
    transfer = rows[1]
    assert transfer["transferred"] is True and transfer["label"] == {"should_transfer": True, "rule": "gold_transfer_action", "reason": None}
    assert transfer["violations"] == [{"rule": "multiple_actions_in_turn", "turn": 2}]


@pytest.mark.parametrize(
    "content, argv, message",
    [
        ("not json", ["--domain", "retail"], "cannot read JSON"),
        ('{"a": 1}', ["--domain", "retail"], "neither a tau2 results JSON nor a SimulationRun"),
        ('{"task_id": "88", "messages": [{"role": "user", "content": "Hi."}], "termination_reason": "user_stop"}', [],
         "does not name its domain"),  # a SimulationRun calling no tool: nothing tells its domain
        (None, ["--domain", "banking"], "its tasks and tools are the retail domain's, not 'banking'"),
        ('{"task_id": "88", "messages": [{"role": "user", "content": "Hi."}], "termination_reason": "user_stop"}',
         ["--domain", "banking"], "unknown domain 'banking'"),
        ("unknown-task", ["--domain", "retail"], "unknown task '9999'"),
        ('{"task_id": "88", "messages": [{"role": "robot"}], "termination_reason": "user_stop"}', ["--domain", "retail"], "not a tau2 SimulationRun"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, content, argv, message):
    path = tmp_path / "in.json"
    sim = confirmed_cancel().simulation()
    if content == "unknown-task":
        content = sim.model_copy(update={"task_id": "9999"}).model_dump_json()
    path.write_text(content if content is not None else sim.model_dump_json())
    code, rows, err = run(capsys, path, *argv)
    assert code == 2 and rows == [] and message in err


def test_results_domain_must_match_the_option(tmp_path, capsys):
    code, _, err = run(capsys, results_file(tmp_path, [confirmed_cancel()]), "--domain", "airline")
    assert code == 2 and "results are for domain 'retail'" in err


def test_missing_file(tmp_path, capsys):
    code, _, err = run(capsys, tmp_path / "nope.json", "--domain", "retail")
    assert code == 2 and "nope.json" in err
