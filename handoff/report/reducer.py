"""The reducer: scores every episode of a run with the rules and computes the metrics
(docs/metrics.md) per (checkpoint, domain, rule id), per (checkpoint, domain), and per checkpoint
over all domains.

It is incremental: each shard's scores are cached in reduced/scores/<shard>.jsonl under a key made
of the shard's checksum and the scorer's fingerprint (handoff.scoring: weights, rules source, labels,
task content, version), so re-reducing after a resume reads only the shards that are new or changed
(of the others, only the header line, plus a checksum verification when the file's size or mtime
changed). Everything in reduced/ can be
deleted and rebuilt from the shards alone, and reducing twice gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from handoff.records import CorruptShard, read_shard, read_shard_header, write_atomic
from handoff.report.cost import CostMetrics, cost_metrics
from handoff.rules.metrics import Interval, Metrics, compute_metrics
from handoff.rundir import RunDir, RunDirError
from handoff.scoring import ScoredEpisode, Scorer

log = logging.getLogger(__name__)

ALL = "all"


class GroupMetrics(BaseModel):
    """Metrics of one slice of a run; `domain` and `rule` are "all" when not sliced on them."""

    model: str
    step: int
    domain: str
    rule: str
    n_episodes: int
    metrics: Metrics
    # tau2's reward and success without the episodes of tasks whose gold no policy-following agent reaches
    # (with_reachable_tau2); n_unreachable: the episodes left out.
    n_unreachable: int = 0
    tau2_reward_reachable: Interval | None = None
    tau2_success_reachable: Interval | None = None
    cost: CostMetrics | None = None  # handoff.report.cost: per episode, per success (n/a before shard schema 2)


class Reduction(BaseModel):
    run: str
    n_episodes: int
    shards: list[str]
    corrupt_shards: list[str] = Field(default_factory=list)
    foreign_shards: list[str] = Field(default_factory=list, description="files of shards/ not this run's (skipped)")
    failed_shards: list[str] = Field(default_factory=list)
    groups: list[GroupMetrics]
    episodes: list[ScoredEpisode] = Field(default_factory=list, exclude=True)
    by_shard: dict[str, list[ScoredEpisode]] = Field(default_factory=dict, exclude=True,
                                                     description="the episodes of each shard read")

    def group(self, model: str, domain: str = ALL, rule: str = ALL) -> GroupMetrics:
        for g in self.groups:
            if (g.model, g.domain, g.rule) == (model, domain, rule):
                return g
        raise KeyError((model, domain, rule))

    def checkpoints(self) -> list[tuple[str, int]]:
        """(name, step) of every checkpoint, in step order."""
        return sorted({(g.model, g.step) for g in self.groups}, key=lambda c: (c[1], c[0]))

    def domains(self) -> list[str]:
        return sorted({g.domain for g in self.groups} - {ALL})

    def slices(self) -> list[GroupMetrics]:
        """One group per (checkpoint, domain) that has episodes, all rules together."""
        return [g for g in self.groups if g.domain != ALL and g.rule == ALL]

    @classmethod
    def load(cls, run_dir: str | Path) -> "Reduction":
        """The last reduction written for a run (metrics only, no episodes)."""
        return cls.model_validate_json(RunDir(run_dir).metrics.read_text())


def _file_stat(shard: Path) -> list[int]:
    stat = shard.stat()
    return [stat.st_size, stat.st_mtime_ns]


def _verify(shard: Path) -> None:
    """Check that a shard's body still matches the checksum in its header."""
    expected = read_shard_header(shard)["sha256"]
    if hashlib.sha256(shard.read_bytes().partition(b"\n")[2]).hexdigest() != expected:
        raise CorruptShard(f"{shard}: checksum mismatch")


def _load_cached(cache: Path, key: dict, shard: Path, n: int) -> list[ScoredEpisode] | None:
    """The cached scores if they were made from this shard content by this scorer and hold its `n`
    episodes (a truncated or damaged cache is rescored). A shard file whose size or mtime changed
    since is verified against its checksum first."""
    if not cache.is_file():
        return None
    with open(cache) as f:
        header = json.loads(f.readline() or "{}")
        if {k: header.get(k) for k in key} != key:
            return None
        if header.get("file") != _file_stat(shard):
            _verify(shard)
        try:
            scored = [ScoredEpisode.model_validate_json(line) for line in f]
        except ValidationError:
            return None
    if len(scored) != n:
        log.warning("rescoring %s: its score cache holds %d of its %d episodes", shard.name, len(scored), n)
        return None
    return scored


CACHE_FORMAT = 2
"""2: a scored episode carries its cost; a cache without the key (format 1) is rescored once."""


def cache_key(run: RunDir, shard: str) -> dict:
    """The key a reduced shard's cached scores were made under: the shard's checksum and the scorer."""
    with open(run.scores_path(shard)) as f:
        header = json.loads(f.readline())
    return {"shard_sha256": header["shard_sha256"], "scorer": header["scorer"], "cache": header.get("cache")}


