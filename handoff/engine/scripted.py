"""The scripted engine: completions replayed as the token ids a model would have produced
(tokenized with a real tokenizer), so the agent's decoding, parsing and token bookkeeping run exactly
as with vLLM.

- `ScriptedEngine`: the test double of an Engine (episodes' side). It replays given completions, in
  order. A completion is a string (tokenized; the end-of-turn token is appended and the finish reason
  is "stop"), a `Scripted` with `truncated=True` (no end token, finish reason "length"), or raw token
  ids (`Scripted(token_ids=...)`, e.g. random ids). Like vLLM, a completion longer than the request's
  `max_tokens` is cut there with finish reason "length". Every prompt is kept in `prompts`.
- `ScriptedReplay`: engine.kind=scripted, an AsyncEngine like AsyncVLLMEngine: the sweep's replicas
  for tests, benchmarks and dry runs, configured by `ScriptConfig` (engine.script). It is stateless:
  the completion comes from the prompt, so a restarted replica replays the same.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, ValidationError

from handoff.engine.base import EngineStats, Generation, ModelRef, Sampling


class Scripted(BaseModel):
    text: str = ""
    token_ids: list[int] | None = None
    truncated: bool = False


class ScriptExhausted(RuntimeError):
    """More requests than scripted completions: the test's script is too short."""


class ScriptedEngine:
    def __init__(self, tokenizer, completions: list[str | Scripted], end_token_id: int | None = None):
        self.tokenizer = tokenizer
        self.completions = [c if isinstance(c, Scripted) else Scripted(text=c) for c in completions]
        self.end_token_id = tokenizer.eos_token_id if end_token_id is None else end_token_id
        self.prompts: list[list[int]] = []
        self.samplings: list[Sampling] = []

    def generate(self, prompt_ids: list[int], sampling: Sampling, session_id: str | None = None) -> Generation:
        if len(self.prompts) >= len(self.completions):
            raise ScriptExhausted(f"request {len(self.prompts) + 1} but only {len(self.completions)} completions")
        scripted = self.completions[len(self.prompts)]
        self.prompts.append(list(prompt_ids))
        self.samplings.append(sampling)
        return self.replay(scripted, sampling.max_tokens)

    def replay(self, scripted: Scripted, max_tokens: int) -> Generation:
        ids = scripted.token_ids if scripted.token_ids is not None else self._encode(scripted.text)
        finish = "length" if scripted.truncated else "stop"
        if finish == "stop" and scripted.token_ids is None:
            ids = ids + [self.end_token_id]
        if len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generation(token_ids=ids, text=text, finish_reason=finish)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)


class ScriptConfig(BaseModel):
    """engine.script for kind=scripted: completions per role, chosen statelessly from the prompt
    (the number of assistant turns already in it), so that a restarted actor replays the same.

    Timing, to stand in for an accelerator: a replica takes `load_delay_s` to load a checkpoint,
    and serves each request in `delay_s` with at most engine.max_num_seqs requests at once (a
    batch); more wait their turn. With `service_log` set, every replica appends one line per served
    request, `<replica pid> <checkpoint> <start> <end>` (time.time()), for bench.bench_schedule."""

    agent: list[str]
    user: list[str]
    delay_s: float = 0.0
    load_delay_s: float = 0.0
    turn_marker: str = "<|im_start|>assistant"
    fail_sessions: str | None = None  # regex: requests of matching sessions raise (a broken episode)
    fail_load: str | None = None  # regex on "<role>/<checkpoint name>": a matching replica fails to load
    service_log: str | None = None
    # The agent shares the user simulator's replicas when the paths match, as vLLM engines do (each
    # request's role from its session id): the rolling schedule's pinned slots, for tests.
    share_user_engine: bool = False
    # A known-answer agent: checkpoint name -> the probability that it hands off correctly. Such a
    # checkpoint's agent replays `agent` (which transfers) where it transfers, else `no_transfer`;
    # it transfers iff the task's label says so when a draw from the episode seed falls below
    # the probability, else it does the opposite (handoff_decision).
    accuracy: dict[str, Annotated[float, Field(ge=0, le=1)]] | None = None
    no_transfer: list[str] = ["I can help you with that myself; there is no need for a human agent."]


