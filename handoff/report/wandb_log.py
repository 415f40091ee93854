"""W&B logging of a reduced run (layout and reasons: docs/reports.md, "W&B").

One W&B run per (sweep, domain) whose history holds one row per checkpoint, in increasing
checkpoint step, drawn against `checkpoint/step` (define_metric). W&B's history is append-only (it
refuses a step lower than the current one), so a row is logged only once its place is final: the
checkpoint and every checkpoint before it in step order have all their planned shards. Later
checkpoints are held back until a resume finishes the missing ones. Each logging appends only the
rows not logged before (wandb/logged.json records them), at `_step` = the row's index, so a sweep
that failed and was resumed ends with the same history as one that never failed. Offline, each
logging that has new rows writes one more offline run with the same id (resume="allow"), its
directory named after the rows it holds, so two never collide; `wandb sync` uploads them in order.

Checkpoints imported without `--step` (`handoff import`: unrelated files, all at step 0) are a set,
not a curve: their history rows hold each checkpoint's episode table and name but no metric (so W&B
draws no line through them), and the run holds the set itself: a `checkpoints` table (one row per
checkpoint, every metric a column) and `by_checkpoint/<checkpoint>` in the summary.

`logger.training_run=ENTITY/PROJECT/RUN_ID` also appends the rows to an existing training run
under `eval/<domain>/...`, drawn against `eval/step` (= the checkpoint's training step).

Settings follow W&B's conventions: a value in the sweep config's `logger` wins, else WANDB_MODE,
WANDB_PROJECT, WANDB_ENTITY, WANDB_DIR, else offline / "handoff" / the default entity / the run
directory. Logging failures are returned, never raised: the reducer's files are written first, and
an unreachable server makes that run and the following ones be written offline instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from pydantic import BaseModel, Field

from handoff.records import write_atomic
from handoff.report.adaptive import adaptive_result, in_rounds, scheduled_trials, wandb_summary
from handoff.report.reducer import GroupMetrics, Reduction
from handoff.report.transcripts import page, transcripts_of
from handoff.rules.metrics import Interval, Metrics
from handoff.rundir import RunDir
from handoff.scoring import ScoredEpisode

STEP_METRIC = "checkpoint/step"
TRAINING_STEP_METRIC = "eval/step"
BEST = "best"
SET_TABLE, BY_CHECKPOINT, CHECKPOINT_KEY = "checkpoints", "by_checkpoint", "checkpoint"
TABLE_COLUMNS = ["checkpoint", "step", "domain", "task_id", "trial", "rule", "should_transfer", "transferred",
                 "outcome", "handoff_turn", "reward", "tau2_reward", "violations", "format_errors", "termination",
                 "turns", "episode_should_transfer", "initiator", "user_request_turn", "agent_offer_turn",
                 "user_request_offscript", "transcript"]
TRANSCRIPTS = 200
"""Default of `logger.transcripts`: a checkpoint's episode table holds the transcript of every
episode when it has at most this many, else of its first this many whose hand-off is not correct."""
MODES = {"online": "online", "offline": "offline", "disabled": "disabled", "run": "online", "dryrun": "offline"}


class WandbError(ValueError):
    """A logger setting W&B cannot use (it names the key)."""


class Target(BaseModel):
    """Where the runs go, after the sweep config and W&B's environment variables are applied."""

    mode: str
    project: str
    entity: str | None
    dir: Path

    def path(self, run_id: str) -> str:
        return f"{self.entity or '<your entity>'}/{self.project}/runs/{run_id}"


class WandbResult(BaseModel):
    dir: Path = Field(description="where the offline run directories are: `wandb sync DIR/offline-run-*`")
    run_ids: list[str] = Field(default_factory=list)
    mode: str = "offline"
    logged_rows: int = 0
    held_back: list[str] = Field(default_factory=list, description="checkpoints waiting for an earlier one")
    errors: list[str] = Field(default_factory=list)


class Row(BaseModel):
    """One history row: a checkpoint of one domain."""

    checkpoint: str
    step: int
    values: dict[str, float]


