"""The reducer: metrics per (checkpoint, domain, rule) from the rules, incremental, idempotent,
re-runnable from the shards alone; corrupt and duplicated shards are reported, not swallowed."""

from __future__ import annotations

import shutil

import pytest

from handoff.records import read_shard, write_shard
from handoff.report.reducer import ALL, Reduction, reduce_run
from handoff.rules.metrics import compute_metrics
from handoff.rundir import RunDirError, RunPaths
from handoff.scoring import Scorer
from handoff.testing.synthetic import Behavior, add_shard, episode, write_run

CHECKPOINTS = {"good": (100, Behavior(correct_handoff=0.9)), "bad": (200, Behavior(correct_handoff=0.3))}


class CountingScorer(Scorer):
    """The real scorer, counting the records it had to score (not served from the cache)."""

    scored = 0

    def score(self, record):
        self.scored += 1
        return super().score(record)


@pytest.fixture
def run(tmp_path, tasks):
    return write_run(tmp_path / "run", CHECKPOINTS, tasks, shard_size=5)


def _files(directory):
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_groups_are_the_rules_metrics_of_each_slice(run, tasks):
    reduction = reduce_run(run)
    n_tasks = sum(len(t) for t in tasks.values())
    assert reduction.n_episodes == 2 * n_tasks
    eps = [e for e in reduction.episodes if e.model == "good" and e.score.domain == "retail"
           and e.score.label.rule == "out_of_scope"]
    group = reduction.group("good", "retail", "out_of_scope")
    assert group.step == 100 and group.n_episodes == len(eps) == 2
    assert group.metrics == compute_metrics([e.score for e in eps])
    overall = reduction.group("bad", ALL, ALL)
    assert overall.metrics == compute_metrics([e.score for e in reduction.episodes if e.model == "bad"])
    # the better checkpoint decides the hand-off right more often, as its behaviour says
    assert reduction.group("good").metrics.handoff.accuracy.value > reduction.group("bad").metrics.handoff.accuracy.value
    assert Reduction.load(run).groups == reduction.groups


def test_reducing_again_is_idempotent_and_reads_nothing(run):
    reduce_run(run)
    before = _files(RunPaths(run).reduced)
    scorer = CountingScorer.for_config({})
    again = reduce_run(run, scorer)
    assert scorer.scored == 0
    assert _files(RunPaths(run).reduced) == before
    shutil.rmtree(RunPaths(run).reduced)  # from the shards alone
    rebuilt = reduce_run(run, CountingScorer.for_config({}))
    assert _files(RunPaths(run).reduced) == before
    assert rebuilt.groups == again.groups


def test_resume_scores_only_new_shards(run, tasks, tmp_path):
    reduce_run(run)
    extra = [episode("good", 100, "airline", task_id, 1, CHECKPOINTS["good"][1]) for task_id in tasks["airline"]]
    add_shard(run, "good-airline-trial1", extra)
    scorer = CountingScorer.for_config({})
    updated = reduce_run(run, scorer)
    assert scorer.scored == len(extra)
    assert updated.group("good", "airline").metrics.n_episodes == 2 * len(tasks["airline"])
    fresh = shutil.copytree(run, tmp_path / "fresh", ignore=shutil.ignore_patterns("reduced"))
    assert reduce_run(fresh).groups == updated.groups


def test_a_rewritten_shard_is_scored_again(run):
    reduce_run(run)
    shard = sorted(RunPaths(run).shards_dir.glob("good-*.jsonl"))[0]
    records = read_shard(shard)
    flipped = [r.model_copy(update={"model": "other"}) for r in records]
    write_shard(shard, shard.stem, flipped)
    scorer = CountingScorer.for_config({})
    reduction = reduce_run(run, scorer)
    assert scorer.scored == len(records)
    assert reduction.group("other").n_episodes == len(records)


def test_corrupt_shard_is_reported_and_the_rest_reduced(run):
    first = reduce_run(run)
    shard = sorted(RunPaths(run).shards_dir.glob("*.jsonl"))[0]
    shard.write_bytes(shard.read_bytes()[:-20])
    reduction = reduce_run(run)
    assert reduction.corrupt_shards == [shard.stem]
    assert reduction.n_episodes == first.n_episodes - 5
    assert not RunPaths(run).scores_path(shard.stem).exists()


def test_duplicated_episode_is_an_error(run):
    shard = sorted(RunPaths(run).shards_dir.glob("*.jsonl"))[0]
    add_shard(run, "copy", read_shard(shard))
    with pytest.raises(RunDirError, match="appears in shards"):
        reduce_run(run)


def test_not_a_run_directory(tmp_path):
    with pytest.raises(RunDirError, match="no manifest.json"):
        reduce_run(tmp_path)


def test_score_cache_key_covers_task_content_and_rules_source(monkeypatch):
    """Changing a task or a rule must invalidate cached scores (the reducer keys its cache on this)."""
    from handoff import scoring
    from handoff.tasks import hashes

    def key() -> str:
        return scoring.Scorer("default").fingerprint

    before = key()
    assert key() == before  # stable while nothing changes
    monkeypatch.setattr(hashes, "tasks_sha256", lambda: "other tasks")
    with_other_tasks = key()
    monkeypatch.setattr(scoring, "rules_sha256", lambda: "other rules")
    assert len({before, with_other_tasks, key()}) == 3


def test_tau2_reward_is_also_given_without_tasks_whose_gold_is_unreachable(run):
    """Issue 32: the sample holds airline 9, whose gold cancels a flown reservation (recorded unreachable)."""
    from handoff.report.reducer import compute_groups, with_reachable_tau2
    from handoff.tasks.golds import unreachable_golds

    reduction = reduce_run(run)
    good = [e.score for e in reduction.episodes if e.model == "good"]
    kept = [s for s in good if (s.domain, s.task_id) not in unreachable_golds()]
    overall, retail = reduction.group("good"), reduction.group("good", "retail")
    assert overall.n_unreachable == len(good) - len(kept) == 1
    assert (overall.tau2_reward_reachable, overall.tau2_success_reachable) == (
        compute_metrics(kept).tau2_reward, compute_metrics(kept).tau2_success)
    assert overall.tau2_success_reachable.n == overall.metrics.tau2_success.n - 1
    assert retail.n_unreachable == 0 and retail.tau2_success_reachable == retail.metrics.tau2_success
    dropped = with_reachable_tau2(compute_groups(reduction.episodes), reduction.episodes, {("retail", "0")})
    assert next(g for g in dropped if (g.model, g.domain, g.rule) == ("good", "retail", ALL)).n_unreachable == 1
    assert Reduction.load(run).group("good").tau2_success_reachable == overall.tau2_success_reachable
