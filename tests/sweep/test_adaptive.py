"""Adaptive sweeps (docs/sweep.md, "Adaptive sweeps") and their known-answer test double, the
scripted engine's engine.script.accuracy."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

import handoff  # noqa: F401
from bench.scripted import model_path
from handoff.engine.scripted import handoff_decision, seed_draw
from handoff.rundir import RunPaths
from handoff.sweep.config import ConfigError, validate
from handoff.sweep.plan import episode_seed
from handoff.sweep.run import compose, run_sweep
from handoff.tasks.labels import load_labels

SCRIPTED = ["engine=scripted", "model=[tiny_hermes]"]


def _request(domain: str, task_id: str, seed: int) -> str:
    from handoff.agent.episode import agent_session

    return f"{agent_session(domain, task_id, seed)}/0123456789ab"


def _task(domain: str, should_transfer: bool) -> str:
    labels = load_labels().items()
    return next(t for (d, t), label in labels if d == domain and label.should_transfer == should_transfer)


@pytest.mark.parametrize("should_transfer", [True, False])
def test_the_known_answer_agent_is_right_with_its_accuracy_drawn_from_the_episode_seed(should_transfer):
    task = _task("retail", should_transfer)
    seeds = [episode_seed(0, "retail", task, trial) for trial in range(2000)]
    for accuracy in (0.0, 0.3, 0.85, 1.0):
        transfers = [handoff_decision(_request("retail", task, s), accuracy) for s in seeds]
        right = [t == should_transfer for t in transfers]
        assert right == [seed_draw(s) < accuracy for s in seeds]
        assert abs(sum(right) / len(seeds) - accuracy) < 0.04


def test_the_known_answer_agent_reads_telecoms_task_ids():
    """Brackets, pipes and colons in the session's task id: the label is found, the draw applies."""
    for should_transfer in (True, False):
        task = _task("telecom", should_transfer)
        seed = episode_seed(0, "telecom", task, 0)
        assert handoff_decision(_request("telecom", task, seed), 1.0) is should_transfer
        assert handoff_decision(_request("telecom", task, seed), 0.0) is not should_transfer


def test_accuracy_of_an_unknown_checkpoint_is_refused(tmp_path):
    base = [*SCRIPTED, f"run_dir={tmp_path}/run"]
    validate(compose([*base, "+engine.script.accuracy={tiny-hermes: 0.5}"]), check_paths=False)
    for bad, key in (("{nope: 0.5}", "engine.script.accuracy.nope"),
                     ("{tiny-hermes: 1.5}", "engine.script.accuracy.tiny-hermes")):
        with pytest.raises(ConfigError, match=key):
            validate(compose([*base, f"+engine.script.accuracy={bad}"]), check_paths=False)


def _adaptive(run_dir: Path, schedule: str, ckpts: str) -> list[str]:
    return ["engine=scripted", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=8", "shard_size=4",
            "workers.processes=1", "workers.threads=4", "model=[checkpoints]", f"model.checkpoints.glob={ckpts}",
            f"model.checkpoints.tokenizer={model_path()}", "model.checkpoints.chat_template=hermes",
            "+engine.script.accuracy={policy-step1: 0.0, policy-step2: 1.0, policy-step3: 1.0}",
            "adaptive.enabled=true", "adaptive.margin=0", "adaptive.max_trials=2", "logger.mode=disabled",
            f"schedule={schedule}", f"run_dir={run_dir}"]


def _shard_files(run_dir: Path) -> dict[str, float]:
    return {p.stem: p.stat().st_mtime_ns for p in RunPaths(run_dir).shards_dir.glob("*.jsonl")}