def resolve_target(logger_cfg: dict, run_dir: Path) -> Target:
    """The sweep config's value, else W&B's environment variable, else offline / handoff / the run dir."""
    env = os.environ
    raw = logger_cfg.get("mode") or env.get("WANDB_MODE") or "offline"
    if raw not in MODES:
        source = "logger.mode" if logger_cfg.get("mode") else "WANDB_MODE"
        raise WandbError(f"{source}={raw!r}: expected one of {', '.join(MODES)}")
    return Target(mode=MODES[raw], project=logger_cfg.get("project") or env.get("WANDB_PROJECT") or "handoff",
                  entity=logger_cfg.get("entity") or env.get("WANDB_ENTITY") or None,
                  dir=Path(logger_cfg.get("dir") or env.get("WANDB_DIR") or run_dir))


def run_id(run: RunDir, domain: str) -> str:
    """The W&B run id of one (sweep, domain): unique per run directory, stable across its resumes."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{run.name}-{domain}")[:40]
    return f"{slug}-{hashlib.sha256(f'{run.manifest.run_uuid}|{domain}'.encode()).hexdigest()[:12]}"


def run_name(run: RunDir, domain: str) -> str:
    """Name and group of a (sweep, domain) run: the run directory's name (by default the sweep name
    and its start time, so two sweeps draw two lines) and the domain (a group never mixes domains)."""
    return f"{run.root.resolve().name}/{domain}"


def _put(out: dict, key: str, iv: Interval) -> None:
    """The value, its interval and what it rests on: `n/<name>` (episodes; the positives of
    precision and recall; turns, tasks where docs/metrics.md says so) and `n_tasks/<name>`."""
    if iv.value is not None:
        out[key] = iv.value
    for bound in ("lo", "hi"):
        if getattr(iv, bound) is not None:
            out[f"ci95/{key}/{bound}"] = getattr(iv, bound)
    out[f"n/{key}"] = float(iv.n)
    if iv.tasks is not None:
        out[f"n_tasks/{key}"] = float(iv.tasks)


def metric_values(m: Metrics) -> dict[str, float]:
    """A history row's metrics: the value of each as `<name>`, its 95% interval as `ci95/<name>/lo|hi`,
    its counts as `n/<name>` and `n_tasks/<name>`."""
    out: dict[str, float] = {"n_episodes": float(m.n_episodes), "n_tasks": float(m.n_tasks)}
    for name in ("precision", "recall", "f1", "accuracy"):
        _put(out, f"handoff/{name}", getattr(m.handoff, name))
    for prefix, ivs in (("outcome", m.outcomes), ("transfer_rate", m.transfer_rate_by_rule),
                        ("handoff_turn", m.handoff_turn_by_rule), ("violation_rate", m.violation_rate),
                        ("format_errors_per_100_turns", m.format_errors_per_100_turns),
                        ("termination", m.termination)):
        for key, iv in ivs.items():
            _put(out, f"{prefix}/{key}", iv)
    if len(m.pass_hat_k) > 1:  # pass^1 is tau2_success; pass^k only says more with several trials
        for k, iv in m.pass_hat_k.items():
            _put(out, f"pass_hat_k/{k}", iv)
    for name in ("tau2_reward", "tau2_success", "reward", "assistant_turns", "completion_tokens"):
        _put(out, name, getattr(m, name))
    return out | attributed_values(m)


def attributed_values(m: Metrics) -> dict[str, float]:
    """The keys under the episode label, of who asked for the human, and of the user simulator
    (docs/metrics.md, "Episode labels"); none for a reduction made before they existed."""
    out: dict[str, float] = {}
    if m.handoff_episode is not None:
        for name in ("precision", "recall", "f1", "accuracy"):
            _put(out, f"handoff_episode/{name}", getattr(m.handoff_episode, name))
    for prefix, ivs in (("outcome_episode", m.outcomes_episode), ("outcome_detail", m.outcome_details),
                        ("outcome_detail_episode", m.outcome_details_episode),
                        ("transfer_rate_episode", m.transfer_rate_by_episode_rule), ("initiator", m.handoff_initiator),
                        ("handoff_delay", m.handoff_delay_by_rule)):
        for key, iv in ivs.items():
            _put(out, f"{prefix}/{key}", iv)
    for name in ("user_request_offscript", "user_ended_for_transfer"):
        if getattr(m, name) is not None:
            _put(out, f"user_simulator/{name}", getattr(m, name))
    for name in ("handoff_after_write", "handoff_summary_complete", "unneeded_handoff_after_trying"):
        if getattr(m, name) is not None:
            _put(out, name, getattr(m, name))
    return out


def reachable_values(g: GroupMetrics) -> dict[str, float]:
    """tau2's reward and success without the tasks whose gold no correct agent reaches
    (docs/metrics.md); none for a reduction made before they existed."""
    out: dict[str, float] = {"n_unreachable": float(g.n_unreachable)}
    for name in ("tau2_reward_reachable", "tau2_success_reachable"):
        if getattr(g, name) is not None:
            _put(out, name, getattr(g, name))
    return out


def cost_values(g: GroupMetrics) -> dict[str, float]:
    """The slice's cost (handoff.report.cost) as `cost/<unit>/<per>` with its interval; none where
    n/a (a run before shard schema 2, a model litellm has no price for)."""
    out: dict[str, float] = {}
    if g.cost is None or g.cost.n_costed == 0:
        return out
    for unit in ("usd", "engine_s", "gpu_s"):
        stat = getattr(g.cost, unit)
        if stat.total is not None:
            out[f"cost/{unit}/total"] = stat.total
        for per in ("per_episode", "per_tau2_success", "per_correct_handoff"):
            _put(out, f"cost/{unit}/{per}", getattr(stat, per))
    return out


def _planned(run: RunDir, reduction: Reduction) -> tuple[list[tuple[str, int]], dict[tuple[str, str], set[str]]]:
    """The checkpoints in step order, and the shard ids planned per (checkpoint, domain); a run
    without a recorded plan (synthetic runs) has what its shards hold."""
    skipped = run.manifest.skipped()  # deleted before their episodes finished (handoff follow): no row
    ckpts = [(c["name"], c["step"]) for c in run.manifest.checkpoints] or reduction.checkpoints()
    ckpts = [c for c in ckpts if c[0] not in skipped]
    plan: dict[tuple[str, str], set[str]] = {}
    trials = scheduled_trials(run)  # an adaptive sweep: only the rounds each checkpoint was given
    for shard in run.manifest.shards:
        if shard["model"] in skipped:
            continue
        if trials is None or shard["trial"] < trials.get(shard["model"], 0):
            plan.setdefault((shard["model"], shard["domain"]), set()).add(shard["id"])
    return sorted(ckpts, key=lambda c: (c[1], c[0])), plan


def final_rows(run: RunDir, reduction: Reduction, domain: str) -> tuple[list[Row], list[tuple[str, str]]]:
    """The rows of one domain whose place in the history is final, and the checkpoints held back
    (with the incomplete checkpoint each waits for). A checkpoint an unfinished adaptive sweep may
    still give rounds is incomplete, whatever shards it has."""
    ckpts, plan = _planned(run, reduction)
    done, unsettled = set(reduction.shards), in_rounds(run)
    groups = {g.model: g for g in reduction.slices() if g.domain == domain}
    rows: list[Row] = []
    for i, (name, step) in enumerate(ckpts):
        planned = plan.get((name, domain))
        if plan and planned is None:  # planned in other domains only (an imported file): not this history's
            continue
        complete = name in groups and (planned is None or planned <= done) and name not in unsettled
        if not complete:
            return rows, [(c, name) for c, _ in ckpts[i + 1:] if c in groups]
        rows.append(Row(checkpoint=name, step=step, values={**metric_values(groups[name].metrics),
                                                            **reachable_values(groups[name]),
                                                            **cost_values(groups[name]),
                                                            STEP_METRIC: float(step)}))
    return rows, []


def best_of(rows: list[Row]) -> dict:
    """The best checkpoint by the ADR-004 reward (the earliest on a tie)."""
    scored = [r for r in rows if "reward" in r.values]
    if not scored:
        return {}
    best = max(scored, key=lambda r: (r.values["reward"], -r.step))
    return {f"{BEST}/checkpoint": best.checkpoint, f"{BEST}/step": best.step, f"{BEST}/reward": best.values["reward"]}


def is_set(run: RunDir) -> bool:
    """Checkpoints imported without --step: a set of files, not steps of one learning curve."""
    return run.manifest.imported is not None and not run.manifest.imported.curve


def place_of(run: RunDir, checkpoint: str, step: int) -> str:
    """Where a checkpoint's values are in its W&B run: a step of the curve, or a row of the set."""
    if is_set(run):
        return f"row {checkpoint!r} of its `{SET_TABLE}` table and `{BY_CHECKPOINT}/{checkpoint}` (a set, no step)"
    return f"{STEP_METRIC} = {step} ({checkpoint})"


