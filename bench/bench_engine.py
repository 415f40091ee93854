"""Engine tokens/s on the sweep's path vs the same engine standalone on the same prompts (vLLM-CPU).

The embedded SmolLM2-135M-Instruct on vLLM's CPU build plays agent and user: one engine actor, as
in the default sweep where the user shares the agent's checkpoint. Each run has two phases on a
local Ray cluster, each with a fresh engine actor of the same settings:

1. episodes: the product's sweep driver (handoff.sweep.driver.Driver) runs the first --tasks
   upstream tasks of airline and retail on episode worker actors (--processes x --threads, the
   sweep's RayEngineClient with sticky routing, fasteval's environments and evaluator); the engine
   actor records every request it serves.
2. standalone: the recorded requests (prompt ids and sampling) are sent to the engine actor all at
   once, a batch-throughput reference no sequence of turns can beat.

tokens/s = generated tokens / (last completion - first arrival), as the engine actor saw them, so
engine loads and worker start-up are not counted. The ratio episodes / standalone (target >= 0.90)
is given per run; --runs repeats both phases (best and spread over the `quiet` runs: load average
within 2 x cores throughout). --profile DIR records py-spy profiles (speedscope JSON) of the engine
actor and the workers during the first run's episodes.
Only the JSON goes to stdout; Ray's and vLLM's logs go to stderr.

    python -m bench.bench_engine [--tasks 8] [--processes 2] [--threads 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import handoff  # noqa: F401
from bench.common import report
from handoff.sweep.driver import Driver
from handoff.sweep.engines import EngineHost
from handoff.sweep.logs import log_dir
from handoff.sweep.pool import RayPlacement


class RecordingHost(EngineHost):
    """An engine actor that records every request it serves (for the standalone replay)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.log: list = []

    async def generate(self, prompt_ids, sampling, request_id, checkpoint=None, label=None, alone=False) -> dict:
        started = time.time()
        out = await super().generate(prompt_ids, sampling, request_id, checkpoint, label, alone)
        self.log.append((list(prompt_ids), sampling, started, time.time(), len(out["token_ids"])))
        return out

    generate.__ray_max_task_retries__ = 0  # as EngineHost.generate's: its clients resubmit

    async def recorded(self) -> tuple[list, dict]:
        """The requests served so far, and the engine's counters (handoff.engine's EngineStats)."""
        return self.log, (await self._engine.stats()).model_dump()

    async def threads(self) -> dict:
        import torch

        return {"torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}


class RecordingPlacement(RayPlacement):
    """The sweep's Ray placement with RecordingHost engines; keeps the first replica's records (and
    ends the profiles) before stopping it."""

    def __init__(self, *args):
        super().__init__(*args)
        self.replicas: list = []
        self.spies: list = []

    def start(self, ck, role: str):
        replica = recording_engine(ck, self.cfg.engine, role)
        self.replicas.append(replica)
        return replica

    def stop(self, replica) -> None:
        import ray

        if self.replicas and replica is self.replicas[0] and not hasattr(self, "records"):
            for spy in self.spies:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=120)
            self.records, self.stats = ray.get(replica.recorded.remote(), timeout=120)
        super().stop(replica)


class RecordingDriver(Driver):
    """The sweep's driver with RecordingHost engines (RecordingPlacement); profiles the engine and
    worker processes with py-spy while episodes run (`profile_dir`)."""

    profile_dir: Path | None = None

    def __init__(self, cfg, run, *args, **kwargs):
        super().__init__(cfg, run, *args, placement=RecordingPlacement(cfg, log_dir(run.root, cfg.verbose)), **kwargs)

    @property
    def records(self) -> list:
        return self.pool.placement.records

    @property
    def stats(self) -> dict:
        return self.pool.placement.stats

    def wait_workers(self) -> None:
        super().wait_workers()
        replica = self.pool.placement.replicas[0]
        engine_pid = self.ray.get(replica.ready.remote(), timeout=self.cfg.engine.load_timeout_s)
        self.info = self.ray.get(replica.threads.remote(), timeout=60)
        if self.profile_dir is not None:
            pids = {f"worker{i}": p for i, p in enumerate(self.ray.get([w.ping.remote() for w in self.workers]))}
            self.pool.placement.spies = [py_spy(pid, self.profile_dir / f"{name}.json") for name, pid in
                                         {"engine": engine_pid, **pids}.items()]


def recording_engine(ck, e, role: str):
    """A RecordingHost actor as the driver starts engine actors (handoff.sweep.pool.RayPlacement.start)."""
    import ray

    from handoff.sweep.engines import actor_env

    return ray.remote(RecordingHost).options(
        num_cpus=e.cpus, max_restarts=0, max_concurrency=1000, runtime_env={"env_vars": actor_env(ck, e)},
    ).remote(ck.model_dump(mode="json"), e.model_dump(mode="json"), role)


def py_spy(pid: int, out: Path) -> subprocess.Popen:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "speedscope", "--rate", "50",
                             "--threads", "--idle", "--subprocesses", "--output", str(out)],
                            stdout=sys.stderr, stderr=sys.stderr)


