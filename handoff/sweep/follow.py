"""`handoff follow WATCH RUN_DIR [overrides]`: a run that grows with training.

WATCH is a verl checkpoint directory (the trainer's `default_local_dir`: `global_step_N/actor`
beside `latest_checkpointed_iteration.txt`; it may not exist yet) or a glob of checkpoint directories
(a pattern: `*`, `?` or `[`). A watcher thread
looks every `poll_s` for complete checkpoints:

- verl's directory: `global_step_N` is complete once verl's marker, `latest_checkpointed_iteration.txt`,
  holds N or more (verl writes it after the whole checkpoint is saved), never before;
- a glob: once the names, sizes and modification times of the directory's files have stayed the same
  for `settle_s` (and none was modified within `settle_s`).

Each complete checkpoint is recorded as seen (`<run>/follow/seen.jsonl`: path, step, when) and
evaluated once, in a batch: the first batch creates the run (the sweep's config with
`model=[checkpoints]` and the watched glob), each later one extends it (handoff.sweep.extend) by the
checkpoints seen since, then runs, reduces, logs to W&B and reports as a sweep does. Ray, the
episode workers (handoff.sweep.session.one_ray) and the engines (handoff.sweep.kept) stay up between
batches: an engine loads the next checkpoint in place. A checkpoint deleted before its
episodes finished (verl keeps the last `max_ckpt_to_keep`) is recorded in the manifest as skipped,
with the reason: its shards are not run, and it has no W&B row. Follow stops on a sentinel file,
after `until_step`, or after `idle_timeout_s` without a new checkpoint, and prints what it did.

The run's follow lock (`.follow.lock`) refuses a second follow of the run; a follow killed and
started again redoes nothing finished (the run's shards) and evaluates what arrived meanwhile.
"""

from __future__ import annotations

import fcntl
import glob as globlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from handoff.ctrl_c import raise_if_pressed
from handoff.rundir import Manifest
from handoff.sweep.config import parse_step
from handoff.sweep.interrupt import Interrupted
from handoff.sweep.rundir import RunLocked, SweepRun

VERL_MARKER = "latest_checkpointed_iteration.txt"


@dataclass
class Watch:
    """Where the checkpoints appear and when one is complete (see the module's docstring)."""

    target: str
    settle_s: float = 10.0
    _stable: dict[str, tuple[tuple, float]] = field(default_factory=dict)

    @property
    def verl(self) -> bool:
        """A plain path is verl's directory (it may not exist yet); a pattern (`*`, `?`, `[`) is a glob."""
        return not globlib.has_magic(self.target)

    @property
    def glob(self) -> str:
        return str(Path(self.target) / "global_step_*" / "actor") if self.verl else self.target

    @property
    def signal(self) -> str:
        return (f"verl's marker {VERL_MARKER}" if self.verl
                else f"files stable in names, sizes and times for {self.settle_s:g} s")

    def complete(self) -> list[str]:
        """The checkpoint directories complete now."""
        paths = sorted(p for p in globlib.glob(self.glob) if os.path.isdir(p))
        if self.verl:
            latest = _marker(Path(self.target) / VERL_MARKER)
            return [p for p in paths if (parse_step(p, None) or 0) <= latest]
        return [p for p in paths if self._settled(p)]

    def _settled(self, path: str) -> bool:
        now, files = time.time(), _files(path)
        if files is None or any(now - mtime < self.settle_s for _, _, mtime in files):
            self._stable.pop(path, None)
            return False
        since = self._stable.get(path)
        if since is None or since[0] != files:
            self._stable[path] = (files, now)
            return False
        return now - since[1] >= self.settle_s


def _marker(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):  # absent, or being written
        return -1


def _files(path: str) -> tuple | None:
    out = []
    try:
        for root, _, names in os.walk(path):
            for name in names:
                st = os.stat(os.path.join(root, name))
                out.append((os.path.relpath(os.path.join(root, name), path), st.st_size, st.st_mtime))
    except OSError:  # deleted while we looked
        return None
    return tuple(sorted(out))


