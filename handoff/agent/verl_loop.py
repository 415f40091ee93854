"""Tau2AgentLoop: verl's agent-loop interface running one tau2 episode with the evaluator's code.

verl calls `run(sampling_params, **dataset_fields)` in its event loop. The episode itself is
`handoff.agent.episode.run_episode`, exactly as the sweep runs it, in a worker thread (tau2's
Orchestrator is synchronous); its engine is `ServerManagerEngine`, which submits each generation
to verl's `server_manager.generate` back on the event loop and waits for it. The agent's token
context gives the output as it is: prompt ids (everything before the first generated token),
response ids (generated tokens, mask 1; user and tool tokens in between, mask 0) and the reward of
ADR-004, scored from the episode's record by handoff.scoring exactly as the reducer scores it.
The episode's max_context_tokens is capped at rollout.max_model_len (when set); what does not fit
rollout.prompt_length / response_length is cut, counted in extra_fields (prompt_tokens_cut,
response_tokens_cut) and logged.

Configuration (the trainer config's `handoff` section, all optional):
    handoff.episode: EpisodeSettings fields; handoff.user: UserSpec fields;
    handoff.reward: name or path of the reward weights (conf/reward/<name>.yaml);
    handoff.chat_template: as ChatFormat takes it (None: the model's own, Hermes if it has no tools).
Dataset fields: `domain`, `task_id` and optionally `seed`, at top level or in `extra_info`.
With user.kind=engine the user simulator generates on the same servers (its tokens are not in the
response); user.kind=litellm uses an API model.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from functools import partial
from typing import Any

from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from handoff.agent.episode import EpisodeResult, EpisodeSettings, run_episode
from handoff.agent.user import UserSpec, make_user
from handoff.engine.base import Engine, Generation, Sampling
from handoff.engine.chat import ChatFormat
from handoff.scoring import Scorer

GENERATE_TIMEOUT_S = 600.0
logger = logging.getLogger(__name__)


class ServerManagerEngine:
    """An Engine over verl's async `server_manager.generate`, callable from a worker thread.

    verl's sampling params (temperature, top_p, ...) win over the agent's; the agent sets the
    per-turn `max_tokens`. verl reports "completed" for both EOS and the token limit, so a
    completion that fills `max_tokens` without ending on an end token counts as "length"."""

    def __init__(self, server_manager, loop: asyncio.AbstractEventLoop, sampling_params: dict, end_token_ids: set[int]):
        self.server_manager, self.loop = server_manager, loop
        self.sampling_params = dict(sampling_params)
        self.end_token_ids = end_token_ids

    def generate(self, prompt_ids: list[int], sampling: Sampling, session_id: str | None = None) -> Generation:
        params = {**self.sampling_params, "max_tokens": sampling.max_tokens}
        request = self.server_manager.generate(
            request_id=session_id or uuid.uuid4().hex, prompt_ids=list(prompt_ids), sampling_params=params
        )
        output = asyncio.run_coroutine_threadsafe(request, self.loop).result(timeout=GENERATE_TIMEOUT_S)
        ids = list(output.token_ids)
        return Generation(
            token_ids=ids,
            text="",  # the agent decodes the ids itself
            finish_reason=self._finish(ids, output.stop_reason, sampling.max_tokens),
            logprobs=list(output.log_probs) if output.log_probs else None,
        )

    def _finish(self, ids: list[int], stop_reason: str | None, max_tokens: int) -> str:
        if stop_reason in ("aborted", "abort"):
            return "abort"
        if ids and ids[-1] in self.end_token_ids:
            return "stop"
        if stop_reason == "length" or len(ids) >= max_tokens:
            return "length"
        return "stop"


def _capped(spec, section: str, max_model_len: int | None):
    """`spec` (EpisodeSettings or UserSpec) with max_context_tokens at most verl's max_model_len: a
    longer prompt is refused by verl's server (a failed rollout) instead of ending the episode as
    context_window_exceeded (user_error for the user simulator)."""
    if not max_model_len or spec.max_context_tokens <= max_model_len:
        return spec
    logger.warning("handoff.%s.max_context_tokens=%d capped at rollout.max_model_len=%d", section,
                   spec.max_context_tokens, max_model_len)
    return spec.model_copy(update={"max_context_tokens": max_model_len})


@register("tau2_handoff")
class Tau2AgentLoop(AgentLoopBase):
    """One tau2 episode per sample. `chat` (a ChatFormat over verl's tokenizer), `user_engine`
    and `label_for` can be given directly (tests); by default they come from the config."""

    def __init__(self, *args, chat=None, user_engine: Engine | None = None, label_for=None, **kwargs):
        super().__init__(*args, **kwargs)
        section = self.config.get("handoff") or {}
        section = OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else dict(section)
        max_model_len = self.rollout_config.get("max_model_len")
        self.settings = _capped(EpisodeSettings(**section.get("episode", {})), "episode", max_model_len)
        self.user_spec = UserSpec(**section.get("user", {}))
        if user_engine is None:  # the user simulator generates on verl's servers too
            self.user_spec = _capped(self.user_spec, "user", max_model_len)
        self.scorer = Scorer(section.get("reward", "default"), label_for=label_for)
        self.chat = chat or ChatFormat(self.tokenizer.name_or_path, section.get("chat_template"))
        _ = self.chat.tokenizer  # load it here: episodes run in worker threads, loading is not thread-safe
        self.user_engine = user_engine
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        domain, task_id, seed = _episode_fields(kwargs)
        loop = asyncio.get_running_loop()
        engine = ServerManagerEngine(self.server_manager, loop, sampling_params, {self.chat.eos_token_id})
        task = _get_task(domain, task_id)
        user = make_user(self.user_spec, task, engine=self.user_engine or engine, chat=self.chat,
                         session_id=uuid.uuid4().hex, domain=domain)
        episode = partial(run_episode, domain, task, engine, self.chat, user, self.settings, seed)
        result: EpisodeResult = await loop.run_in_executor(None, episode)
        score = self.scorer.score(result.to_record(model="policy")).score
        return self._output(result, score, bool(sampling_params.get("logprobs")))

    def _output(self, result: EpisodeResult, score, with_logprobs: bool) -> AgentLoopOutput:
        ctx = result.agent_tokens
        start = ctx.mask.index(1) if 1 in ctx.mask else len(ctx.ids)
        end = start + self.response_length
        prompt_ids = self._cap_text_prompt_length(ctx.ids[:start])
        cut = {"prompt_tokens_cut": start - len(prompt_ids), "response_tokens_cut": max(0, len(ctx.ids) - end)}
        if any(cut.values()):
            logger.warning("%s task %s: cut %d prompt and %d response tokens (rollout.prompt_length=%d, "
                           "response_length=%d)", result.domain, result.simulation.task_id, *cut.values(),
                           self.rollout_config.prompt_length, self.response_length)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=ctx.ids[start:end],
            response_mask=ctx.mask[start:end],
            response_logprobs=ctx.logprobs[start:end] if with_logprobs else None,
            reward_score=score.reward,
            num_turns=len(result.simulation.messages),
            metrics=AgentLoopMetrics(),
            extra_fields={
                "task_id": result.simulation.task_id,
                "domain": result.domain,
                "tau2_reward": score.tau2_reward,
                "transferred": score.transferred,
                "termination": score.termination_reason,
                "format_events": [e.model_dump(mode="json") for e in result.format_events],
                "simulation": result.simulation.model_dump(mode="json"),
                **cut,
            },
        )


def _episode_fields(fields: dict) -> tuple[str, str, int]:
    extra = fields.get("extra_info") or {}
    pick = lambda key: fields.get(key, extra.get(key))
    domain, task_id = pick("domain"), pick("task_id")
    if not domain or task_id is None:
        raise ValueError("a tau2_handoff sample needs `domain` and `task_id` (top level or in extra_info)")
    seed = pick("seed")
    return str(domain), str(task_id), int(seed) if seed is not None else random.randrange(2**31)


def _get_task(domain: str, task_id: str):
    from handoff.tasks import get_task

    return get_task(domain, task_id)
