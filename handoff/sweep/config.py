"""The sweep's config: the pydantic schema of the composed Hydra config (conf/sweep.yaml).

`validate(cfg)` runs before Ray starts: it checks types, ranges and that paths exist, expands
checkpoint globs, and raises ConfigError whose message names every bad key (`model.x.path: ...`).
"""

from __future__ import annotations

import functools
import glob as globlib
import hashlib
import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from handoff.engine.base import Sampling
from handoff.engine.checkpoint import TOKENIZER_KEY, problems, tokenizer_problems
from handoff.engine.factory import engine_kind
from handoff.engine.vllm_engine import VLLMOptions
from handoff.errors import ConfigError
from handoff.rules.score import RewardWeights
from handoff.settings import ApiModelSettings, EpisodeLimits, Strict, UserSimulatorConfig

# Keys that say where and how fast a sweep runs, not what it computes: they may change on resume.
EXECUTION_KEYS = (
    "run_dir", "resume", "cluster", "workers", "max_attempts", "episode_timeout_s", "logger",
    "engine.replicas", "engine.cpus", "engine.gpu_memory_utilization", "engine.kv_cache_gib",
    "engine.max_num_seqs", "engine.max_restarts", "engine.request_timeout_s", "engine.load_timeout_s",
    "engine.threads", "engine.script.delay_s", "engine.script.load_delay_s", "engine.script.service_log", "schedule", "verbose",
)
# Keys left out of the hash while they hold these values, so that runs from before the key existed
# resume (engine.dtype auto: the engine decides from its CPU, handoff.engine.cpu).
UNHASHED_DEFAULTS = {"engine.dtype": "auto", "engine.script.accuracy": None, "tasks.set": "base"}


class ModelConfig(Strict):
    """One checkpoint (`path`), or every checkpoint directory matching `glob`, or a list (`paths`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    path: str | None = None
    paths: list[str] | None = None
    glob: str | None = None
    step: int = Field(0, ge=0)
    step_regex: str | None = None
    tokenizer: str | None = None
    chat_template: str | None = None
    tool_parser: str = "hermes"
    max_model_len: int = Field(8192, gt=0)
    sampling: Sampling = Field(default_factory=Sampling)
    llm: str | None = None  # an API model as the agent (conf/model/api.yaml): no engine, no path
    llm_args: dict = Field(default_factory=dict)
    concurrency: int = Field(8, ge=1)
    max_retries: int = Field(6, ge=0)
    retry_backoff_s: float = Field(1.0, ge=0)
    outage_s: float = Field(900.0, gt=0)
    parallel_tool_calls: bool | None = False

    @model_validator(mode="after")
    def _one_source(self):
        given = [k for k in ("path", "paths", "glob", "llm") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of path, paths, glob, llm (got {given or 'none'})")
        if self.sampling.max_tokens >= self.max_model_len:
            raise ValueError(f"sampling.max_tokens ({self.sampling.max_tokens}) leaves no room for a prompt "
                             f"in max_model_len ({self.max_model_len})")
        return self


class Checkpoint(Strict):
    """A concrete checkpoint to evaluate (a ModelConfig after glob/list expansion)."""

    name: str
    path: str
    step: int
    tokenizer: str | None
    chat_template: str | None
    tool_parser: str
    max_model_len: int
    sampling: Sampling
    api: ApiModelSettings | None = Field(None, exclude_if=lambda v: v is None,
                                         description="an API model (no engine); left out of a local one's record")


API_PATH = "litellm:"
"""An API checkpoint's `path`: `litellm:<model>` (no directory; nothing reads it)."""


def api_settings(m: ModelConfig) -> ApiModelSettings | None:
    return None if m.llm is None else ApiModelSettings(**m.model_dump(include=set(ApiModelSettings.model_fields)))


class DomainConfig(Strict):
    name: Literal["airline", "retail", "telecom"]


class UserConfig(UserSimulatorConfig):
    """handoff.settings.UserSimulatorConfig plus the engine's checkpoint (user.kind=engine), whose
    sampling becomes the UserSpec's."""

    model: ModelConfig | None = None

    @model_validator(mode="after")
    def _needs(self):
        if self.kind == "engine" and self.model is None:
            raise ValueError("user.kind=engine needs user.model")
        if self.kind == "engine" and self.model.path is None:
            raise ValueError("user.model needs a single path")
        if self.kind == "litellm" and not self.llm:
            raise ValueError("user.kind=litellm needs user.llm")
        return self


