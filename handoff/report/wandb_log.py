"""W&B logging of a reduced run: one W&B run per (checkpoint, domain), grouped by sweep.

Offline by default: files go to <run_dir>/wandb and `wandb sync <run_dir>/wandb/wandb/offline-run-*`
uploads them later. Online when WANDB_API_KEY is set (or `mode` says so). Run ids are derived from
the run directory, checkpoint and domain, and runs are opened with resume="allow", so logging a
resumed sweep updates the same W&B runs. The reducer's files are written before anything is
logged, and a logging failure is returned as an error message, never raised: results are not lost
when the server cannot be reached (the run is then written offline instead).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel, Field

from handoff.report.reducer import ALL, Reduction
from handoff.report.rundir import RunDir

STEP_METRIC = "checkpoint/step"
TABLE_COLUMNS = ["task_id", "trial", "rule", "should_transfer", "transferred", "reward",
                 "tau2_reward", "violations", "format_errors", "termination", "turns"]


class WandbResult(BaseModel):
    dir: Path = Field(description="where the W&B run directories are: `wandb sync DIR/offline-run-*`")
    run_ids: list[str] = Field(default_factory=list)
    mode: str = "offline"
    errors: list[str] = Field(default_factory=list)


def run_id(run_dir: Path, model: str, domain: str) -> str:
    """Deterministic W&B run id for one (checkpoint, domain) of a run directory."""
    ident = f"{Path(run_dir).resolve().name}|{model}|{domain}"
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{model}-{domain}")[:40]
    return f"{slug}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


def flatten(tree, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of nested dicts/lists as {"a/b/0": value}; strings and None are dropped."""
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = enumerate(tree)
    elif isinstance(tree, (int, float)):
        return {prefix: float(tree)}
    else:
        return {}
    flat = {}
    for key, value in items:
        flat.update(flatten(value, f"{prefix}/{key}" if prefix else str(key)))
    return flat


def run_values(reduction: Reduction, model: str, domain: str) -> dict[str, float]:
    """What one W&B run logs and keeps as summary: the slice's metrics and each rule's."""
    values = flatten(reduction.group(model, domain).metrics.model_dump(mode="json"))
    for g in reduction.groups:
        if (g.model, g.domain) == (model, domain) and g.rule != ALL:
            values.update(flatten(g.metrics.model_dump(mode="json"), f"rule/{g.rule}"))
    values[STEP_METRIC] = float(reduction.group(model, domain).step)
    return values


def _value(x) -> str:
    return str(getattr(x, "value", x))


def episode_rows(reduction: Reduction) -> dict[tuple[str, str], list[list]]:
    """The per-episode table (TABLE_COLUMNS) of every (checkpoint, domain)."""
    rows = defaultdict(list)
    for ep in reduction.episodes:
        s = ep.score
        rows[(ep.model, s.domain)].append([
            s.task_id, ep.trial, s.label.rule, s.label.should_transfer, s.transferred, s.reward,
            s.tau2_reward, ",".join(_value(v.rule) for v in s.violations),
            ",".join(_value(f.kind) for f in s.format_errors), _value(s.termination_reason),
            s.n_assistant_turns])
    return rows


@contextlib.contextmanager
def _wandb_env(wandb_dir: Path):
    """W&B's directories inside the run directory, for the duration of the logging only."""
    dirs = {"WANDB_DIR": wandb_dir, "WANDB_CONFIG_DIR": wandb_dir / "config",
            "WANDB_CACHE_DIR": wandb_dir / "cache", "WANDB_DATA_DIR": wandb_dir / "data"}
    env = {**{k: str(v) for k, v in dirs.items()}, "WANDB_SILENT": "true"}
    saved = {k: os.environ.get(k) for k in env}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _log_one(reduction: Reduction, run: RunDir, model: str, domain: str, rows: list[list], mode: str,
             logger_cfg: dict) -> str:
    import wandb

    step = reduction.group(model, domain).step
    rid = run_id(run.root, model, domain)
    config = {**run.config, "eval": {"checkpoint": model, "step": step, "domain": domain, "run_dir": str(run.root)}}
    wb = wandb.init(
        project=logger_cfg.get("project", "handoff"), entity=logger_cfg.get("entity"),
        group=reduction.run, job_type="eval", name=f"{model}/{domain}", id=rid, resume="allow",
        tags=[reduction.run, model, domain, *logger_cfg.get("tags", [])], config=config,
        dir=str(run.wandb), mode=mode, reinit="create_new",
        settings=wandb.Settings(console="off", x_disable_stats=True,
                                init_timeout=logger_cfg.get("init_timeout_s", 60)),
    )
    try:
        wb.define_metric(STEP_METRIC)
        wb.define_metric("*", step_metric=STEP_METRIC)
        values = run_values(reduction, model, domain)
        table = wandb.Table(columns=TABLE_COLUMNS, data=rows)
        wb.log({**values, "episodes": table})
        wb.summary.update(values)
    finally:
        wb.finish()
    return rid


def _error(g, mode: str, exc: Exception) -> str:
    message = " ".join(str(exc).split())
    return f"{g.model}/{g.domain} ({mode}): {type(exc).__name__}: {message}"


def resolve_mode(logger_cfg: dict) -> str:
    """online when a W&B key is configured or the config asks for it, else offline."""
    if logger_cfg.get("mode") == "online" or os.environ.get("WANDB_API_KEY"):
        return "online"
    return "offline"


def log_reduction(run_dir: str | Path, reduction: Reduction, logger_cfg: dict | None = None) -> WandbResult:
    """Log every (checkpoint, domain) of the reduction. When the server cannot be reached, that
    run and all the following ones are written offline instead; failures are returned in `errors`."""
    run, logger_cfg = RunDir(run_dir), dict(logger_cfg or {})
    result = WandbResult(dir=run.wandb / "wandb", mode=resolve_mode(logger_cfg))
    mode, rows = result.mode, episode_rows(reduction)
    with _wandb_env(run.wandb):
        for g in reduction.slices():
            args = (reduction, run, g.model, g.domain, rows[(g.model, g.domain)])
            try:
                result.run_ids.append(_log_one(*args, mode, logger_cfg))
                continue
            except Exception as exc:  # noqa: BLE001 - reported; the reducer's files are already safe
                result.errors.append(_error(g, mode, exc))
            if mode != "offline":
                import wandb

                wandb.teardown()  # frees the run id the failed online run still holds
                mode = "offline"
                try:
                    result.run_ids.append(_log_one(*args, mode, logger_cfg))
                except Exception as exc:  # noqa: BLE001
                    result.errors.append(_error(g, mode, exc))
    return result
