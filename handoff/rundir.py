"""The run directory: every path in it and its manifest, for every writer and reader (the sweep,
the reducer, reports, W&B, export, compare, bench, tests). docs/architecture.md shows the tree.

    runs/<name>/
      manifest.json               Manifest (versioned; run_uuid made once, kept across resumes)
      config.yaml                 the resolved Hydra config
      .lock                       held (flock) by the sweep driver while it runs, reduces and reports
      .reduce.lock                held (flock) by whoever reduces, logs to W&B or reports (one at a time)
      .follow.lock                held (flock) by `handoff follow` (handoff.sweep.follow) while it follows
      follow/seen.jsonl           the checkpoints follow saw complete (path, step, when)
      shards/<id>.jsonl           finished shards (handoff.records format)
      partial/<id>.jsonl          episodes of unfinished shards, one record a line
      failed/<id>.json            shards that kept failing: kind, error and attempts
      reduced/metrics.json        the reduction
      reduced/scores/<id>.jsonl   per-shard score cache
      export/<ckpt>__<domain>.json  tau2 Results export
      wandb/                      W&B's own files (offline-run-*, unless logger.dir puts them elsewhere),
                                  logged.json (rows logged per W&B run), errors.txt when logging failed
      report/                     report.md, report.html, plots/, episodes/ (index.html, data/,
                                  transcripts/<shard>/: handoff.report.episodes)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import re
import uuid
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from handoff.errors import HandoffError
from handoff.records import CorruptShard, read_shard_header, write_atomic

MANIFEST_VERSION = 5
"""manifest.json's schema_version. 1: manifests written before the version field (older ones also
lack run_uuid); 2: a typed Manifest with its `version`; 3: checkpoint_content (a resume refuses a
checkpoint re-saved since); 4: `version` is named `schema_version`, as in the shard header, and
config_sha256 and plan_sha256 are recorded (a config or a plan edited by hand is refused); the
optional `import` and `adaptive` sections are left out when empty; 5: `extensions`, one entry per
`handoff sweep extend` or `handoff follow` batch that added shards (left out when empty). Every version reads; a newer one
is refused (docs/sweep.md, "Format versions"; tests/golden/manifest-v*)."""


SHARD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""What a shard id (a file name in shards/, partial/, failed/, reduced/scores/) may be: never a path."""


class RunDirError(HandoffError, ValueError):
    """A path that is not a usable run directory, or a run that cannot be reported."""


def checked_id(shard_id: str) -> str:
    """`shard_id` if it is a plain file name (SHARD_ID); a RunDirError otherwise. Ids are read from
    manifest.json: a tampered one must never make a path outside the run directory."""
    if not isinstance(shard_id, str) or not SHARD_ID.fullmatch(shard_id):
        raise RunDirError(f"shard id {shard_id!r} is not a plain file name ({SHARD_ID.pattern})")
    return shard_id


class FileDrift(BaseModel):
    """How an imported results file differs from the pinned tau2 (handoff.drift)."""

    tau2_commit: str | None = Field(None, description="the tau2 commit the file records (info.git_commit)")
    tasks: dict[str, list[str]] = Field(default_factory=dict,
                                        description="task id -> the parts of its embedded definition not pinned")
    user_guidelines_differ: bool = False
    policy_differs: bool = False
    domain_variant: str | None = Field(None, description="the domain the file names when it is a policy variant")
    kept: bool = Field(False, description="--keep-drifted: the drifted tasks' episodes are in the metrics")


class ImportedFile(BaseModel):
    """One tau2 file imported by `handoff import` (handoff.importing): one checkpoint."""

    path: str = Field(description="the file's absolute path")
    sha256: str = Field(description="of the file's bytes: a file changed since is refused for the run")
    format: str = Field(description="results, list or simulation (handoff.rules.read_tau2_file)")
    checkpoint: str
    step: int
    domain: str
    agent: str | None = Field(None, description="the agent model the file names (info.agent_info.llm)")
    episodes: int = Field(description="simulations in the file")
    kept: int | None = Field(None, exclude_if=lambda v: v is None, description="episodes in the metrics")
    drift: FileDrift | None = Field(None, exclude_if=lambda v: v is None)
    left_out: dict[str, int] = Field(default_factory=dict, exclude_if=lambda v: not v,
                                     description="episodes left out of the metrics, by reason")
    recorded_mean: float | None = Field(None, exclude_if=lambda v: v is None,
                                        description="the file's own mean reward, over all its simulations")
    kept_mean: float | None = Field(None, exclude_if=lambda v: v is None,
                                    description="the re-evaluated mean reward of the episodes kept")