class EngineConfig(VLLMOptions):
    """The `engine` group: handoff.engine.vllm_engine.VLLMOptions (passed to vLLM as they are) plus
    how the sweep hosts the engines on Ray."""

    kind: Literal["vllm", "scripted"]
    device: Literal["cpu", "gpu"]
    replicas: int = Field(1, ge=1)
    cpus: float = Field(1.0, gt=0)
    max_restarts: int = Field(3, ge=0)
    request_timeout_s: float = Field(600, gt=0)
    load_timeout_s: float = Field(900, gt=0)
    script: Any = None

    @property
    def num_gpus(self) -> int:
        return self.tensor_parallel_size if self.device == "gpu" else 0

    @property
    def replica_cpus(self) -> float:
        """Ray CPUs of one replica: engine.cpus for each of its tensor-parallel workers."""
        return self.cpus * self.tensor_parallel_size


class ClusterConfig(Strict):
    address: str | None = None
    num_cpus: int | None = Field(None, ge=1)
    num_gpus: int | None = Field(None, ge=0)
    object_store_mb: int | None = Field(None, ge=64)
    temp_dir: str | None = None
    merged_dir: str | None = None  # merged verl checkpoints whose own directory is read-only


class LoggerConfig(Strict):
    """W&B (docs/reports.md). Unset values come from WANDB_MODE, WANDB_PROJECT, WANDB_ENTITY and
    WANDB_DIR, else offline, "handoff", the default entity and the run directory."""

    mode: Literal["offline", "online", "disabled"] | None = None
    project: str | None = None
    entity: str | None = None
    dir: str | None = None
    tags: list[str] = Field(default_factory=list)
    training_run: str | None = Field(None, pattern=r"^[^/]+/[^/]+/[^/]+$")
    init_timeout_s: float = Field(60, gt=0)
    transcripts: int | None = Field(None, ge=0, description="transcripts per episode table: all up to this many "
                                    "episodes, else this many whose hand-off is not correct; null: 200 (docs/reports.md)")


