"""Engines kept between the sweeps of one process: `handoff follow`'s batches.

Inside `keep_engines()` a sweep's engine placement (handoff.sweep.pool.Placement) is a KeptPlacement:
a replica the sweep stops at its end is parked, alive, with the checkpoint it holds, and the next
sweep's start of a replica for the same role takes a parked one, which loads its checkpoint in place
(EngineHost.load: a vLLM engine reloads the weights of a checkpoint of the same architecture, as the
rolling schedule's slots do), instead of starting a new actor and a new engine. A parked replica
that is no longer alive is stopped for good and a new one started. The parked replicas are killed on
leaving, or when a sweep asks for other engine settings.
"""

from __future__ import annotations

import contextlib

from handoff.sweep.config import Checkpoint, SweepConfig
from handoff.sweep.pool import RayPlacement

_active = False
_kept: KeptPlacement | None = None


class KeptPlacement(RayPlacement):
    def __init__(self, cfg: SweepConfig, log_dir: str | None):
        super().__init__(cfg, log_dir)
        self.parked: dict[str, list] = {}  # role -> replicas alive, holding their last checkpoint
        self.roles: dict = {}  # actor id -> role
        self.started = self.reused = 0  # new actors, and parked replicas taken up again

    @staticmethod
    def key(cfg: SweepConfig) -> str:
        return cfg.engine.model_dump_json()

    def start(self, ck: Checkpoint, role: str):
        while self.parked.get(role):
            replica = self.parked[role].pop()
            if self.place(replica).state == "ALIVE":
                replica.load.remote(ck.model_dump(mode="json"))  # runs before the sweep's ready() call
                self.reused += 1
                return replica
            super().stop(replica)
        replica = super().start(ck, role)
        self.roles[replica._actor_id] = role
        self.started += 1
        return replica

    def stop(self, replica) -> None:
        role = self.roles.get(replica._actor_id)
        if role is None or self.place(replica).state != "ALIVE":
            self.roles.pop(replica._actor_id, None)
            super().stop(replica)
            return
        self.parked.setdefault(role, []).append(replica)

    def release(self) -> None:
        """Kill every parked replica."""
        import ray

        for replicas in self.parked.values():
            for replica in replicas:
                if ray.is_initialized():
                    super().stop(replica)
        self.parked.clear()
        self.roles.clear()


@contextlib.contextmanager
def keep_engines():
    """The sweeps run inside keep their engines for the next one (see the module's docstring)."""
    global _active, _kept
    _active = True
    try:
        yield
    finally:
        _active = False
        if _kept is not None:
            kept, _kept = _kept, None
            kept.release()


def placement(cfg: SweepConfig, log_dir: str | None) -> KeptPlacement | None:
    """The placement for a sweep's driver: the kept one inside keep_engines(), else None (the driver's
    own RayPlacement)."""
    global _kept
    if not _active:
        return None
    if _kept is not None and _kept.key(_kept.cfg) != KeptPlacement.key(cfg):
        _kept.release()
        _kept = None
    if _kept is None:
        _kept = KeptPlacement(cfg, log_dir)
    _kept.cfg, _kept.log_dir = cfg, log_dir
    return _kept
