"""The distributed sweep: Hydra config (conf/), validation, the shard plan, Ray engine actors and
episode workers, the driver with retries and resume. Entry point: `python -m handoff.sweep`."""

from handoff.sweep.config import ConfigError, SweepConfig, validate
from handoff.sweep.manifest import ResumeRefused
from handoff.sweep.run import compose, finish, prepare, run_sweep

__all__ = ["ConfigError", "ResumeRefused", "SweepConfig", "compose", "finish", "prepare", "run_sweep", "validate"]
