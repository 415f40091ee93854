"""`handoff compare` pairs every hand-off metric under both labels (docs/reports.md, "Compare"): an
agent that always transfers against one that never does, over the same tasks."""

from __future__ import annotations

import json

from handoff.cli import main
from handoff.rules.outcome import Outcome
from handoff.testing.synthetic import Behavior, sample_tasks, write_run

CHECKPOINTS = {"always": (100, Behavior(transfer=True)), "never": (200, Behavior(transfer=False))}


def test_always_against_never_transfer_pairs_every_handoff_metric(tmp_path, capsys):
    tasks = sample_tasks(4, domains=("airline",))
    run = write_run(tmp_path / "run", CHECKPOINTS, tasks, shard_size=20)
    assert main(["compare", str(run), "--a", "always", "--b", "never", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    metrics, significant = cmp["result"]["metrics"], cmp["significant"]
    for label in ("handoff", "handoff_episode"):
        recall = metrics[f"{label}_recall"]  # every task differs by exactly 1: the data force a zero width
        assert (recall["a"], recall["b"], recall["diff"], recall["lo"], recall["hi"]) == (1, 0, 1, 1, 1)
        assert recall["n_tasks"] >= 8 and recall["n_episodes_a"] == recall["n_episodes_b"] == recall["n_tasks"]
        assert significant[f"{label}_recall"]
        precision = metrics[f"{label}_precision"]  # B never transferred: no precision, no difference
        assert precision["a"] > 0 and (precision["b"], precision["diff"], significant[f"{label}_precision"]) == (
            None, None, False)
        assert {f"{label}_accuracy", f"{label}_f1", f"{label}_outcome/{Outcome.UNNEEDED_HANDOFF.value}",
                f"{label}_outcome/missed_handoff_not_asked", f"{label}_transfer_rate/no_transfer"} <= set(metrics)
    rate = metrics["handoff_transfer_rate/no_transfer"]
    assert (rate["diff"], rate["n_tasks"], rate["too_few"]) == (1, 4, True)  # four no-transfer tasks: too few
    assert not significant["handoff_transfer_rate/no_transfer"]
    assert metrics["handoff_outcome/unneeded_handoff_unprompted"]["a"] > 0  # the synthetic user never asks
    kinds = {f["kind"] for f in cmp["flips"]}
    assert kinds >= {"handoff", "handoff_episode"}
    assert main(["compare", str(run), "--a", "always", "--b", "never"]) == 0
    table = capsys.readouterr().out
    assert "handoff_episode_recall" in table and "Flips in hand-off correctness (episode label):" in table


def test_a_comparison_resting_on_few_tasks_prints_too_few_tasks(tmp_path, capsys):
    """Issue 46: one task per label rule (6 tasks) gave `+1 [+1, +1] significant: yes`; now every
    row says how many tasks it rests on, and none is significant or gets an interval."""
    run = write_run(tmp_path / "run", CHECKPOINTS, sample_tasks(1, domains=("airline",)), shard_size=20)
    assert main(["compare", str(run), "--a", "always", "--b", "never", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    recall = cmp["result"]["metrics"]["handoff_recall"]
    assert (recall["diff"], recall["lo"], recall["hi"], recall["too_few"]) == (1, None, None, True)
    assert 0 < recall["n_tasks"] < 8 and recall["n_episodes_a"] == recall["n_tasks"]
    assert not any(cmp["significant"].values()) and cmp["p_holm"]["handoff_recall"] is None
    assert main(["compare", str(run), "--a", "always", "--b", "never"]) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("handoff_recall "))
    assert "too few tasks" in row and f"{recall['n_tasks']}t {recall['n_tasks']}/{recall['n_tasks']}pos" in row
    assert row.endswith(" no") and "sign test p = " in table


def test_two_identical_agents_are_not_told_apart(tmp_path, capsys):
    """Issue 46: identical agents got at least one "significant" in 52% of comparisons. The same
    behaviour under two names (their own draws) over 20 tasks x 2 trials: no primary metric flagged."""
    same = Behavior(correct_handoff=0.8, success=0.5)
    run = write_run(tmp_path / "run", {"a": (1, same), "b": (2, same)}, sample_tasks(4, ("airline",)), trials=2)
    assert main(["compare", str(run), "--a", "a", "--b", "b", "--json"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["result"]["n_tasks"] == 20 and set(cmp["primary"]) == set(cmp["p_holm"])
    assert not any(cmp["significant"][name] for name in cmp["primary"])
    assert all(cmp["result"]["metrics"][name]["p"] is not None for name in ("handoff_accuracy", "tau2_reward"))
