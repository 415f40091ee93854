"""The episode workers a driver runs its sweep on, kept for its next sweep on the same Ray.

A worker process spends ~13 CPU s importing tau2 and vLLM's tool parser before its first episode,
more than a short sweep's episodes. A driver that runs several sweeps on one Ray session (an
adaptive sweep's rounds, a multirun or a training loop on an existing cluster, a test module's
cluster) keeps the workers that end a sweep idle and takes them up for the next one of the same
shape (worker class, CPUs, threads, and the resources its engines need: a kept worker holds its CPUs
on its node, where engines of other needs might not fit beside it); a sweep of another shape kills
them before its engines are placed. A worker with an episode still running (one the driver
abandoned or cancelled) is killed, never kept. Ray ends them all with the driver's job.
"""

from __future__ import annotations

from typing import Any

from handoff.sweep import clock

RELEASE_WAIT_S = 10.0  # for a kept worker to say it is idle; one that does not is killed
DEATH_WAIT_S = 30.0  # for the GCS to list killed workers dead


class IdleWorkers:
    """The workers a finished sweep left, by shape; one shape at a time."""

    def __init__(self):
        self.shape: tuple | None = None
        self.handles: list = []

    def take(self, ray, shape: tuple, n: int) -> list:
        """Up to `n` kept workers of `shape`; the others are killed (those of an earlier Ray
        session went with it)."""
        shape = (*shape, _session(ray))
        kept, handles = self.shape, self.handles
        self.forget()
        if kept is None or kept[-1] != shape[-1]:
            return []
        mine = handles[:n] if kept == shape else []
        kill(ray, handles[len(mine):])
        return mine

    def keep(self, ray, shape: tuple, handles: list) -> None:
        """Keep the idle ones of `handles` (the rest are killed)."""
        idle = idle_of(ray, handles)
        kill(ray, [h for h in handles if h not in idle])
        self.shape, self.handles = (*shape, _session(ray)), idle

    def forget(self) -> None:
        self.shape, self.handles = None, []

    def release(self, ray) -> None:
        """Before the driver leaves Ray: the kept workers killed. Ray would end them with the
        driver's job, but not before a SLURM job's cleanup stops the nodes, right after the driver
        exits: a worker outlived its node. (Those of an earlier Ray session went with it.)"""
        self.take(ray, (), 0)


def idle_of(ray, handles: list) -> list:
    """Those of `handles` that answer within RELEASE_WAIT_S that no episode runs in them."""
    asked = {h.idle.remote(): h for h in handles}
    ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=RELEASE_WAIT_S) if asked else ([], [])
    return [asked[ref] for ref in ready if _answer(ray, ref)]


def _answer(ray, ref) -> bool:
    try:
        return bool(ray.get(ref, timeout=0))
    except Exception:  # noqa: BLE001 - a worker that died or is restarting is not kept
        return False


def kill(ray, handles: list) -> None:
    """Kill the workers and wait (up to DEATH_WAIT_S) until the GCS lists them dead: ray.kill only
    asks, and a call sent right after may still be served, the worker's CPUs still held."""
    from handoff.sweep.engines import actor_state

    for handle in handles:
        ray.kill(handle)
    deadline = clock.monotonic() + DEATH_WAIT_S
    while handles and clock.monotonic() < deadline:
        clock.sleep(0.1)
        handles = [h for h in handles if actor_state(h) != "DEAD"]


def _session(ray) -> tuple[Any, ...]:
    """This driver's job on this Ray cluster (a node id is new each time a node starts)."""
    context = ray.get_runtime_context()
    return context.get_job_id(), context.get_node_id()


IDLE = IdleWorkers()  # this driver process's