def set_columns(rows: list[Row]) -> list[str]:
    """The `checkpoints` table's columns: the checkpoint, its step and domain, then every metric
    any row holds, in name order."""
    return ["checkpoint", "step", "domain", *sorted({k for r in rows for k in r.values} - {STEP_METRIC})]


def set_table(wandb, rows: list[Row], domain: str):
    """One row per checkpoint of a set (a metric a checkpoint lacks is empty)."""
    columns = set_columns(rows)
    return wandb.Table(columns=columns, data=[[r.checkpoint, r.step, domain, *(r.values.get(c) for c in columns[3:])]
                                              for r in rows])


def set_summary(rows: list[Row]) -> dict:
    """Each checkpoint's values in the summary, as `by_checkpoint/<checkpoint>/<metric>`."""
    return {f"{BY_CHECKPOINT}/{r.checkpoint}": {k: v for k, v in r.values.items() if k != STEP_METRIC} for r in rows}


def _value(x) -> str:
    return str(getattr(x, "value", x))


def with_transcript(episodes: list[ScoredEpisode], limit: int) -> set[tuple]:
    """The keys of the episodes whose transcript is uploaded (TRANSCRIPTS): all of them when there
    are at most `limit`, else the first `limit` whose hand-off is not correct."""
    if len(episodes) > limit:
        episodes = [ep for ep in episodes if not ep.score.outcome.correct][:limit]
    return {ep.key for ep in episodes}


