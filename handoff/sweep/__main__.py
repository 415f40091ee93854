"""`python -m handoff.sweep [key=value ...]`: the Hydra entry point of `make sweep` and
`make resume RUN=<dir>` (which adds `resume=<dir>`). Exit status: 0 when every shard finished,
1 when some failed (they are in <run>/failed/), 2 for a bad config or a refused resume.

A resume is composed from the overrides recorded in the run's manifest plus the new ones (which
may name keys of the recorded config groups), so it does not go through @hydra.main's composition
of the default config.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import handoff  # noqa: F401 - environment for tau2/Ray (litellm cost map, usage stats off)
from handoff.sweep.config import ConfigError
from handoff.sweep.manifest import ResumeRefused
from handoff.sweep.rundir import RunLocked
from handoff.sweep.run import CONF_DIR, finish, run_sweep


def sweep(cfg: DictConfig, overrides: list[str]) -> int:
    try:
        prepared, summary = run_sweep(cfg, overrides)
    except (ConfigError, ResumeRefused, RunLocked) as exc:
        print(f"handoff sweep: {exc}", file=sys.stderr)
        return 2
    finish(prepared, summary)
    return 1 if summary.shards_failed else 0


@hydra.main(config_path=str(CONF_DIR), config_name="sweep", version_base=None)
def main(cfg: DictConfig) -> None:
    sys.exit(sweep(cfg, list(HydraConfig.get().overrides.task)))


def resume(argv: list[str]) -> int:
    run_dir = [a.split("=", 1)[1] for a in argv if a.startswith("resume=")][-1]
    return sweep(OmegaConf.create({"resume": run_dir}), argv)


if __name__ == "__main__":
    if any(a.startswith("resume=") for a in sys.argv[1:]):
        sys.exit(resume(sys.argv[1:]))
    main()
