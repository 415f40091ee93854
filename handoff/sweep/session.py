"""The Ray a sweep runs on: one the caller already initialized, `cluster.address`, or an embedded
local cluster the sweep starts and shuts down.

Inside `one_ray()` (an adaptive sweep's rounds, a Hydra multirun's jobs) the Ray a sweep started or
connected to stays up for the next sweep that asks for the same `cluster` settings, and with it the
episode workers that sweep left idle (handoff.sweep.workers): one Ray start and one set of worker
imports for all of them. It is shut down on leaving, or before a sweep that asks for other settings.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass

from handoff.sweep.config import ClusterConfig
from handoff.sweep.workers import IDLE


@dataclass
class _Kept:
    key: str  # the cluster settings it was started with
    made: str | None  # the temp dir the sweep created for it, removed at shutdown


_kept: _Kept | None = None  # the Ray of an earlier sweep, kept open by one_ray()
_sessions = 0  # how many one_ray() are open in this process


@contextlib.contextmanager
def one_ray():
    """The sweeps run inside share their Ray while they ask for the same cluster settings."""
    global _sessions
    _sessions += 1
    try:
        yield
    finally:
        _sessions -= 1
        if not _sessions:
            _release()


def embedded(cluster: ClusterConfig) -> bool:
    """Whether the sweep runs on a local cluster of its own: one it will start (a kept Ray of other
    settings is shut down first), or one an earlier sweep of this one_ray() started with the same
    settings; not the caller's Ray, not cluster.address."""
    import ray

    return not cluster.address and (_kept is not None or not ray.is_initialized())


@contextlib.contextmanager
def ray_cluster(cluster: ClusterConfig, verbose: bool = True):
    """Ray for the sweep. Never `ray stop`: other clusters may be running. Unless `verbose`, Ray's
    own INFO lines stay off the terminal."""
    import ray

    global _kept
    key = _key(cluster, verbose)
    if _kept is not None and (_kept.key != key or not ray.is_initialized()):
        _release()
    if _kept is None and ray.is_initialized():  # the caller's
        yield ray
        return
    made = _kept.made if _kept else _start(cluster, verbose)
    _kept = None
    try:
        yield ray
    finally:
        if _sessions:
            _kept = _Kept(key, made)
        else:
            _shutdown(made)


def _key(cluster: ClusterConfig, verbose: bool) -> str:
    return f"{cluster.model_dump_json()} verbose={verbose}"


def _start(cluster: ClusterConfig, verbose: bool) -> str | None:
    """ray.init for `cluster`; returns the temp dir it made for an embedded cluster (None if none)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # No idle workers prestarted for the first driver: a sweep runs only actors, each started when
    # it is created, so they would only spend CPU (a scripted two-episode sweep: 27 -> 24 CPU s).
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    if not sys.stderr.isatty():  # a Ray Job's or SLURM log: no colour codes around the actors' lines
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    # log_to_driver: what the engines and workers write to the terminal (a vLLM traceback, CUDA OOM;
    # handoff.sweep.logs) reaches the driver's log, and so a Ray Job's log.
    common = dict(include_dashboard=False, log_to_driver=True, namespace="handoff",
                  logging_level=logging.INFO if verbose else logging.WARNING)
    # An embedded cluster without cluster.temp_dir gets a fresh short /tmp/rh-XXXX (AF_UNIX socket
    # paths must stay under 107 bytes), removed when it is shut down.
    made = None if cluster.address or cluster.temp_dir else tempfile.mkdtemp(prefix="rh-", dir="/tmp")
    try:
        if cluster.address:
            ray.init(address=cluster.address, **common)
        else:
            ray.init(num_cpus=cluster.num_cpus, num_gpus=cluster.num_gpus,
                     object_store_memory=(cluster.object_store_mb or 256) << 20,
                     _temp_dir=cluster.temp_dir or made, **common)
    except BaseException:
        _shutdown(made)
        raise
    return made


def _release() -> None:
    """Shut down the kept Ray, if any."""
    global _kept
    if _kept is not None:
        made, _kept = _kept.made, None
        _shutdown(made)


def _shutdown(made: str | None) -> None:
    import ray

    try:
        if ray.is_initialized():
            IDLE.release(ray)  # the kept episode workers end before the driver leaves
    finally:
        IDLE.forget()
        ray.shutdown()
    if made:
        shutil.rmtree(made, ignore_errors=True)
