"""Reporting on a run directory: the incremental reducer (rules + metrics per checkpoint, domain
and rule id), W&B logging, the Markdown/HTML report, paired comparison and the tau2 export.

`finish_run` is what a sweep calls at its end.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import handoff
from handoff.records import write_atomic
from handoff.report.reducer import ALL, GroupMetrics, Reduction, cache_key, reduce_locked, reduce_run
from handoff.report.render import write_report
from handoff.report.wandb_log import WandbResult, log_reduction
from handoff.rundir import RunDir, RunDirError

__all__ = ["ALL", "GroupMetrics", "Reduction", "RunDir", "RunDirError", "WandbResult", "finish_run",
           "log_reduction", "reduce_run", "write_report"]


def _as_dict(cfg) -> dict:
    if cfg is None or isinstance(cfg, dict):
        return cfg or {}
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def finish_run(run_dir: str | Path, cfg=None, report: bool = True) -> dict[str, Path]:
    """Reduce the run (written to reduced/ before anything else), log it to W&B, write the report.

    `cfg` is the resolved sweep config (dict or OmegaConf); default: the run's manifest. W&B settings
    come from its `logger`, else W&B's variables (docs/reports.md); W&B failures are printed and
    written to wandb/errors.txt, never raised. Returns the paths of metrics.json, the per-shard
    scores, the W&B run directories (`wandb sync <path>/offline-run-*`) and the report files.
    The report is rewritten only when its inputs changed (report_inputs). All of it holds the run's
    reducer lock, so that two reducers never log the same W&B rows."""
    run = RunDir(run_dir)
    with run.reducing():
        return _finish_locked(run, cfg, report)


def report_inputs(run: RunDir, reduction: Reduction, logger_cfg: dict) -> str:
    """sha256 of what the report is made of: the metrics, the score cache key of every shard reduced
    (not a corrupt file's, which the reducer skips), the W&B settings, handoff's version and the
    source of handoff.report."""
    digest = hashlib.sha256(run.metrics.read_bytes())
    for shard in reduction.shards:
        digest.update(json.dumps([shard, cache_key(run, shard)]).encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    digest.update(json.dumps([logger_cfg, handoff.__version__], sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _finish_locked(run: RunDir, cfg, report: bool) -> dict[str, Path]:
    from handoff.report.adaptive import write_adaptive

    reduction = reduce_locked(run)
    paths = {"metrics": run.metrics, "scores": run.scores_dir}
    if write_adaptive(run) is not None:
        paths["adaptive"] = run.metrics.parent / "adaptive.json"
    logger_cfg = (_as_dict(cfg) or run.config).get("logger") or {}
    result = log_reduction(run.root, reduction, logger_cfg)
    if result.mode != "disabled":
        paths["wandb"] = result.dir
    errors = run.wandb_errors
    if result.errors:
        write_atomic(errors, "\n".join(result.errors) + "\n")
        paths["wandb_errors"] = errors
        print(f"handoff: W&B logging failed for {len(result.errors)} run(s), results are safe in "
              f"{paths['metrics']}; see {errors}", file=sys.stderr)
    else:
        errors.unlink(missing_ok=True)
    if result.held_back:
        print("handoff: not in W&B until the checkpoint before them is complete (resume the sweep): "
              + "; ".join(result.held_back), file=sys.stderr)
    if report:
        paths.update(_report(run, reduction, logger_cfg))
    return paths


def _report(run: RunDir, reduction: Reduction, logger_cfg: dict) -> dict[str, Path]:
    """The report, rewritten unless the one there was made from the same inputs."""
    stamp, inputs = run.report / ".inputs.sha256", report_inputs(run, reduction, logger_cfg)
    if run.report_txt.is_file() and stamp.is_file() and stamp.read_text() == inputs:
        return {"report_md": run.report_md, "report_html": run.report_html, "report_txt": run.report_txt}
    paths = write_report(run.root, reduction)
    write_atomic(stamp, inputs)
    return paths
