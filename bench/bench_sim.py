"""The sweep's dispatcher under random fault schedules (issue 48): `--schedules` schedules of the
deterministic simulator (tests/support/sim.py: the real driver, failure policy, outage clocks, engine
pool and schedule on a fake Ray and a virtual clock; with `--mode clients`, the default, the episodes'
requests go through the real RayEngineClient to the real EngineHost of each replica, `--mode stand-in`
models the client instead), each drawn from its seed; reports schedules per second (wall), the virtual
seconds simulated, and every invariant violated with the seeds that violate it (the first `--show` of
each). `--seed N` replays schedule N and prints it in full.

    python -m bench.bench_sim [--schedules 100000] [--start 0] [--mode clients] [--out results.json]
    python -m bench.bench_sim --seed 98
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
from collections import Counter

import handoff  # noqa: F401
from bench.common import report


def sweep(start: int, count: int, show: int, mode: str) -> dict:
    from tests.support import sim

    violated: Counter = Counter()
    seeds: dict[str, list[int]] = {}
    virtual, resumed, charged = 0.0, 0, 0
    began = time.perf_counter()
    for seed in range(start, start + count):
        with contextlib.redirect_stderr(io.StringIO()):  # the driver's lines (routed-around replicas, failures)
            outcome = sim.run(seed, mode=mode)
        virtual += outcome.virtual_s
        resumed += outcome.resumed
        charged += bool(outcome.charged)
        for invariant in sorted({v.split(":")[0] for v in outcome.violations}):
            violated[invariant] += 1
            if len(seeds.setdefault(invariant, [])) < show:
                seeds[invariant].append(seed)
    wall = time.perf_counter() - began
    return {"schedules": count, "first_seed": start, "mode": mode, "wall_s": round(wall, 1),
            "schedules_per_s": round(count / wall, 1), "virtual_hours": round(virtual / 3600, 1),
            "resumed_after_a_driver_kill": resumed, "schedules_with_a_charged_attempt": charged,
            "violations": dict(violated), "violating_seeds": seeds}


def replay(seed: int, mode: str) -> dict:
    from tests.support import sim

    sched = sim.draw(seed)
    outcome = sim.run(seed, mode=mode)
    return {"seed": seed, "cluster": {"workers": sched.workers, "threads": sched.threads, "replicas": sched.replicas},
            "episodes": {"/".join(map(str, k)): vars(v) for k, v in sched.episodes.items()},
            "faults": [vars(f) for f in sched.faults], "load_s": sched.load_s, "failed_loads": sorted(sched.failed_loads),
            "kill_at": sched.kill_at, "unplaced": sorted(sched.unplaced), "events": outcome.log,
            "charged": ["/".join(map(str, k)) for k in outcome.charged],
            "failed": {k: v.value for k, v in outcome.failed.items()}, "done": outcome.done,
            "virtual_s": round(outcome.virtual_s, 1), "violations": outcome.violations}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", type=int, default=100_000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--show", type=int, default=10, help="violating seeds listed per invariant")
    ap.add_argument("--seed", type=int, default=None, help="replay this one schedule in full")
    ap.add_argument("--mode", default="clients", choices=["clients", "stand-in"],
                    help="the episodes' requests through the real engine client (clients) or modelled (stand-in)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.seed is not None:
        report("sim_replay", replay(args.seed, args.mode), args.out)
        return
    report("sim", sweep(args.start, args.schedules, args.show, args.mode), args.out)


if __name__ == "__main__":
    main()