class TasksConfig(Strict):
    """The task slice of every domain; `ids` (a list for every domain, or a list per domain, since
    derived ids differ between domains) replaces the rest. Numeric ids may be given as numbers
    (tasks.ids=[0,1]). Otherwise the `split`'s tasks of `kinds`, then either the first `per_kind` of
    each kind or the first `limit` in all, from `offset` (within each kind). `set` is tau2's task set
    of the upstream tasks: base, or telecom's small or full (handoff.tasks.upstream)."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    set: Literal["base", "small", "full"] = "base"
    split: Literal["train", "test"] | None = "test"
    kinds: list[str] | None = None
    ids: list[str] | dict[str, list[str]] | None = None
    offset: int = Field(0, ge=0)
    limit: int | None = Field(None, ge=1)
    per_kind: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _split_of_set(self):
        if self.set != "base" and self.split is not None:
            raise ValueError(f"tasks.set={self.set}: tau2 splits only the base set into train and test; "
                             "give tasks.split=null")
        return self

    @model_validator(mode="after")
    def _one_count(self):
        if self.limit is not None and self.per_kind is not None:
            raise ValueError(f"give tasks.limit ({self.limit}) or tasks.per_kind ({self.per_kind}), not both "
                             "(set the other to null)")
        return self

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str] | None) -> list[str] | None:
        from handoff.tasks import KINDS

        unknown = [k for k in kinds or [] if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown task kind(s) {', '.join(unknown)}: expected some of {', '.join(KINDS)}")
        _once(kinds or [], "task kind")
        return kinds

    @field_validator("ids")
    @classmethod
    def _ids_once(cls, ids: list[str] | dict[str, list[str]] | None):
        for domain, some in ids.items() if isinstance(ids, dict) else [("", ids or [])]:
            _once(some, f"{domain} task id".lstrip())
        return ids


def _once(values: list, what: str) -> None:
    """ValueError naming the repeated values: a repeat would run the same episodes twice."""
    repeated = [v for v, n in Counter(values).items() if n > 1]
    if repeated:
        raise ValueError(f"repeated {what}(s) {', '.join(map(repr, repeated))}: give each once "
                         "(a repeat would run and count its episodes twice)")


class WorkersConfig(Strict):
    processes: int | None = Field(None, ge=1)
    threads: int = Field(8, ge=1)
    cpus: float = Field(0.5, gt=0)
    fast_eval: bool = True  # handoff.fasteval: tau2's evaluator and environments, same rewards, less CPU


class AdaptiveConfig(Strict):
    """Adaptive sweeps (docs/sweep.md): rounds of `round_trials` trials of every task, up to
    `max_trials`; after each, a checkpoint decided worse than the best by more than `margin` on
    `metric` (or tied within it) at `confidence` gets no more episodes (handoff.sweep.adaptive)."""

    enabled: bool = False
    metric: Literal["handoff_accuracy", "handoff_recall", "tau2_success", "tau2_reward"] = "handoff_accuracy"
    margin: float = Field(0.05, ge=0, lt=1)
    confidence: float = Field(0.95, gt=0, lt=1)
    max_trials: int = Field(8, ge=1)
    round_trials: int = Field(1, ge=1)
    growing: bool = False  # the run may gain checkpoints (extend, follow): alpha spent in arrival order

    @model_validator(mode="after")
    def _rounds_fit(self):
        if self.round_trials > self.max_trials:
            raise ValueError(f"round_trials ({self.round_trials}) exceeds max_trials ({self.max_trials})")
        return self


UNHASHED_DEFAULTS["adaptive"] = AdaptiveConfig().model_dump()  # a fixed sweep resumes runs from before it
UNHASHED_DEFAULTS["adaptive.growing"] = False  # an adaptive sweep too


class SweepConfig(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    run_dir: str
    resume: str | None = None
    seed: int = 0
    trials: int = Field(1, ge=1)
    shard_size: int = Field(2, ge=1)
    max_attempts: int = Field(3, ge=1)
    episode_timeout_s: float = Field(1800, gt=0)
    schedule: Literal["sequential", "rolling"] = "rolling"
    verbose: bool = False  # engine, worker and library logs on the terminal instead of <run>/logs/
    model: dict[str, ModelConfig] = Field(min_length=1)
    domain: dict[str, DomainConfig] = Field(min_length=1)
    user: UserConfig
    engine: EngineConfig
    cluster: ClusterConfig
    logger: LoggerConfig
    reward: RewardWeights
    tasks: TasksConfig
    episode: EpisodeLimits
    workers: WorkersConfig
    adaptive: AdaptiveConfig = Field(default_factory=AdaptiveConfig)

    def domains(self) -> list[str]:
        return sorted(d.name for d in self.domain.values())

    def planned_trials(self) -> int:
        """Trials per task in the plan: adaptive.max_trials in an adaptive sweep, else trials."""
        return self.adaptive.max_trials if self.adaptive.enabled else self.trials

    @model_validator(mode="after")
    def _adaptive_trials(self):
        if self.adaptive.enabled and self.trials not in (1, self.adaptive.max_trials):
            raise ValueError(f"trials ({self.trials}): an adaptive sweep plans adaptive.max_trials "
                             f"({self.adaptive.max_trials}) trials; leave trials at 1")
        return self

    @field_validator("domain")
    @classmethod
    def _domains_once(cls, domain: dict[str, DomainConfig]) -> dict[str, DomainConfig]:
        _once([d.name for d in domain.values()], "domain")
        return domain

    @model_validator(mode="after")
    def _set_of_selected_domains(self):
        without = [d for d in self.domains() if d != "telecom"]
        if self.tasks.set != "base" and without:
            raise ValueError(f"tasks.set={self.tasks.set}: only telecom has task sets other than base "
                             f"({', '.join(without)} selected); run them in another sweep")
        return self

    @model_validator(mode="after")
    def _ids_of_selected_domains(self):
        ids = self.tasks.ids
        other = sorted(set(ids) - set(self.domains())) if isinstance(ids, dict) else []
        if other:
            raise ValueError(f"tasks.ids: {', '.join(other)} is not a selected domain ({', '.join(self.domains())})")
        return self


def to_container(cfg: DictConfig | dict) -> dict:
    """The resolved config as plain data (Hydra's own `hydra` node dropped)."""
    data = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    data.pop("hydra", None)
    return data


SECRET_KEY = re.compile(r"(?i)(^|_)(api_?key|access_?key|private_?key|subscription_?key|secret(_?key)?|token|"
                        r"password|passwd|credentials?|authorization|cookie)$")
"""Config keys that hold secrets, `-` read as `_` and camelCase as snake_case (HTTP headers too:
X-Api-Key, X-Auth-Token, Ocp-Apim-Subscription-Key; accessToken, clientSecret): never recorded in the
run directory or W&B with their value."""
SECRET_ENV = re.compile(r"(?i)KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH")
SECRET_VALUE_ENV = re.compile(r"(?i)KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL")
PATH_ENV = re.compile(r"(?i)(FILE|PATH|DIR|CREDENTIALS)$")
ENV_VAR = re.compile(r"oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)")
ENV_DEFAULT = re.compile(r"(\$\{oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)\s*,)([^}]*)\}")
"""`${oc.env:VAR,default}`: groups (the part up to the comma, VAR, the default)."""
REDACTED = "<redacted>"
MIN_SECRET = 8
"""A secret's value shorter than this is not looked for elsewhere (e.g. `EMPTY`, a test's `x`)."""


def secret_key(key: str) -> bool:
    return bool(SECRET_KEY.search(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).replace("-", "_")))