class RewardMismatch(BaseModel):
    file: str
    task_id: str
    trial: int
    recorded: float | None
    reevaluated: float


class ReplayFailure(BaseModel):
    file: str
    task_id: str
    trial: int
    error: str = Field(description="the error tau2's evaluator raised, whole (its type and message)")
    message_index: int | None = Field(None, exclude_if=lambda v: v is None,
                                      description="the file's message where the replay diverged (the tool result "
                                                  "the pinned tau2 did not reproduce)")


class TaskAttribution(BaseModel):
    """A simulation whose task id was missing or contradicted (handoff.task_identity): the task
    recovered from its evidence, or none (ambiguous, unmatched: left out of the metrics)."""

    file: str
    index: int = Field(description="the simulation's place in the file, from 0")
    given: str | None = Field(description="the task_id the file gives")
    task_id: str | None = Field(description="the task recovered; None when ambiguous or unmatched")
    status: str = Field(description="recovered, ambiguous or unmatched")
    evidence: str


class ImportSection(BaseModel):
    """What `handoff import` read, and the episodes whose re-evaluated reward is not the recorded one
    (left out of the metrics unless keep_mismatched) or that could not be replayed (left out)."""

    model_config = ConfigDict(extra="forbid")

    files: list[ImportedFile]
    episodes: int
    keep_mismatched: bool = False
    keep_drifted: bool = Field(False, exclude_if=lambda v: not v)
    curve: bool = Field(False, exclude_if=lambda v: not v,
                        description="--step given: the checkpoints are steps of one learning curve, not a set")
    reward_mismatches: list[RewardMismatch] = Field(default_factory=list)
    replay_errors: list[ReplayFailure] = Field(default_factory=list)
    attributions: list[TaskAttribution] = Field(default_factory=list, exclude_if=lambda v: not v)


class Extension(BaseModel):
    """One extension of a run (handoff.sweep.extend): the shards it added after the recorded ones and
    the hashes it left, so that a plan edited by hand since is refused (Manifest.edits)."""

    model_config = ConfigDict(extra="forbid")

    time: str
    overrides: list[str] = Field(description="the overrides the extension was given (the run's own are merged)")
    config_hash: str = Field(description="the run's config hash after the extension")
    config_sha256: str
    base_plan_sha256: str = Field(description="sha256_json of the shards before it: they never change")
    plan_sha256: str = Field(description="sha256_json of the shards after it")
    shards_before: int
    shards_added: int
    checkpoints_added: list[str] = Field(default_factory=list)
    checkpoints_skipped: dict[str, str] = Field(
        default_factory=dict, description="checkpoint name -> why it is left out (handoff follow: deleted on disk)")


