"""How busy accelerator slots stay over a whole sweep of many checkpoints: the sequential schedule
(`schedule=sequential`, the baseline) against the rolling one (the default), in the same invocation,
on the product's driver.

A local Ray cluster declares `--slots` GPUs; the sweep's engine is the scripted engine on them
(engine.device=gpu, one GPU per replica, engine.replicas = slots). It stands in for an accelerator:
a replica takes `engine.script.load_delay_s` to load a checkpoint and serves each request in
`engine.script.delay_s` with at most `engine.max_num_seqs` requests at once (more wait), and logs
every service interval (`engine.script.service_log`).

The episodes are synthetic, so that the 2 CPU cores measure the schedule and not tau2's Python:
a worker runs episode (checkpoint, task, trial) as `turns` sequential agent requests through the
product's engine client (RayEngineClient, sticky routing) and returns an EpisodeRecord; the driver,
engines, shards and retries are the product's. Turn counts are heavy-tailed and come from tau2's
own data: for each of tau2's airline and retail tasks (the `upstream` kind, 164 tasks),
turns = 2 + 2 x (number of gold actions): an opening reply, a tool call and the reply about its
result per action, and a closing. Gold actions range 0-20 (mean 4.3), so turns range 2-42 (mean
10.5). Every checkpoint runs the same tasks; `--trials` repeats them.

All durations are given unscaled (a 60 s engine load, a 12 s request) and divided by
`--time-scale`; reported seconds are scaled back up (x time-scale), so the figures read as on the
accelerator. Per checkpoint, episode work per slot (service time / (slots x max_num_seqs)) must be
at least 20x the load time (checked).

    slot_busy_fraction = sum over replicas of the integral of min(in flight, max_num_seqs) /
                         max_num_seqs dt, / (slots x wall)   (from the service log: served requests)
    lower_bound_wall_s = total request service time / (slots x max_num_seqs) + one load

    python -m bench.bench_schedule [--checkpoints 10] [--slots 8] [--time-scale 75]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import handoff  # noqa: F401
from bench.common import report
from bench.scripted import model_path

SCHEDULES = {"baseline": "sequential", "handoff": "rolling"}


def gold_turns() -> dict[tuple[str, str], int]:
    """Turns of each tau2 airline and retail task: 2 + 2 x its gold actions."""
    from handoff.tasks import load_tasks

    return {(domain, t.id): 2 + 2 * len(t.evaluation_criteria.actions or [])
            for domain in ("airline", "retail") for t in load_tasks(domain, split=None, kinds=["upstream"])}


class SyntheticEpisodes:
    """An episode worker (the driver's worker_cls) whose episodes are `turns` agent requests."""

    TURNS: dict = {}

    def enter(self, sweep) -> None:
        from handoff.sweep.config import SweepConfig

        self.cfg = SweepConfig.model_validate(sweep.config)

    def ping(self) -> int:
        return os.getpid()

    def idle(self) -> bool:
        return False  # not kept: the next sweep may be of other turns

    def run(self, episode: dict, agent, user, sweep) -> dict:
        from handoff.engine.base import Sampling
        from handoff.records import EpisodeRecord, Usage
        from handoff.sweep.engines import RayEngineClient
        from handoff.sweep.plan import Episode

        ep = Episode.model_validate(episode)
        client = RayEngineClient(agent.replicas, self.cfg.engine.request_timeout_s, agent.checkpoint)
        turns = self.TURNS[(ep.domain, ep.task_id)]
        started = time.monotonic()
        for _ in range(turns):
            client.generate([1, 2, 3], Sampling(max_tokens=64), session_id=f"{ep.model}/{ep.task_id}/{ep.trial}")
        return EpisodeRecord(model=ep.model, step=ep.step, domain=ep.domain, task_id=ep.task_id, trial=ep.trial,
                             seed=ep.seed, simulation={}, usage=Usage(agent_turns=turns),
                             wall_s=time.monotonic() - started).model_dump(mode="json")


def overrides(args, root: Path, schedule: str, service_log: Path) -> list[str]:
    scale = args.time_scale
    for step in range(1, args.checkpoints + 1):  # empty directories: the scripted engine reads only the tokenizer
        (root / "ckpts" / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
    threads = math.ceil(args.slots * args.max_num_seqs * args.overcommit / args.processes)
    return [
        f"run_dir={root / schedule}", f"schedule={schedule}", "user=litellm",
        "model=[checkpoints]", f"model.checkpoints.glob={root}/ckpts/global_step_*",
        f"model.checkpoints.tokenizer={model_path()}",
        "domain=[airline,retail]", "tasks.split=null", "tasks.kinds=[upstream]", "tasks.per_kind=null",
        "tasks.limit=null",
        f"trials={args.trials}", "shard_size=16", "episode_timeout_s=100000",
        "engine=scripted", "engine.device=gpu", f"engine.replicas={args.slots}", "engine.cpus=0.01",
        f"engine.max_num_seqs={args.max_num_seqs}", f"engine.script.delay_s={args.request_s / scale}",
        f"engine.script.load_delay_s={args.load_s / scale}", f"engine.script.service_log={service_log}",
        f"workers.processes={args.processes}", f"workers.threads={threads}", "workers.cpus=0.01",
    ]


def run_schedule(args, root: Path, name: str, schedule: str) -> dict:
    from handoff.sweep.driver import Driver
    from handoff.sweep.run import compose, prepare

    log = root / f"{schedule}.service.log"
    ov = overrides(args, root, schedule, log)
    prepared = prepare(compose(ov), ov)
    driver = Driver(prepared.sweep, prepared.run, prepared.ckpts, prepared.shards, progress=False,
                    worker_cls=SyntheticEpisodes)
    cpu0, started = _cpu(), time.monotonic()
    summary = driver.execute()
    wall = time.monotonic() - started
    prepared.run.unlock()
    assert summary.episodes_done == summary.episodes_total and not summary.shards_failed, summary
    expected = len(SyntheticEpisodes.TURNS) * args.trials * args.checkpoints
    assert summary.episodes_total == expected, f"planned {summary.episodes_total} episodes, not {expected}"
    lines = (line.split() for line in log.read_text().splitlines())
    service = sum(float(end) - float(start) for _, _, start, end in lines)
    scale = args.time_scale
    return {"schedule": schedule, "episodes": summary.episodes_done,
            "slot_busy_fraction": round(service / (args.max_num_seqs * args.slots * wall), 3),
            "wall_s": round(wall * scale, 1), "service_s": service * scale,
            "cpu_s_this_process": round(_cpu() - cpu0, 1)}


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--slots", type=int, default=8, help="declared GPUs = engine replicas")
    parser.add_argument("--load-s", type=float, default=60.0, help="engine load, unscaled seconds")
    parser.add_argument("--request-s", type=float, default=12.0, help="request service time, unscaled seconds")
    parser.add_argument("--max-num-seqs", type=int, default=2, help="requests a replica serves at once")
    parser.add_argument("--trials", type=int, default=1)
    parser.add_argument("--time-scale", type=float, default=75.0, help="divide every duration by this")
    parser.add_argument("--processes", type=int, default=2, help="episode worker processes")
    parser.add_argument("--overcommit", type=float, default=2.0,
                        help="concurrent episodes (workers x threads) per replica batch slot")
    parser.add_argument("--schedules", default="baseline,handoff")
    parser.add_argument("--keep", action="store_true", help="keep the run directories and service logs")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import ray

    SyntheticEpisodes.TURNS = turns = gold_turns()
    work = sum(turns.values()) * args.trials * args.request_s / (args.slots * args.max_num_seqs)
    if work < 20 * args.load_s:
        parser.error(f"episode work per slot per checkpoint {work:.0f}s < 20 x load {args.load_s}s: raise --trials")
    root = Path(tempfile.mkdtemp(prefix="rh-sched-", dir="/tmp"))
    os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    ray.init(num_cpus=4, num_gpus=args.slots, include_dashboard=False, object_store_memory=128 << 20,
             _temp_dir=str(root / "ray"), log_to_driver=False, namespace="handoff")
    try:
        results = {name: run_schedule(args, root, name, SCHEDULES[name]) for name in args.schedules.split(",")}
    finally:
        ray.shutdown()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    service = sum(turns.values()) * args.trials * args.checkpoints * args.request_s
    lower_bound = service / (args.slots * args.max_num_seqs) + args.load_s
    for r in results.values():
        r["wall_over_lower_bound"] = round(r["wall_s"] / lower_bound, 3)
        r["served_over_nominal"] = round(r.pop("service_s") / service, 4)  # > 1: sleeps overran on a busy CPU
    result = {
        "target": "handoff: slot_busy_fraction >= 0.90 and wall_s <= 1.15 x lower_bound_wall_s (10 x 8, 60 s load)",
        "sizes": {"checkpoints": args.checkpoints, "slots": args.slots, "max_num_seqs": args.max_num_seqs,
                  "trials": args.trials, "episodes_per_checkpoint": len(turns) * args.trials},
        "unscaled_s": {"load": args.load_s, "request": args.request_s}, "time_scale": args.time_scale,
        "turns": {"source": "2 + 2 x gold actions of tau2's airline+retail tasks", "mean": round(
            sum(turns.values()) / len(turns), 2), "max": max(turns.values())},
        "work_per_slot_per_checkpoint_over_load": round(work / args.load_s, 1),
        **results,
        "lower_bound_wall_s": round(lower_bound, 1),
        "load_average_1m_at_end": os.getloadavg()[0],
        **({"kept": str(root)} if args.keep else {}),
    }
    report("bench_schedule", result, args.out)
    return result


if __name__ == "__main__":
    main()