def episode_rows(reduction: Reduction, checkpoint: str, domain: str, transcripts: dict[tuple, str] | None = None,
                 html=str) -> list[list]:
    """The episode table (TABLE_COLUMNS) of one checkpoint and domain; `html` makes the transcript
    cell (wandb.Html) of the episodes in `transcripts`, the others have none."""
    out, transcripts = [], transcripts or {}
    for ep in reduction.episodes:
        s = ep.score
        if (ep.model, s.domain) == (checkpoint, domain):
            transcript = transcripts.get(ep.key)
            out.append([ep.model, ep.step, s.domain, s.task_id, ep.trial, s.label.rule, s.label.should_transfer,
                        s.transferred, s.outcome.value, s.handoff_turn, s.reward, s.tau2_reward,
                        ",".join(_value(v.rule) for v in s.violations),
                        ",".join(_value(f.kind) for f in s.format_errors), _value(s.termination_reason),
                        s.n_assistant_turns, s.episode_should_transfer,
                        _value(s.handoff_initiator) if s.handoff_initiator else None, s.user_request_turn,
                        s.agent_offer_turn, s.user_request_offscript, None if transcript is None else html(transcript)])
    return out


def _transcripts(run: RunDir, reduction: Reduction, checkpoint: str, domain: str, limit: int) -> dict[tuple, str]:
    """The transcript pages (TRANSCRIPTS) of one checkpoint and domain, by episode key."""
    slice_ = [ep for ep in reduction.episodes if (ep.model, ep.score.domain) == (checkpoint, domain)]
    keys = with_transcript(slice_, limit)
    wanted = {shard: [ep for ep in eps if ep.key in keys] for shard, eps in reduction.by_shard.items()}
    return {key: page(f"{key[2]} trial {key[3]}", fragment) for key, fragment in transcripts_of(run, wanted).items()}