class Watcher(threading.Thread):
    """Records every complete checkpoint once (seen.jsonl), every `poll_s`, also while a batch runs."""

    def __init__(self, watch: Watch, log: Path, poll_s: float):
        super().__init__(name="handoff-follow-watcher", daemon=True)
        self.watch, self.log, self.poll_s = watch, log, poll_s
        self.arrived, self._halt, self._lock = threading.Event(), threading.Event(), threading.Lock()
        self.seen: dict[str, float] = {}
        if log.is_file():
            for line in log.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    self.seen.setdefault(entry["path"], entry["seen_at"])
                except (ValueError, KeyError, TypeError):  # a line torn by a kill
                    continue

    def run(self) -> None:
        while not self._halt.is_set():
            self.scan()
            self._halt.wait(self.poll_s)

    def scan(self) -> None:
        try:
            complete = self.watch.complete()
        except OSError:
            return
        with self._lock:
            new = [p for p in complete if p not in self.seen]
            for path in new:
                self.seen[path] = time.time()
                self._append({"path": path, "step": parse_step(path, None), "seen_at": self.seen[path]})
        if new:
            self.arrived.set()

    def _append(self, entry: dict) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as f:
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.seen)

    def stop(self) -> None:
        self._halt.set()


@dataclass
class Stop:
    until_step: int | None = None
    stop_file: str | None = None
    idle_timeout_s: float | None = None

    def reason(self, manifest: Manifest | None, idle_s: float, unhandled: int) -> str | None:
        """Why follow stops now, or None. Nothing stops it while a seen checkpoint is unhandled."""
        if unhandled:
            return None
        if self.stop_file and Path(self.stop_file).exists():
            return f"sentinel file {self.stop_file}"
        steps = [c["step"] for c in manifest.checkpoints] if manifest else []
        steps += [parse_step(name, None) or 0 for name in (manifest.skipped() if manifest else {})]
        if self.until_step is not None and steps and max(steps) >= self.until_step:
            return f"step {max(steps)} >= --until-step {self.until_step}"
        if self.idle_timeout_s is not None and idle_s >= self.idle_timeout_s:
            return f"no new checkpoint for {idle_s:.0f} s (--idle-timeout {self.idle_timeout_s:g})"
        return None


@dataclass
class FollowResult:
    run_dir: Path
    evaluated: list[str]
    skipped: dict[str, str]
    failed_shards: list[str]
    stopped: str
    batches: int