def _env_defaults(text: str, key: str = "") -> list[str]:
    """The literal defaults of the `${oc.env:VAR,default}` in `text` that are secrets: those of a
    secret's variable, or any under a secret's key (`${oc.env:MY_PROXY,sk-...}` in api_key)."""
    return [default.strip() for _, var, default in ENV_DEFAULT.findall(text)
            if default.strip() not in ("", "null", "''", '""') and (secret_key(key) or SECRET_ENV.search(var))]


def _without_env_defaults(raw: str, key: str) -> str:
    """`raw` with each secret default of an `${oc.env:VAR,default}` redacted (_env_defaults)."""
    return ENV_DEFAULT.sub(lambda m: m.group(0) if not _env_defaults(m.group(0), key) else f"{m.group(1)}{REDACTED}}}",
                           raw)


def env_secrets() -> set[str]:
    """The values of the secret environment variables (e.g. OPENAI_API_KEY), to be looked for anywhere.
    Not what names a setting rather than holding one: AUTH's (RAY_AUTH_MODE=disabled, SSH_AUTH_SOCK),
    a word (PIP_KEYRING_PROVIDER=disabled, POSTGRES_PASSWORD=postgres: `logger.mode=disabled` is no
    secret) or a path (GOOGLE_APPLICATION_CREDENTIALS, *_KEY_FILE: a run directory under it is none)."""
    return {v for k, v in os.environ.items()
            if SECRET_VALUE_ENV.search(k) and len(v) >= MIN_SECRET and not v.isalpha()
            and not (PATH_ENV.search(k) or os.path.exists(os.path.expanduser(v)))}