class Manifest(BaseModel):
    """What a sweep computes and from what. Every field has a default so that manifests of old runs
    (version 1) and the minimal ones of synthetic runs load; unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid", serialize_by_alias=True, validate_by_name=True)

    schema_version: int = MANIFEST_VERSION
    run_uuid: str = Field(default_factory=lambda: uuid.uuid4().hex,
                          description="made when the run directory is created; W&B run ids derive from it")
    name: str = ""
    created: str = ""
    config: dict[str, Any] = Field(default_factory=dict, description="the resolved sweep config")
    config_hash: str = ""
    overrides: list[str] = Field(default_factory=list)
    tau2_version: str = ""
    hashes: dict[str, str] = Field(default_factory=dict, description="label, split and task-set file hashes")
    tasks_hash: str = ""
    checkpoints: list[dict[str, Any]] = Field(default_factory=list, description="handoff.sweep.config.Checkpoint")
    checkpoint_content: dict[str, str] = Field(
        default_factory=dict, description="checkpoint name -> key of its files when planned (handoff.sweep.manifest)")
    shards: list[dict[str, Any]] = Field(default_factory=list, description="handoff.sweep.plan.Shard: the plan")
    config_sha256: str = Field("", description="sha256_json(config) as the sweep recorded it")
    plan_sha256: str = Field("", description="sha256_json(shards) as the sweep planned them")
    n_episodes: int = 0
    imported: ImportSection | None = Field(None, alias="import", exclude_if=lambda v: v is None,
                                           description="a run made by `handoff import`: what it read")
    adaptive: list[dict[str, Any]] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="an adaptive sweep's decided rounds (handoff.sweep.adaptive.Round)")
    extensions: list[Extension] = Field(
        default_factory=list, exclude_if=lambda v: not v,
        description="each extension of the run, in order (handoff.sweep.extend; version 5)")

    @model_validator(mode="after")
    def _known_version(self) -> "Manifest":
        if not 1 <= self.schema_version <= MANIFEST_VERSION:
            raise ValueError(f"manifest schema_version {self.schema_version} is unknown to this handoff (it reads "
                             f"1 to {MANIFEST_VERSION}): a run written by a newer handoff needs that handoff")
        for shard in self.shards:
            checked_id(shard.get("id"))
        return self

    @classmethod
    def from_json(cls, text: str | bytes) -> "Manifest":
        """Parse a manifest file's content. Versions 2 and 3 name their version `version`; a version-1
        manifest has none, and without run_uuid gets the sha256 of the file: stable across reads (the
        file is never rewritten), and the W&B run ids of such runs were always derived from it."""
        raw = text.encode() if isinstance(text, str) else text
        data = json.loads(raw)
        if isinstance(data, dict) and "schema_version" not in data:
            data = dict(data)
            data["schema_version"] = data.pop("version", 1)
            if data["schema_version"] == 1:
                data.setdefault("run_uuid", hashlib.sha256(raw).hexdigest())
        return cls.model_validate(data)

    def edits(self) -> list[str]:
        """What was changed by hand since the sweep wrote the manifest: a config or a plan that no
        longer has the sha256 recorded with it (the whole config, execution keys included: unlike
        config_hash, it does not change with handoff's EXECUTION_KEYS). A manifest without them, of
        an old or synthetic run, is not checked."""
        edited = []
        if self.config_sha256 and sha256_json(self.config) != self.config_sha256:
            edited.append("its config no longer matches its config_sha256")
        if self.plan_sha256 and sha256_json(self.shards) != self.plan_sha256:
            edited.append("its shard plan no longer matches its plan_sha256")
        for n, ext in enumerate(self.extensions, 1):
            before, after = self.shards[:ext.shards_before], self.shards[:ext.shards_before + ext.shards_added]
            if sha256_json(before) != ext.base_plan_sha256 or sha256_json(after) != ext.plan_sha256:
                edited.append(f"the shards before or added by its extension {n} no longer match its hashes")
        return edited

    def skipped(self) -> dict[str, str]:
        """Checkpoints the run leaves out, with the reason (handoff follow: deleted before their
        episodes finished): no W&B row, no number presented as whole."""
        return {name: why for ext in self.extensions for name, why in ext.checkpoints_skipped.items()}

    @property
    def run_name(self) -> str:
        """The sweep name recorded in the manifest or its config; "" when none."""
        for source in (self.name, self.config.get("name"), (self.config.get("sweep") or {}).get("name")):
            if isinstance(source, str) and source:
                return source
        return ""


def sha256_json(value: Any) -> str:
    """sha256 of a JSON value (a manifest's config or plan), independent of key order."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


class RunPaths:
    """Every path of a run directory (nothing is read or created)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    manifest_path = property(lambda self: self.root / "manifest.json")
    config_yaml = property(lambda self: self.root / "config.yaml")
    lock_path = property(lambda self: self.root / ".lock")
    reduce_lock_path = property(lambda self: self.root / ".reduce.lock")
    shards_dir = property(lambda self: self.root / "shards")
    partial_dir = property(lambda self: self.root / "partial")
    failed_dir = property(lambda self: self.root / "failed")
    reduced = property(lambda self: self.root / "reduced")
    metrics = property(lambda self: self.reduced / "metrics.json")
    scores_dir = property(lambda self: self.reduced / "scores")
    export_dir = property(lambda self: self.root / "export")
    wandb = property(lambda self: self.root / "wandb")
    wandb_errors = property(lambda self: self.wandb / "errors.txt")
    wandb_logged = property(lambda self: self.wandb / "logged.json")  # the rows each W&B run holds
    report = property(lambda self: self.root / "report")
    report_md = property(lambda self: self.report / "report.md")
    report_html = property(lambda self: self.report / "report.html")
    report_txt = property(lambda self: self.report / "report.txt")  # the plain text (handoff.report.text)
    plots_dir = property(lambda self: self.report / "plots")

    def shard_path(self, shard_id: str) -> Path:
        return self.shards_dir / f"{checked_id(shard_id)}.jsonl"

    def partial_path(self, shard_id: str) -> Path:
        return self.partial_dir / f"{checked_id(shard_id)}.jsonl"

    def failed_path(self, shard_id: str) -> Path:
        return self.failed_dir / f"{checked_id(shard_id)}.json"

    def scores_path(self, shard_id: str) -> Path:
        return self.scores_dir / f"{checked_id(shard_id)}.jsonl"

    def export_path(self, model: str, domain: str, out_dir: str | Path | None = None) -> Path:
        out = Path(out_dir) if out_dir is not None else self.export_dir
        return out / f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', model)}__{domain}.json"

    @contextlib.contextmanager
    def reducing(self):
        """Hold the run's reducer lock (waiting for it): two reducers at once would both rewrite
        reduced/ and log the same W&B rows twice. Not reentrant: take it once per process."""
        with open(self.reduce_lock_path, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def shards(self) -> list[Path]:
        """Finished shard files, by name."""
        return sorted(self.shards_dir.glob("*.jsonl"))

    def failed_ids(self) -> list[str]:
        """Shards recorded as failed that have no finished shard file (a record left beside a
        finished shard by a crash, or by an older handoff, is out of date)."""
        return sorted(p.stem for p in self.failed_dir.glob("*.json") if not self.shard_path(p.stem).is_file())

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def read_manifest(self) -> Manifest:
        """The manifest; a RunDirError when it is not valid or was edited by hand (Manifest.edits):
        a run's recorded inputs never change, or its results would mix two configs or plans."""
        manifest = self._parse_manifest()
        edited = manifest.edits()
        if edited:
            raise RunDirError(f"{self.manifest_path} was edited since the sweep wrote it: {'; '.join(edited)}. "
                              "Restore it, or start a new run for other inputs")
        return manifest

    def _parse_manifest(self) -> Manifest:
        try:
            return Manifest.from_json(self.manifest_path.read_bytes())
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{self.manifest_path}: not valid JSON ({exc})") from exc
        except ValidationError as exc:
            raise RunDirError(f"{self.manifest_path}: not a valid run manifest: {_first_error(exc)}") from exc
        except OSError as exc:
            raise RunDirError(f"{self.manifest_path}: cannot read: {exc}") from exc

    def write_manifest(self, manifest: Manifest, config_yaml: str | None = None) -> None:
        write_atomic(self.manifest_path, manifest.model_dump_json(indent=1) + "\n")
        if config_yaml is not None:
            write_atomic(self.config_yaml, config_yaml)


class RunDir(RunPaths):
    """An existing run directory as its readers see it: the manifest must be there and valid."""

    def __init__(self, root: str | Path):
        super().__init__(root)
        if not self.exists():
            raise RunDirError(f"{self.root}: not a run directory (no manifest.json)")

    @cached_property
    def manifest(self) -> Manifest:
        return self.read_manifest()

    def run_shards(self) -> tuple[list[Path], dict[str, str]]:
        """The files of shards/ that are this run's, by name, and why each other one is not (shard
        id -> reason): a shard outside the manifest's plan, or one whose header names another run
        (copied in from another seed or checkpoint). A manifest without a plan (an old or hand-made
        run) owns every file. A file whose header is unreadable is left to the reader (corrupt)."""
        planned = {s["id"] for s in self.manifest.shards} or None
        own, foreign = [], {}
        for path in self.shards():
            if planned is not None and path.stem not in planned:
                foreign[path.stem] = "not in the manifest's plan"
                continue
            with contextlib.suppress(CorruptShard):
                owner = read_shard_header(path).get("run_uuid")
                if owner not in (None, self.manifest.run_uuid):
                    foreign[path.stem] = f"written by another run (run_uuid {owner})"
                    continue
            own.append(path)
        return own, foreign

    @property
    def config(self) -> dict:
        """The resolved sweep config recorded in the manifest."""
        return self.manifest.config

    @property
    def name(self) -> str:
        """The sweep name: W&B group and report title (default: the directory's name)."""
        return self.manifest.run_name or self.root.resolve().name


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(map(str, err["loc"]))
    return f"{where}: {err['msg']}" if where else err["msg"]