def follow_lock(run: SweepRun):
    """The run's follow lock, held for this process's life: a second follow of the run is refused."""
    run.root.mkdir(parents=True, exist_ok=True)
    handle = open(run.root / ".follow.lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise RunLocked(f"{run.root}: another `handoff follow` is following this run") from None
    return handle


def command(watch: str, run_dir: Path, flags: list[str], overrides: list[str]) -> str:
    """The command line that continues a follow (its options first: argparse wants them there)."""
    return " ".join(["handoff follow", *flags, watch, str(run_dir), *overrides])


def follow(watch_target: str, run_dir: str | Path, overrides: list[str], stop: Stop, poll_s: float = 2.0,
           settle_s: float = 10.0, flags: list[str] | None = None) -> FollowResult:
    """Follow `watch_target` into the run at `run_dir` until `stop` says so (see the module)."""
    from handoff.sweep.kept import keep_engines
    from handoff.sweep.session import one_ray

    run = SweepRun(Path(run_dir).resolve())
    watch = Watch(watch_target, settle_s)
    base = ["model=[checkpoints]", f"model.checkpoints.glob={watch.glob}", *overrides, f"run_dir={run.root}"]
    base += check_config(base)
    lock = follow_lock(run)
    watcher = Watcher(watch, run.root / "follow" / "seen.jsonl", poll_s)
    print(f"follow {watch.glob} into {run.root}: a checkpoint is complete on {watch.signal}", file=sys.stderr,
          flush=True)
    watcher.start()
    try:
        with one_ray(), keep_engines():  # Ray, the episode workers and the engines stay up between batches
            stopped, batches = _loop(run, base, watcher, stop, poll_s)
    except KeyboardInterrupt:
        raise Interrupted(run.root, command(watch_target, run.root, flags or [], overrides)) from None
    finally:
        watcher.stop()
        lock.close()
    return _result(run, stopped, batches)


def _loop(run: SweepRun, base: list[str], watcher: Watcher, stop: Stop, poll_s: float) -> tuple[str, int]:
    """Batches until `stop` says why: (that reason, the number of batches)."""
    batches, first, last_new = 0, True, time.monotonic()
    while True:
        seen = watcher.snapshot()
        manifest = run.read_manifest() if run.exists() else None
        plan = _batch_plan(manifest, seen, run, first)
        first = False
        if plan is not None:
            _run_batch(run, base, seen, plan)
            batches, manifest = batches + 1, run.read_manifest()
        stopped = stop.reason(manifest, time.monotonic() - last_new, len(_unhandled(manifest, seen)))
        if stopped:
            _settle(run, base, seen, manifest)
            return stopped, batches
        if watcher.arrived.wait(poll_s):
            watcher.arrived.clear()
            last_new = time.monotonic()
        raise_if_pressed()  # a Ctrl-C Python dropped (handoff.ctrl_c)


def check_config(overrides: list[str]) -> list[str]:
    """A bad config or override fails now (exit 2), before anything is watched or started. Returns
    the overrides follow adds: `adaptive.growing=true` to an adaptive one (its set grows)."""
    from hydra.errors import HydraException

    from handoff.errors import ConfigError
    from handoff.sweep.config import validate
    from handoff.sweep.run import compose

    try:
        sweep = validate(compose(overrides), check_paths=False)
    except HydraException as exc:
        raise ConfigError(f"follow: cannot compose the overrides: {exc}") from None
    return ["adaptive.growing=true"] if sweep.adaptive.enabled and not sweep.adaptive.growing else []


@dataclass
class BatchPlan:
    skipped: dict[str, str]  # checkpoint name -> why


def _names(manifest: Manifest | None) -> tuple[dict[str, str], str, str | None]:
    """{path: checkpoint name} of the run, and the naming of new ones (model name, step_regex)."""
    if manifest is None:
        return {}, "policy", None
    model = (manifest.config.get("model") or {}).get("checkpoints") or {}
    return ({c["path"]: c["name"] for c in manifest.checkpoints}, model.get("name", "policy"),
            model.get("step_regex"))


def _unhandled(manifest: Manifest | None, seen: dict[str, float]) -> list[str]:
    """Seen checkpoints the run neither plans nor skipped."""
    paths, name, regex = _names(manifest)
    skipped = manifest.skipped() if manifest else {}
    return [p for p in seen if p not in paths and f"{name}-step{parse_step(p, regex)}" not in skipped]


def _gone(manifest: Manifest, seen: dict[str, float], run: SweepRun) -> dict[str, str]:
    """Checkpoints deleted from disk that the run has not finished: name -> why they are skipped."""
    paths, name, regex = _names(manifest)
    skipped, out = manifest.skipped(), {}
    for path in seen:
        ck = f"{name}-step{parse_step(path, regex)}"
        if path not in paths and ck not in skipped and not os.path.isdir(path):
            out[ck] = f"{path} was deleted before it was evaluated (seen complete, then gone from disk)"
    for ck in manifest.checkpoints:
        shards = _owed(manifest, ck["name"])
        done = sum(run.shard_path(s).is_file() for s in shards)
        if ck["name"] not in skipped and done < len(shards) and not os.path.isdir(ck["path"]):
            out[ck["name"]] = (f"{ck['path']} was deleted before its episodes finished ({done} of {len(shards)} "
                               "shards done): its numbers are left out, never shown as whole")
    return out


def _batch_plan(manifest: Manifest | None, seen: dict[str, float], run: SweepRun, first: bool) -> BatchPlan | None:
    """What the next batch does, or None when there is nothing to do: new checkpoints, deleted ones
    to record as skipped, or (at a start) the run's unfinished shards."""
    if manifest is None:
        return BatchPlan({}) if any(os.path.isdir(p) for p in seen) else None
    skipped = _gone(manifest, seen, run)
    paths, _, _ = _names(manifest)
    new = [p for p in seen if p not in paths and os.path.isdir(p)]
    if new or skipped or (first and _unfinished(manifest, run)):
        return BatchPlan(skipped)
    return None


def _owed(manifest: Manifest, checkpoint: str | None = None) -> list[str]:
    """The ids of the shards the run owes (of `checkpoint`, or of all): the plan's, but those of
    skipped checkpoints, and in an adaptive run only those of the trials its rounds give each one."""
    from handoff.report.adaptive import manifest_trials

    trials, skipped = manifest_trials(manifest), manifest.skipped()
    return [s["id"] for s in manifest.shards if s["model"] not in skipped and checkpoint in (None, s["model"])
            and (trials is None or s["trial"] < trials.get(s["model"], 0))]


def _unfinished(manifest: Manifest, run: SweepRun) -> bool:
    """Shards to run, or adaptive rounds to decide (a follow killed between a round's shards and its
    decision)."""
    from handoff.report.adaptive import rounds_finished

    return not rounds_finished(manifest) or any(not run.shard_path(s).is_file() for s in _owed(manifest))


def _settle(run: SweepRun, base: list[str], seen: dict[str, float], manifest: Manifest | None) -> None:
    """At the stop, an adaptive run's latest best gets its max_trials (handoff.report.adaptive.next_trials:
    between checkpoints it waits for the next one), so that its W&B row is written and final."""
    from handoff.report.adaptive import rounds_finished

    if manifest is not None and not rounds_finished(manifest, settle=True):
        _run_batch(run, base, seen, BatchPlan({}), settle=True)


def _run_batch(run: SweepRun, base: list[str], seen: dict[str, float], plan: BatchPlan, settle: bool = False
               ) -> None:
    """A batch: create or extend the run by the checkpoints seen, run, reduce, log and report it.
    `settle`: the adaptive rounds' last step gives the latest best its max_trials (_settle)."""
    from handoff.sweep.run import compose, execute, finish, prepare

    def accept(ck) -> bool:
        return ck.path in seen

    if run.exists():
        cfg = OmegaConf.create({"resume": str(run.root), "extend": str(run.root)})
        prepared = prepare(cfg, [f"extend={run.root}", *base], accept, plan.skipped)
    else:
        prepared = prepare(compose(base), base, accept)
    prepared.settle = settle
    try:
        summary = execute(prepared, progress=True)
        finish(prepared, summary)
    finally:
        prepared.run.unlock()


def _result(run: SweepRun, stopped: str, batches: int) -> FollowResult:
    manifest = run.read_manifest() if run.exists() else None
    skipped = manifest.skipped() if manifest else {}
    evaluated = [c["name"] for c in manifest.checkpoints if c["name"] not in skipped] if manifest else []
    return FollowResult(run.root, evaluated, skipped, run.failed_ids(), stopped, batches)


def summary_lines(result: FollowResult) -> list[str]:
    """What follow did, after the run's headline table: a batch's end printed it (as a sweep's does)
    unless this follow ran no batch, when it is printed here."""
    lines = [] if result.batches else _headline(result.run_dir)
    lines += [(f"follow: stopped ({result.stopped}) after {result.batches} batch(es): "
              f"{len(result.evaluated)} checkpoint(s) evaluated, {len(result.skipped)} skipped, "
              f"{len(result.failed_shards)} failed shard(s); run {result.run_dir}")]
    lines += [f"  skipped {name}: {why}" for name, why in sorted(result.skipped.items())]
    return lines


def _headline(run_dir: Path) -> list[str]:
    """The headline table of the run's reduction (handoff.report.text), when it has one."""
    from handoff.report.text import run_headline

    try:
        return [run_headline(run_dir), ""]
    except (OSError, ValueError):  # no reduction yet: nothing was evaluated
        return []