def recorded_config(cfg: DictConfig) -> dict:
    """The resolved config as a run records it (manifest.json, config.yaml, W&B's run config): a
    value under a secret's key (SECRET_KEY: api_key, token, password, ...) or read from a secret's
    environment variable (`${oc.env:OPENAI_API_KEY}`) stays the unresolved interpolation, and a
    secret written literally in a config file is redacted, as is any string holding the value of a
    secret's environment variable or of a secret's key (a copy under another key). The sweep itself
    runs on the resolved values (validate)."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    raw.pop("hydra", None)
    value = to_container(cfg)
    return _hide_secrets(value, raw, env_secrets() | _keyed_secrets(value) | _keyed_secrets(raw, defaults=True))


def _keyed_secrets(value: Any, key: str = "", defaults: bool = False) -> set[str]:
    """The values under a secret's key; with `defaults`, the secret defaults of the `${oc.env:...}`
    in (raw) strings instead."""
    if isinstance(value, dict):
        return {s for k, v in value.items() for s in _keyed_secrets(v, str(k), defaults)}
    if isinstance(value, list):
        return {s for v in value for s in _keyed_secrets(v, key, defaults)}
    if not isinstance(value, str):
        return set()
    found = _env_defaults(value, key) if defaults else [value] if secret_key(key) else []
    return {s for s in found if len(s) >= MIN_SECRET}


def _hide_secrets(value: Any, raw: Any, secrets: set[str], key: str = "") -> Any:
    # A section copied by an interpolation (`${agent.llm_args}`) has no raw dict or list: its secrets
    # are hidden as literal ones.
    if isinstance(value, dict):
        raw = raw if isinstance(raw, dict) else {}
        return {k: _hide_secrets(v, raw.get(k), secrets, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        raw = raw if isinstance(raw, list) and len(raw) == len(value) else [None] * len(value)
        return [_hide_secrets(v, r, secrets, key) for v, r in zip(value, raw)]
    interpolated = isinstance(raw, str) and "${" in raw
    if interpolated and any(SECRET_ENV.search(var) for var in ENV_VAR.findall(raw)):
        return _without_env_defaults(raw, key)
    if secret_key(key) and value not in (None, ""):
        return _without_env_defaults(raw, key) if interpolated else REDACTED
    return REDACTED if isinstance(value, str) and any(s in value for s in secrets) else value


def literal_secrets(overrides: list) -> list[str]:
    """Hydra overrides (parsed) that set a secret's key to a literal value, or any key to a value
    holding a secret environment variable's or a secret as an `${oc.env:VAR,default}`'s default, which
    the run would record, also inside a dict or list value (`+user.llm_args={api_key:...}`): `key:
    pass it as ${oc.env:VAR}` for each."""
    secrets = env_secrets()
    return [f"{key}: a secret given literally would be recorded in the run directory and W&B; pass it from "
            "the environment: '+KEY=${oc.env:VAR}' (docs/sweep.md, \"Secrets\")"
            for o in overrides for key in _secret_keys(o.key_or_group, o.value(), secrets)]


def _secret_keys(key: str, value: Any, secrets: set[str]) -> list[str]:
    if isinstance(value, dict):
        return [k for name, v in value.items() for k in _secret_keys(f"{key}.{name}", v, secrets)]
    if isinstance(value, list):
        return [k for i, v in enumerate(value) for k in _secret_keys(f"{key}.{i}", v, secrets)]
    leaf, text = key.rsplit(".", 1)[-1], str(value)
    literal = value not in (None, "") and "${" not in text
    secret = secret_key(leaf) or any(s in text for s in secrets)
    return [key] if (literal and secret) or _env_defaults(text, leaf) else []


def checkpoint_problems(key: str, path: str, tokenizer: str | None = None, loads: bool = True,
                        remote: bool = False, tokenizer_key: str = TOKENIZER_KEY) -> list[str]:
    """Why the checkpoint directory `path` (config key `key`) cannot be served; empty if it can.
    Every checkpoint of a sweep passes here before Ray starts (the one place to add checks): it
    exists and, when the engine `loads` its weights (EngineKind.loads_weights), holds what vLLM loads
    (handoff.engine.checkpoint.problems), else its tokenizer (an engine that only tokenizes, the
    scripted one: tokenizer_problems); hints name `tokenizer_key`. On an existing cluster (`remote`), a path the driver does
    not see is left to the check on a GPU node (handoff.sweep.preflight)."""
    if not Path(path).is_dir():
        return [] if remote else [f"{key}: checkpoint directory {path} does not exist"]
    found = problems(path, tokenizer, tokenizer_key) if loads else tokenizer_problems(path, tokenizer, tokenizer_key)
    return [f"{key}: {p}" for p in found]


def _check_paths(cfg: SweepConfig) -> list[str]:
    errors = []
    check = functools.partial(checkpoint_problems, loads=engine_kind(cfg.engine).loads_weights,
                              remote=cfg.cluster.address is not None)
    for key, m in cfg.model.items():
        at = functools.partial(check, tokenizer_key=f"model.{key}.tokenizer")
        if m.path is not None:
            errors += at(f"model.{key}.path", m.path, m.tokenizer)
        for i, p in enumerate(m.paths or []):
            errors += at(f"model.{key}.paths.{i}", p, m.tokenizer)
        if m.glob is not None:
            found = [p for p in globlib.glob(m.glob) if Path(p).is_dir()]
            errors += [e for p in found for e in at(f"model.{key}.glob", p, m.tokenizer)]
            if not found:
                errors.append(f"model.{key}.glob: no checkpoint directory matches {m.glob}")
        if m.tokenizer is not None and not Path(m.tokenizer).exists() and cfg.cluster.address is None:
            errors.append(f"model.{key}.tokenizer: {m.tokenizer} does not exist")
    um = cfg.user.model
    if cfg.user.kind == "engine" and um is not None:
        errors += check("user.model.path", um.path, um.tokenizer, tokenizer_key="user.model.tokenizer")
    return errors


def _script_problems(cfg: SweepConfig) -> list[str]:
    """engine.script of an engine kind that reads one (the scripted engine: its schema, and
    known-answer accuracies of checkpoints the sweep has)."""
    kind = engine_kind(cfg.engine)
    return kind.script_problems(cfg.engine.script, {c.name for c in checkpoints(cfg)}) if kind.reads_script else []


def _api_key_problems(cfg: SweepConfig) -> list[str]:
    """API models whose key litellm would not find in the environment (litellm.validate_environment),
    unless llm_args pass one (`api_key: ${oc.env:VAR}`) or an api_base that may need none."""
    models = {key: m for key, m in cfg.model.items() if m.llm is not None
              and not {"api_key", "api_base"} & set(m.llm_args)}
    if not models:
        return []
    from litellm import validate_environment

    missing = {key: validate_environment(m.llm)["missing_keys"] for key, m in models.items()}
    return [f"model.{key}.llm: {models[key].llm} needs {', '.join(keys)} in the environment (litellm reads it; or "
            f"model.{key}.llm_args.api_key='${{oc.env:VAR}}')" for key, keys in missing.items() if keys]


def validate(cfg: DictConfig | dict, check_paths: bool = True) -> SweepConfig:
    """The composed config as a SweepConfig, or ConfigError naming each bad key."""
    try:
        data = to_container(cfg)
    except OmegaConfBaseException as exc:  # a mandatory value left as ???, an unset env var
        raise ConfigError(f"invalid sweep config:\n  {getattr(exc, 'full_key', '') or '<root>'}: {exc.msg}") from None
    try:
        sweep = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError.from_validation("sweep config", exc) from None
    errors = (_check_paths(sweep) if check_paths else []) + _script_problems(sweep) + _api_key_problems(sweep)
    if errors:
        raise ConfigError.of("sweep config", errors)
    return sweep


def parse_step(path: str, step_regex: str | None) -> int | None:
    """The training step in a checkpoint path: `step_regex`'s first group (last match), else the
    last number in the path (global_step_120/actor -> 120)."""
    pattern = step_regex or r"(\d+)"
    matches = re.findall(pattern, path)
    if not matches:
        return None
    last = matches[-1]
    return int(last[0] if isinstance(last, tuple) else last)


def checkpoints(cfg: SweepConfig) -> list[Checkpoint]:
    """Every checkpoint of the sweep, ordered by (step, name); names are unique."""
    out: list[Checkpoint] = []
    for key, m in cfg.model.items():
        common = m.model_dump(include={"tokenizer", "chat_template", "tool_parser", "max_model_len", "sampling"})
        if m.llm is not None:
            out.append(Checkpoint(name=m.name, path=f"{API_PATH}{m.llm}", step=m.step, api=api_settings(m), **common))
            continue
        if m.path is not None:
            out.append(Checkpoint(name=m.name, path=m.path, step=m.step, **common))
            continue
        paths = m.paths if m.paths is not None else sorted(p for p in globlib.glob(m.glob) if Path(p).is_dir())
        source = "paths" if m.paths is not None else "glob"
        for p in paths:
            step = parse_step(p, m.step_regex)
            if step is None:
                raise ConfigError(f"model.{key}.{source}: no training step in {p} (set model.{key}.step_regex)")
            out.append(Checkpoint(name=f"{m.name}-step{step}", path=p, step=step, **common))
    names = [c.name for c in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"model: checkpoint names are not unique: {dupes} (give each a distinct name)")
    return sorted(out, key=lambda c: (c.step, c.name))


def user_checkpoint(cfg: SweepConfig) -> Checkpoint | None:
    """The user simulator's checkpoint when it runs on the sweep's engines (user.kind=engine)."""
    if cfg.user.kind != "engine":
        return None
    m = cfg.user.model
    return Checkpoint(name=m.name, path=m.path, step=m.step, tokenizer=m.tokenizer, chat_template=m.chat_template,
                      tool_parser=m.tool_parser, max_model_len=m.max_model_len, sampling=m.sampling)


def result_config(data: dict, prefix: str = "") -> dict:
    """The part of the resolved config that decides the results (EXECUTION_KEYS left out)."""
    return {k: result_config(v, f"{prefix}{k}.") if isinstance(v, dict) else v
            for k, v in data.items()
            if f"{prefix}{k}" not in EXECUTION_KEYS and UNHASHED_DEFAULTS.get(f"{prefix}{k}", ...) != v}


def config_hash(data: dict) -> str:
    blob = json.dumps(result_config(data), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The keys whose values differ between two plain configs, as `key: old -> new` lines."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += diff(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{prefix}{k}.")
        return out
    return [] if old == new else [f"{prefix[:-1] or '<root>'}: {old!r} -> {new!r}"]