def script_problems(script: object, checkpoint_names: set[str]) -> list[str]:
    """engine.script's problems, each naming its key: its schema, and known-answer accuracies of
    checkpoints the sweep does not have."""
    try:
        config = ScriptConfig.model_validate(script)
    except ValidationError as exc:
        return [f"engine.script.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    names = ", ".join(sorted(checkpoint_names))
    return [f"engine.script.accuracy.{name}: no checkpoint of the sweep is named so ({names})"
            for name in config.accuracy or {} if name not in checkpoint_names]


class _Tokenizer:
    """The part of a transformers tokenizer the scripted engine uses, over `tokenizers` alone."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        eos = json.loads((path / "tokenizer_config.json").read_text())["eos_token"]
        self.eos_token_id = self._tok.token_to_id(eos if isinstance(eos, str) else eos["content"])

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)


def light_tokenizer(path: str):
    """The checkpoint's tokenizer without importing transformers (6 s of CPU) when it has a
    tokenizer.json, so that a scripted replica starts in well under its load_delay_s."""
    p = Path(path)
    if (p / "tokenizer.json").is_file() and (p / "tokenizer_config.json").is_file():
        return _Tokenizer(p)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


class ScriptedReplay:
    """engine.kind=scripted: completion i of the role's script, where i counts the role's own earlier
    turns in the prompt (the agent's prompt also holds tau2's greeting). The last completion repeats.
    An AsyncEngine (handoff.engine.base) without a prefix cache: it never reloads in place (a replica
    moving on to another checkpoint loads a new one, waiting load_delay_s again) and never dies."""

    OFFSET = {"agent": 2, "user": 1}  # markers in the role's first prompt (generation prompt included)

    def __init__(self, checkpoint: ModelRef, script: ScriptConfig, role: str, max_num_seqs: int = 1 << 30):
        self.tokenizer = light_tokenizer(checkpoint.tokenizer or checkpoint.path)
        self.checkpoint, self.script, self.role = checkpoint, script, role
        self.batch = asyncio.Semaphore(max_num_seqs)
        self._stats = EngineStats()

    @classmethod
    async def load(cls, checkpoint: ModelRef, script: ScriptConfig, role: str,
                   max_num_seqs: int = 1 << 30) -> ScriptedReplay:
        """A replica's load, as an accelerator's would take: `load_delay_s`, and a failure where
        `fail_load` matches "<role>/<checkpoint name>"."""
        started = time.perf_counter()
        await asyncio.sleep(script.load_delay_s)
        if script.fail_load and re.search(script.fail_load, f"{role}/{checkpoint.name}"):
            raise RuntimeError(f"scripted load failure of {role}/{checkpoint.name}")
        engine = cls(checkpoint, script, role, max_num_seqs)
        engine._stats.load_seconds = time.perf_counter() - started
        return engine

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        role = self._role(request_id)
        completions = getattr(self.script, role)
        accuracy = (self.script.accuracy or {}).get(self.checkpoint.name)
        if role == "agent" and accuracy is not None and not handoff_decision(request_id, accuracy):
            completions = self.script.no_transfer
        turns = self.tokenizer.decode(prompt_ids).count(self.script.turn_marker) - self.OFFSET[role]
        completion = completions[min(max(turns, 0), len(completions) - 1)]
        async with self.batch:
            started = time.time()
            await asyncio.sleep(self.script.delay_s)
            self._log_service(started)
        if self.script.fail_sessions and re.search(self.script.fail_sessions, request_id):
            raise RuntimeError(f"scripted failure for {request_id}")
        generation = ScriptedEngine(self.tokenizer, [completion]).generate(prompt_ids, sampling)
        self._stats.count(prompt_ids, generation)
        return generation

    async def stats(self) -> EngineStats:
        return self._stats.model_copy()

    async def reload(self, checkpoint: ModelRef) -> bool:
        return False

    async def shutdown(self) -> None:
        return None

    @property
    def dead(self) -> bool:
        return False

    def describe(self) -> str | None:
        return None

    def _role(self, request_id: str) -> str:
        if not self.script.share_user_engine:
            return self.role
        return "user" if request_id.startswith("user/") else "agent"

    def _log_service(self, started: float) -> None:
        if self.script.service_log:
            line = f"{os.getpid()} {self.checkpoint.name} {started:.6f} {time.time():.6f}\n"
            with open(self.script.service_log, "a") as f:  # one short O_APPEND write: lines never mix
                f.write(line)


def handoff_decision(request_id: str, accuracy: float) -> bool:
    """Whether a known-answer agent (ScriptConfig.accuracy) transfers in the episode of this agent
    request (`<domain>/<task id>-<seed>-<hex>/<hex>`, handoff.agent.episode.agent_session): right
    (transfer iff the task's label says so) when the episode seed's draw falls below `accuracy`.
    Every checkpoint meets the same draw in an episode (common random numbers)."""
    domain, rest = request_id.split("/", 1)
    task_id, seed, _ = rest.rsplit("/", 1)[0].rsplit("-", 2)
    return _should_transfer(domain, task_id) == (seed_draw(int(seed)) < accuracy)


@functools.cache
def _should_transfer(domain: str, task_id: str) -> bool:
    from handoff.tasks.labels import label_for

    return label_for(domain, task_id).should_transfer


def seed_draw(seed: int) -> float:
    """A uniform draw in [0, 1) from an episode seed (sha256: the same in every process)."""
    digest = hashlib.sha256(f"accuracy/{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