def overrides(args, run_dir: Path) -> list[str]:
    return [f"run_dir={run_dir}", "name=bench-engine", "domain=[airline,retail]", "tasks.split=null",
            "tasks.kinds=[upstream]", "tasks.per_kind=null", f"tasks.limit={args.tasks}", "shard_size=4",
            f"workers.processes={args.processes}", f"workers.threads={args.threads}", "workers.cpus=0.01",
            "engine=cpu", f"engine.cpus={args.engine_cpus}", "user=smollm2"]


def phase(records: list, stats: dict, before: dict | None = None, **extra) -> dict:
    wall = max(r[3] for r in records) - min(r[2] for r in records)
    tokens = sum(r[4] for r in records)
    prompt, cached = (stats[k] - (before or {}).get(k, 0) for k in ("prompt_tokens", "cached_prompt_tokens"))
    return {**extra, "requests": len(records), "generated_tokens": tokens, "wall_s": round(wall, 2),
            "tokens_per_s": round(tokens / wall, 1), "prefix_cache_hit_rate": round(cached / prompt, 3)}


def episodes_phase(args, root: Path, n: int, profile: Path | None) -> tuple[dict, RecordingDriver]:
    from handoff.sweep.run import compose, prepare

    ov = overrides(args, root / f"run{n}")
    prepared = prepare(compose(ov), ov)
    driver = RecordingDriver(prepared.sweep, prepared.run, prepared.ckpts, prepared.shards, progress=False)
    driver.profile_dir = profile
    summary = driver.execute()
    prepared.run.unlock()
    assert summary.episodes_done == summary.episodes_total and not summary.shards_failed, summary
    return phase(driver.records, driver.stats, episodes=summary.episodes_done), driver


def standalone_phase(driver: RecordingDriver) -> dict:
    """The episodes' requests, all at once, on a fresh engine actor of the same checkpoint."""
    import ray

    ck, records = driver.pool.ckpts[0], driver.records
    host = recording_engine(ck, driver.cfg.engine, "agent")
    ray.get(host.ready.remote(), timeout=900)
    checkpoint = ck.model_dump(mode="json")
    ray.get(host.generate.remote(records[0][0], records[0][1], "warm-up", checkpoint), timeout=600)
    _, before = ray.get(host.recorded.remote(), timeout=120)
    ray.get([host.generate.remote(r[0], r[1], f"r{i}", checkpoint) for i, r in enumerate(records)], timeout=1800)
    replayed, stats = ray.get(host.recorded.remote(), timeout=120)
    ray.kill(host)
    return phase(replayed[1:], stats, before)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8, help="upstream tasks per domain")
    parser.add_argument("--processes", type=int, default=2, help="episode worker processes")
    parser.add_argument("--threads", type=int, default=8, help="concurrent episodes per worker process")
    parser.add_argument("--engine-cpus", type=float, default=1.0, help="engine.cpus (Ray CPUs of the engine actor)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", default=None, help="directory for py-spy profiles of the first run")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    import ray

    root = Path(tempfile.mkdtemp(prefix="rh-be-", dir="/tmp"))
    profile = Path(args.profile) if args.profile else None
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
    os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    runs = []
    with contextlib.redirect_stdout(sys.stderr):  # Ray's and vLLM's chatter; stdout carries only the JSON
        ray.init(num_cpus=4, include_dashboard=False, object_store_memory=128 << 20, _temp_dir=str(root / "ray"),
                 namespace="handoff")
        try:
            for n in range(args.runs):
                cpu0, load0 = _cpu(), os.getloadavg()[0]
                episodes, driver = episodes_phase(args, root, n, profile if n == 0 else None)
                load1 = os.getloadavg()[0]
                standalone = standalone_phase(driver)
                loads = [load0, load1, os.getloadavg()[0]]
                runs.append({"episodes": episodes, "standalone": standalone,
                             "ratio": round(episodes["tokens_per_s"] / standalone["tokens_per_s"], 3),
                             "load_average_1m": [round(x, 2) for x in loads], "quiet": _quiet(loads),
                             "cpu_s_this_process": round(_cpu() - cpu0, 1), "engine_actor": driver.info})
        finally:
            ray.shutdown()
            shutil.rmtree(root, ignore_errors=True)
    ratios = [r["ratio"] for r in runs]
    quiet = [r["ratio"] for r in runs if r["quiet"]]
    result = {
        "target": ">= 90% of standalone tokens/s, through the sweep's engine actor and workers",
        "sizes": {"tasks_per_domain": args.tasks, "processes": args.processes, "threads": args.threads,
                  "engine_cpus": args.engine_cpus},
        "runs": runs,
        "ratio_best": max(quiet, default=None), "ratio_spread": round(max(quiet) - min(quiet), 3) if quiet else None,
        "quiet_runs": len(quiet), "ratio_all_runs": ratios,
        "ratio_episodes_over_standalone": round(max(r["episodes"]["tokens_per_s"] for r in runs)
                                                / max(r["standalone"]["tokens_per_s"] for r in runs), 3),
    }
    report("bench_engine", result, args.out)
    return result


def _quiet(loads: list[float]) -> bool:
    """A run counts for the best ratio only if the load average (the bench's own engine and workers
    included) stayed within 2 x cores at the start, between the phases and at the end: a phase that
    shares the cores with other work measures that work, not the episode path."""
    return max(loads) <= 2 * os.cpu_count()


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


if __name__ == "__main__":
    main()