@pytest.mark.ray
def test_an_adaptive_sweep_drops_the_worse_checkpoint_and_resumes_mid_round(ray_cluster, tmp_path):
    """Known answers (accuracy 0, 1, 1) over 8 tasks, 2 rounds of 1 trial, margin 0: round 1 (the
    rolling schedule: its one agent replica reloaded in place from checkpoint to checkpoint) decides
    the first checkpoint worse; the run stops inside round 2, one checkpoint's round-2 shards done
    (run by the same driver as round 1: one engine start fewer); the resume (sequential) finishes
    round 2 for the two others without rerunning anything."""
    from handoff.report.adaptive import recorded_rounds
    from handoff.sweep.adaptive import run_rounds
    from handoff.sweep.run import _execute, prepare

    for step in (1, 2, 3):
        (tmp_path / "ckpts" / f"global_step_{step}").mkdir(parents=True)
    run_dir, ckpts = tmp_path / "run", f"{tmp_path}/ckpts/global_step_*"
    log = tmp_path / "service.log"
    overrides = [*_adaptive(run_dir, "rolling", ckpts), "engine.replicas=1", f"engine.script.service_log={log}"]

    def interrupted(prepared, progress, shards):
        if prepared.manifest.adaptive:
            raise KeyboardInterrupt  # round 2's driver stopped after policy-step2's shards
        ahead = [s for s in prepared.shards if s.model == "policy-step2" and s.trial == 1]
        return _execute(prepared, progress, shards + ahead)

    prepared = prepare(compose(overrides), overrides)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_rounds(prepared, False, interrupted)
    finally:
        prepared.run.unlock()
    first = recorded_rounds(prepared.run.read_manifest())
    step1 = first[0].verdicts["policy-step1"]
    assert [r.round for r in first] == [1]
    assert (step1.status, step1.round, step1.episodes, step1.mean) == ("worse", 1, 8, 0.0)
    served: dict[str, set[str]] = {}
    for pid, checkpoint, *_ in (line.split() for line in log.read_text().splitlines()):
        served.setdefault(pid, set()).add(checkpoint)
    assert any(len(cks - {"smollm2-135m-instruct"}) > 1 for cks in served.values())  # reloaded in place
    before = _shard_files(run_dir)
    assert sorted(before) == sorted(f"policy-step{s}__retail__t{t}__{i:04d}" for s, t in
                                    [(1, 0), (2, 0), (3, 0), (2, 1)] for i in range(2))

    resumed, summary = run_sweep(OmegaConf.create({"resume": str(run_dir)}),
                                 [f"resume={run_dir}", "schedule=sequential"], progress=False)
    rounds = recorded_rounds(resumed.run.read_manifest())
    after = _shard_files(run_dir)
    assert {k: after[k] for k in before} == before  # nothing done was redone
    assert [r.round for r in rounds] == [1, 2]
    assert rounds[1].verdicts["policy-step1"] == step1 and not any("policy-step1__retail__t1" in k for k in after)
    final = {n: (v.status, v.episodes, v.mean) for n, v in rounds[1].verdicts.items() if n != "policy-step1"}
    assert sorted(final.values()) == [("best", 16, 1.0), ("undecided", 16, 1.0)]  # two identical: never told apart
    assert (summary.episodes_done, summary.episodes_total, summary.shards_failed) == (40, 48, [])
    _, again = run_sweep(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}"], progress=False)
    assert not again.ran and _shard_files(run_dir) == after
    _check_what_was_decided(run_dir)


def _check_what_was_decided(run_dir: Path) -> None:
    """reduced/adaptive.json, the report's tie set and the rounds W&B's rows wait for."""
    import json

    from handoff.report import finish_run
    from handoff.report.adaptive import scheduled_trials
    from handoff.rundir import RunDir

    paths = finish_run(run_dir)
    result = json.loads(paths["adaptive"].read_text())
    assert result["tie_set"] == ["policy-step2", "policy-step3"]
    assert (result["episodes"], result["fixed_episodes"]) == (40, 48)
    step1 = result["checkpoints"]["policy-step1"]
    assert (step1["status"], step1["round"], step1["episodes"], step1["fixed_episodes"]) == ("worse", 1, 8, 16)
    assert step1["vs_best"]["hi"] < 0 and result["finished"]
    report = paths["report_md"].read_text()
    assert "## Adaptive decisions" in report and "**policy-step2, policy-step3**" in report
    assert scheduled_trials(RunDir(run_dir)) == {"policy-step1": 1, "policy-step2": 2, "policy-step3": 2}
    from handoff.report.compare import compare, format_table, side_scores

    text = format_table(compare(side_scores(run_dir, "policy-step1", None), side_scores(run_dir, "policy-step2", None)))
    assert "adaptive sweep, A: worse at round 1 of 2 (8 episodes; 8 run of the fixed design's 16)" in text
    assert "adaptive sweep, B: best at round 2" in text and "anytime-valid" in text


