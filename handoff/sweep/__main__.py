"""`python -m handoff.sweep [key=value ...]`: the Hydra entry point of `make sweep` and
`make resume RUN=<dir>` (which adds `resume=<dir>`). Exit status: 0 when every shard finished,
1 when some failed (they are in <run>/failed/), 2 for a bad config or a refused resume."""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import handoff  # noqa: F401 - environment for tau2/Ray (litellm cost map, usage stats off)
from handoff.sweep.config import ConfigError
from handoff.sweep.manifest import ResumeRefused
from handoff.sweep.rundir import RunLocked
from handoff.sweep.run import CONF_DIR, finish, run_sweep


@hydra.main(config_path=str(CONF_DIR), config_name="sweep", version_base=None)
def main(cfg: DictConfig) -> None:
    try:
        prepared, summary = run_sweep(cfg, list(HydraConfig.get().overrides.task))
    except (ConfigError, ResumeRefused, RunLocked) as exc:
        print(f"handoff sweep: {exc}", file=sys.stderr)
        sys.exit(2)
    finish(prepared, summary)
    sys.exit(1 if summary.shards_failed else 0)


if __name__ == "__main__":
    main()