def _score_shard(run: RunDir, shard: Path, scorer: Scorer) -> list[ScoredEpisode]:
    """Scores of one shard, from the cache when the shard and the scorer are unchanged: only the
    shard's header line is read then."""
    header = read_shard_header(shard)
    key = {"shard_sha256": header["sha256"], "scorer": scorer.fingerprint, "cache": CACHE_FORMAT}
    cache = run.scores_path(shard.stem)
    cached = _load_cached(cache, key, shard, header["n"])
    if cached is not None:
        return cached
    records = read_shard(shard)
    try:
        scored = [scorer.score(record) for record in records]
    except Exception as exc:  # an unknown task, a label file that does not load, a bad trajectory
        raise RunDirError(f"{shard}: cannot score its episodes: {type(exc).__name__}: {exc}") from exc
    lines = [json.dumps({**key, "file": _file_stat(shard)})] + [s.model_dump_json() for s in scored]
    write_atomic(cache, "\n".join(lines) + "\n")
    return scored


def score_run(run: RunDir, scorer: Scorer) -> tuple[list[ScoredEpisode], dict[str, list[ScoredEpisode]], list[str]]:
    """All scored episodes of the run's shards (RunDir.run_shards: a foreign file is skipped with a
    warning), sorted by key; also those of each shard read, and the shards that are corrupt."""
    run.scores_dir.mkdir(parents=True, exist_ok=True)
    episodes, by_shard, corrupt, seen = [], {}, [], {}
    own, foreign = run.run_shards()
    for name, reason in foreign.items():
        log.warning("skipping shards/%s.jsonl: %s", name, reason)
    for shard in own:
        try:
            scored = _score_shard(run, shard, scorer)
        except CorruptShard as exc:
            log.warning("skipping corrupt shard: %s", exc)
            corrupt.append(shard.stem)
            continue
        for ep in scored:
            if ep.key in seen:
                raise RunDirError(f"episode {ep.key} appears in shards {seen[ep.key]} and {shard.stem}")
            seen[ep.key] = shard.stem
        episodes.extend(scored)
        by_shard[shard.stem] = scored
    live = {run.scores_path(name) for name in by_shard}
    for stale in run.scores_dir.glob("*.jsonl"):  # shards that were removed or replaced
        if stale not in live:
            stale.unlink()
    episodes.sort(key=lambda e: e.key)
    return episodes, by_shard, corrupt


def _slices(episodes: list[ScoredEpisode]) -> dict[tuple[str, int, str, str], list[ScoredEpisode]]:
    """Episodes per (checkpoint, step, domain, rule), per (checkpoint, step, domain) and per
    checkpoint (domain and rule "all"). The last one's metrics hold the transfer rate of each
    rule over all domains."""
    slices = defaultdict(list)
    for ep in episodes:
        for domain, rule in ((ep.score.domain, ep.score.label.rule), (ep.score.domain, ALL), (ALL, ALL)):
            slices[(ep.model, ep.step, domain, rule)].append(ep)
    return slices


def compute_groups(episodes: list[ScoredEpisode]) -> list[GroupMetrics]:
    groups = []
    for (model, step, domain, rule), eps in sorted(_slices(episodes).items()):
        groups.append(GroupMetrics(model=model, step=step, domain=domain, rule=rule, n_episodes=len(eps),
                                   metrics=compute_metrics([e.score for e in eps]),
                                   cost=cost_metrics(eps) if rule == ALL else None))
    return groups


def with_reachable_tau2(groups: list[GroupMetrics], episodes: list[ScoredEpisode],
                        unreachable: set[tuple[str, str]] | None = None) -> list[GroupMetrics]:
    """Each group with tau2's reward and success over the episodes of tasks whose gold a policy-following agent
    can reach: tau2 gives a correct agent 0 on the others. `unreachable`: (domain, task id), by default the golds
    recorded `reachable: false` in data/policy/gold_resolutions.yaml (docs/tasks.md, "Golds against the policy")."""
    from handoff.tasks.golds import unreachable_golds

    unreachable = unreachable_golds() if unreachable is None else unreachable
    slices = _slices(episodes)
    for g in groups:
        eps = slices[(g.model, g.step, g.domain, g.rule)]
        kept = [e.score for e in eps if (e.score.domain, e.score.task_id) not in unreachable]
        g.n_unreachable = len(eps) - len(kept)
        reachable = compute_metrics(kept) if g.n_unreachable else g.metrics
        g.tau2_reward_reachable, g.tau2_success_reachable = reachable.tau2_reward, reachable.tau2_success
    return groups


def reduce_run(run_dir: str | Path, scorer: Scorer | None = None) -> Reduction:
    """Score what is new in the run, compute all metrics, write reduced/metrics.json (holding the
    run's reducer lock; `reduce_locked` is for a caller that holds it)."""
    run = RunDir(run_dir)
    with run.reducing():
        return reduce_locked(run, scorer)


def reduce_locked(run: RunDir, scorer: Scorer | None = None) -> Reduction:
    episodes, by_shard, corrupt = score_run(run, scorer or Scorer.for_config(run.config))
    skipped = run.manifest.skipped()  # handoff follow: deleted before they finished, no number shown as whole
    measured = [e for e in episodes if e.model not in skipped]
    reduction = Reduction(run=run.name, n_episodes=len(episodes), shards=list(by_shard),
                          corrupt_shards=corrupt, foreign_shards=sorted(run.run_shards()[1]),
                          failed_shards=run.failed_ids(),
                          groups=with_reachable_tau2(compute_groups(measured), measured), episodes=episodes,
                          by_shard=by_shard)
    write_atomic(run.metrics, reduction.model_dump_json(indent=1) + "\n")
    return reduction