def test_what_was_decided_and_the_rounds_w_and_b_waits_for(tmp_path):
    """An adaptive run decided after round 2 of 8: each checkpoint's rows are final once the rounds
    it was given are (not the fixed design's 8 trials), and adaptive.json says what it cost."""
    from handoff.report.adaptive import Round, adaptive_result, scheduled_trials, wandb_summary
    from handoff.rules.sequential import Verdict
    from handoff.rundir import Manifest, RunDir

    config = {"adaptive": {"enabled": True, "metric": "handoff_accuracy", "margin": 0.05, "confidence": 0.95,
                           "max_trials": 8, "round_trials": 1}}
    shards = [{"id": f"{m}__retail__t{t}__0000", "model": m, "domain": "retail", "trial": t, "episodes": [{}] * 3}
              for m in "abc" for t in range(8)]

    def verdict(status, round_):
        return Verdict(status=status, mean=0.5, round=round_, episodes=3 * round_)

    one = Round(round=1, trials=1,
                verdicts={"a": verdict("worse", 1), "b": verdict("best", 1), "c": verdict("undecided", 1)})
    two = Round(round=2, trials=2, verdicts={"a": one.verdicts["a"], "b": verdict("best", 2), "c": verdict("tied", 2)})
    run = RunPaths(tmp_path)
    for rounds, expected in (([one], {"a": 1, "b": 2, "c": 2}), ([one, two], {"a": 1, "b": 2, "c": 2})):
        run.write_manifest(Manifest(config=config, shards=shards, adaptive=[r.model_dump(mode="json") for r in rounds]))
        assert scheduled_trials(RunDir(tmp_path)) == expected
    for shard in shards[:2] + shards[8:10] + shards[16:18]:  # a: t1 beyond its round, not counted
        run.shard_path(shard["id"]).parent.mkdir(parents=True, exist_ok=True)
        run.shard_path(shard["id"]).write_text("")
    result = adaptive_result(RunDir(tmp_path))
    assert result.finished and result.rounds == 2 and result.tie_set == ["b", "c"]
    assert {n: (d.status, d.episodes, d.fixed_episodes) for n, d in result.checkpoints.items()} == {
        "a": ("worse", 3, 24), "b": ("best", 6, 24), "c": ("tied", 6, 24)}
    assert (result.episodes, result.fixed_episodes) == (15, 72)
    assert wandb_summary(result)["best/tie_set"] == "b, c"
    config["adaptive"]["enabled"] = False
    run.write_manifest(Manifest(config=config, shards=shards))
    assert scheduled_trials(RunDir(tmp_path)) is None and adaptive_result(RunDir(tmp_path)) is None


NEVER_TRANSFER = ["engine.script.agent=['Let me check your line and walk you through the fix.']",
                  "engine.script.user=['Hello, my phone has no service.','###STOP###']"]


@pytest.mark.ray
def test_known_answers_on_telecom_always_and_never_transfer(ray_cluster, tmp_path):
    """`python -m handoff.sweep engine=scripted domain=telecom tasks.split=test tasks.per_kind=null`: the
    default script's agent always transfers (fn = tn = 0, tp > 0); an agent that never transfers gets
    tp = fp = 0; both on the same 73 tasks: 40 upstream (12 gold transfers) and 11 of each derived kind
    (explicit_request and out_of_scope positives, hard_negative negatives)."""
    from handoff.report.reducer import reduce_run

    base = ["engine=scripted", "domain=telecom", "tasks.split=test", "tasks.per_kind=null", "shard_size=10",
            "workers.processes=1", "logger.mode=disabled"]
    confusion, tasks, after_trying = {}, {}, {}
    for name, script in (("always", []), ("never", NEVER_TRANSFER)):
        overrides = [*base, *script, f"run_dir={tmp_path / name}"]
        _, summary = run_sweep(compose(overrides), overrides, progress=False)
        assert summary.episodes_done == 73 and summary.episode_failures == 0
        reduction = reduce_run(tmp_path / name)
        confusion[name] = {g.rule: g.metrics.handoff.confusion.model_dump()
                           for g in reduction.groups if g.domain == "telecom"}
        tasks[name] = sorted(e.score.task_id for e in reduction.episodes)
        share = next(g for g in reduction.groups if (g.domain, g.rule) == ("telecom", "all")).metrics
        after_trying[name] = share.unneeded_handoff_after_trying
    cells = ("tp", "fp", "tn", "fn")
    assert confusion["always"]["all"] == {"tp": 34, "fp": 39, "tn": 0, "fn": 0}
    assert confusion["never"]["all"] == {"tp": 0, "fp": 0, "tn": 39, "fn": 34}
    expected = {"gold_transfer_action": (12, 0), "no_transfer": (0, 28), "explicit_request": (11, 0),
                "out_of_scope": (11, 0), "hard_negative": (0, 11)}  # rule -> (positives, negatives)
    for rule, (positives, negatives) in expected.items():
        assert confusion["always"][rule] == dict(zip(cells, (positives, negatives, 0, 0))), rule
        assert confusion["never"][rule] == dict(zip(cells, (0, 0, negatives, positives))), rule
    assert tasks["always"] == tasks["never"] and len(set(tasks["always"])) == 73
    # docs/rules.md: the always-transfer agent hands off at its first turn, before any reference action
    assert (after_trying["always"].k, after_trying["always"].n) == (0, 39), "39 unneeded, all without trying"
    assert after_trying["never"] is None or after_trying["never"].n == 0
