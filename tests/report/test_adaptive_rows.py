"""What an unfinished adaptive sweep hands W&B and the report (issue 46, defect 4): a checkpoint the
rounds may still give episodes has no final row, and a decided one shows the best it was measured
against and what its verdict guarantees."""

from __future__ import annotations

from handoff.records import write_shard
from handoff.report.adaptive import Round, adaptive_result, in_rounds, markdown_lines
from handoff.report.reducer import reduce_run
from handoff.report.wandb_log import final_rows
from handoff.rules.sequential import SequenceBound, Verdict
from handoff.rundir import Manifest, RunDir, RunPaths
from handoff.testing.synthetic import Behavior, episode, sample_tasks

CONFIG = {"name": "adaptive", "trials": 1, "seed": 0, "episode": {"max_steps": 30, "max_errors": 4},
          "model": {"a": {"name": "a", "step": 1}, "b": {"name": "b", "step": 2}}, "domain": {"retail": {"name": "retail"}},
          "adaptive": {"enabled": True, "metric": "handoff_accuracy", "margin": 0.05, "confidence": 0.95,
                       "max_trials": 6, "round_trials": 2}}


def _run(tmp_path, rounds: list[Round], written: dict[str, int]):
    """Checkpoints a (step 1) and b (step 2), a shard per trial, `written[c]` trials of c on disk."""
    run, tasks = RunPaths(tmp_path / "run"), sample_tasks(1, ("retail",))["retail"]
    plan = [{"id": f"{c}__retail__t{t}", "model": c, "domain": "retail", "trial": t, "episodes": [{}] * len(tasks)}
            for c in "ab" for t in range(6)]
    for shard in plan:
        if shard["trial"] < written[shard["model"]]:
            step = CONFIG["model"][shard["model"]]["step"]
            write_shard(run.shard_path(shard["id"]), shard["id"],
                        [episode(shard["model"], step, "retail", task, shard["trial"], Behavior()) for task in tasks])
    run.write_manifest(Manifest(name="adaptive", config=CONFIG, shards=plan,
                                checkpoints=[{"name": c, "step": s} for c, s in (("a", 1), ("b", 2))],
                                adaptive=[r.model_dump(mode="json") for r in rounds]))
    return run.root


def _verdict(status: str, round_: int, against: str | None = None) -> Verdict:
    cs = None if against is None else SequenceBound(estimate=-0.01, lo=-0.04, hi=0.02, n=12)
    return Verdict(status=status, mean=0.8, vs_best=cs, against=against, round=round_, episodes=6 * round_)


def test_a_checkpoint_still_in_the_rounds_gets_no_final_row(tmp_path):
    """Round 2 stopped on b's failed shard; a's round-2 shards are done. a is still undecided (round
    3 will give it more): its row with 4 trials must not be logged as final (it was, and the resume's
    6-trial metrics never replaced it)."""
    one = Round(round=1, trials=2, verdicts={"a": _verdict("undecided", 1, "b"), "b": _verdict("best", 1)})
    run = _run(tmp_path, [one], {"a": 4, "b": 2})
    assert in_rounds(RunDir(run)) == {"a", "b"}
    rows, held = final_rows(RunDir(run), reduce_run(run), "retail")
    assert rows == [] and held == [("b", "a")]


def test_a_decided_checkpoint_is_final_and_shows_its_best(tmp_path):
    one = Round(round=1, trials=2, verdicts={"a": _verdict("tied", 1, "b"), "b": _verdict("best", 1)})
    two = Round(round=2, trials=4, verdicts={"a": one.verdicts["a"], "b": _verdict("best", 2)})
    run = _run(tmp_path, [one, two], {"a": 2, "b": 4})
    assert in_rounds(RunDir(run)) == set()
    rows, held = final_rows(RunDir(run), reduce_run(run), "retail")
    assert [r.checkpoint for r in rows] == ["a", "b"] and held == []
    result = adaptive_result(RunDir(run))
    assert result.checkpoints["a"].against == "b"
    text = "\n".join(markdown_lines(result))
    assert "| a | tied | 0.800 | -0.010 [-0.040, +0.020] | b | 1 |" in text
    assert "the tie set holds a *unique* best checkpoint with probability at least 0.95" in text
