"""Export a run's episodes as tau2 `Results` JSON, one file per (checkpoint, domain), so that
tau2's own tools read them (`tau2 view`, `tau2.metrics.agent_metrics.compute_metrics`). Each
SimulationRun carries the agent's format events and token usage in `reward_info.info`
(handoff.rules.events; added here for records written before they were) and the reward weights and
labels version the reducer scores the run with (handoff.scoring.SCORING_INFO_KEY), so that `handoff
score` on the file gives the reducer's scores."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

from handoff.records import CorruptShard, EpisodeRecord, read_shard, write_atomic
from handoff.rules.events import FORMAT_EVENTS_INFO_KEY, with_episode_info
from handoff.rundir import RunDir
from handoff.scoring import SCORING_INFO_KEY, Scorer
from handoff.tasks import get_task
from handoff.tasks.upstream import tau2_commit

log = logging.getLogger(__name__)


def _info(run: RunDir, model: str, domain: str, records: list[EpisodeRecord]):
    from tau2.data_model.simulation import AgentInfo, Info, UserInfo
    from tau2.registry import registry

    cfg = run.config
    episode, user = cfg.get("episode", {}), cfg.get("user", {})
    return Info(
        git_commit=tau2_commit(),
        num_trials=max(r.trial for r in records) + 1,
        max_steps=episode.get("max_steps", 0),
        max_errors=episode.get("max_errors", 0),
        user_info=UserInfo(implementation=f"handoff_user/{user.get('kind', 'unknown')}",
                           llm=(user.get("model") or {}).get("name") or user.get("llm")),
        agent_info=AgentInfo(implementation="handoff_agent", llm=model),
        environment_info=registry.get_env_constructor(domain)().get_info(),
        seed=cfg.get("seed"),
    )


def _simulation(record: EpisodeRecord, scoring: dict):
    sim = record.simulation_run()
    if sim.reward_info is not None:
        if FORMAT_EVENTS_INFO_KEY not in (sim.reward_info.info or {}):
            sim.reward_info.info = with_episode_info(sim.reward_info.info, record.format_events,
                                                     record.usage.prompt_tokens, record.usage.completion_tokens)
        sim.reward_info.info = {**sim.reward_info.info, SCORING_INFO_KEY: scoring}
    return sim


def _records_by_slice(run: RunDir) -> dict[tuple[str, str], list[EpisodeRecord]]:
    slices = defaultdict(list)
    for shard in run.run_shards()[0]:
        try:
            records = read_shard(shard)
        except CorruptShard as exc:
            log.warning("not exported, corrupt shard: %s", exc)
            continue
        for record in records:
            slices[(record.model, record.domain)].append(record)
    return slices


def export_results(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write <out_dir>/<checkpoint>__<domain>.json (default out_dir: run_dir/export)."""
    from tau2.data_model.simulation import Results

    run = RunDir(run_dir)
    scoring = Scorer.for_config(run.config).info  # the weights and labels the reducer scores this run with
    paths = []
    for (model, domain), records in sorted(_records_by_slice(run).items()):
        records.sort(key=lambda r: r.key)
        task_ids = sorted({r.task_id for r in records})
        results = Results(
            info=_info(run, model, domain, records),
            tasks=[get_task(domain, task_id) for task_id in task_ids],
            simulations=[_simulation(r, scoring) for r in records],
        )
        path = run.export_path(model, domain, out_dir)
        write_atomic(path, results.model_dump_json(indent=2))
        paths.append(path)
    return paths