class _State:
    """wandb/logged.json: the rows (checkpoint, step) already logged into each W&B run id."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[str, list[list]] = json.loads(path.read_text()) if path.is_file() else {}

    def logged(self, rid: str) -> list[tuple[str, int]]:
        return [tuple(r) for r in self.rows.get(rid, [])]

    def record(self, rid: str, rows: list[tuple[str, int]]) -> None:
        self.rows[rid] = [list(r) for r in rows]
        write_atomic(self.path, json.dumps(self.rows, indent=1, sort_keys=True) + "\n")


def _settings(wandb, logger_cfg: dict, first_step: int):
    # The offline directory is named after the first row it holds: unique per run id, and in order.
    return wandb.Settings(console="off", x_disable_stats=True, x_sync_dir_suffix=f"from{first_step}",
                          init_timeout=logger_cfg.get("init_timeout_s", 60))


def _log_eval_run(reduction: Reduction, run: RunDir, domain: str, rows: list[Row], start: int,
                  target: Target, logger_cfg: dict, mode: str) -> None:
    """Append rows[start:] to the W&B run of (sweep, domain) at _step = their index."""
    import wandb

    config = {**run.config, "eval": {"domain": domain, "run_dir": str(run.root), "run_uuid": run.manifest.run_uuid}}
    wb = wandb.init(
        project=target.project, entity=target.entity, dir=str(target.dir), mode=mode,
        id=run_id(run, domain), resume="allow", name=run_name(run, domain), group=run_name(run, domain),
        job_type="eval", tags=[run.name, domain, *logger_cfg.get("tags", [])], config=config,
        reinit="create_new", settings=_settings(wandb, logger_cfg, start))
    try:
        as_set = is_set(run)
        if not as_set:
            wb.define_metric(STEP_METRIC)
            wb.define_metric("*", step_metric=STEP_METRIC)
        limit = TRANSCRIPTS if logger_cfg.get("transcripts") is None else logger_cfg["transcripts"]
        for index, row in enumerate(rows[start:], start):
            transcripts = _transcripts(run, reduction, row.checkpoint, domain, limit)
            data = episode_rows(reduction, row.checkpoint, domain, transcripts, lambda h: wandb.Html(h, inject=False))
            table = wandb.Table(columns=TABLE_COLUMNS, data=data)
            values = {CHECKPOINT_KEY: row.checkpoint} if as_set else row.values
            last = as_set and index == len(rows) - 1
            wb.log({**values, "episodes": table, **({SET_TABLE: set_table(wandb, rows, domain)} if last else {})},
                   step=index)
        adaptive = adaptive_result(run)
        wb.summary.update(best_of(rows) | (wandb_summary(adaptive) if adaptive is not None else {})
                          | (set_summary(rows) if as_set else {}))
    finally:
        wb.finish()


def _log_training_run(new: list[tuple[str, Row]], target: Target, logger_cfg: dict, start: int, mode: str) -> None:
    """Append the new rows to an existing training run as eval/<domain>/<metric>, against eval/step
    (the training run's own step is past the checkpoints already: W&B refuses lower steps)."""
    import wandb

    entity, project, rid = _training_run(logger_cfg)
    wb = wandb.init(project=project, entity=entity, id=rid, dir=str(target.dir), mode=mode,
                    resume="allow" if mode == "offline" else "must", reinit="create_new",
                    settings=_settings(wandb, logger_cfg, start))
    try:
        wb.define_metric(TRAINING_STEP_METRIC)
        wb.define_metric("eval/*", step_metric=TRAINING_STEP_METRIC)
        for domain, row in new:
            values = {f"eval/{domain}/{k}": v for k, v in row.values.items() if k != STEP_METRIC}
            wb.log({**values, TRAINING_STEP_METRIC: row.step})
    finally:
        wb.finish()


def _training_run(logger_cfg: dict) -> tuple[str, str, str]:
    parts = str(logger_cfg["training_run"]).split("/")
    if len(parts) != 3 or not all(parts):
        raise WandbError(f"logger.training_run={logger_cfg['training_run']!r}: expected ENTITY/PROJECT/RUN_ID")
    return parts[0], parts[1], parts[2]


def _error(what: str, mode: str, exc: Exception) -> str:
    message = " ".join(str(exc).split())
    return f"{what} ({mode}): {type(exc).__name__}: {message}"


# wandb's own service process gone (killed, or its socket closed under load): a fresh one may do
LOST_SERVICE = {"MailboxClosedError", "HandleAbandonedError", "ConnectionResetError", "BrokenPipeError"}


def _service_lost(exc: BaseException | None) -> bool:
    while exc is not None:
        if type(exc).__name__ in LOST_SERVICE:
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _teardown(wandb) -> None:
    """wandb.teardown(), which with its service lost may raise the broken socket's error, or exit
    the process with the service's exit code: the reducer's files are safe, the report must follow."""
    try:
        wandb.teardown()
    except (Exception, SystemExit):  # noqa: BLE001 - the call's own error is reported
        pass


class _Logger:
    """Runs each logging call online first when asked; once one fails, it and the rest go offline.
    A call that lost wandb's service process is tried once more, with a new one."""

    def __init__(self, mode: str):
        self.mode = mode
        self.errors: list[str] = []

    def __call__(self, what: str, log, *args, retry: bool = True) -> bool:
        import wandb

        try:
            log(*args, mode=self.mode)
            return True
        except Exception as exc:  # noqa: BLE001 - reported; the reducer's files are already safe
            _teardown(wandb)  # frees the run id the failed run still holds, and a lost service
            if retry and _service_lost(exc):  # reported only if the new service fails too
                return self(what, log, *args, retry=False)
            self.errors.append(_error(what, self.mode, exc))
        if self.mode == "offline":
            return False
        self.mode = "offline"
        return self(what, log, *args)


def log_reduction(run_dir: str | Path, reduction: Reduction, logger_cfg: dict | None = None) -> WandbResult:
    """Append every (sweep, domain) run's new final rows, and the training run's when configured."""
    run, logger_cfg = RunDir(run_dir), dict(logger_cfg or {})
    try:
        target = resolve_target(logger_cfg, run.root)
    except WandbError as exc:
        return WandbResult(dir=run.wandb, mode="invalid", errors=[str(exc)])
    result = WandbResult(dir=target.dir / "wandb", mode=target.mode)
    if target.mode == "disabled":
        return result
    state, logger = _State(run.wandb_logged), _Logger(target.mode)
    os.environ.setdefault("WANDB_SILENT", "true")
    final = {}
    for domain in reduction.domains():
        rows, held = final_rows(run, reduction, domain)
        rid, final[domain] = run_id(run, domain), rows
        result.run_ids.append(rid)
        logged = state.logged(rid)
        names = {c for c, _ in logged}
        result.held_back += [f"{domain}: {c} (waits for {gap})" for c, gap in held if c not in names]
        start = len(logged)
        if [(r.checkpoint, r.step) for r in rows[:start]] != logged[:len(rows)]:
            result.errors.append(f"{rid}: W&B already holds checkpoints {logged}, which no longer lead this "
                                 "run's history; W&B cannot rewrite them")
            continue
        if len(rows) <= start:  # nothing new (or a logged checkpoint's shards are being redone)
            continue
        if logger(f"{run.name}/{domain}", _log_eval_run, reduction, run, domain, rows, start, target, logger_cfg):
            state.record(rid, [(r.checkpoint, r.step) for r in rows])
            result.logged_rows += len(rows) - start
    if logger_cfg.get("training_run"):
        _log_into_training_run(final, target, logger, logger_cfg, state, result)
    result.errors += logger.errors
    result.mode = logger.mode
    return result


def _log_into_training_run(final: dict[str, list[Row]], target: Target, logger: _Logger, logger_cfg: dict,
                           state: _State, result: WandbResult) -> None:
    """The final rows of every domain not yet in the training run, in step order."""
    try:
        key = "training:" + "/".join(_training_run(logger_cfg))
    except WandbError as exc:
        result.errors.append(str(exc))
        return
    logged = state.logged(key)
    new = sorted(((d, r) for d, rows in final.items() for r in rows if (f"{d}/{r.checkpoint}", r.step) not in logged),
                 key=lambda d_r: (d_r[1].step, d_r[0]))
    if new and logger(logger_cfg["training_run"], _log_training_run, new, target, logger_cfg, len(logged)):
        state.record(key, logged + [(f"{d}/{r.checkpoint}", r.step) for d, r in new])
