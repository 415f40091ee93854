"""handoff_agent with the scripted engine in tau2's real Orchestrator, environment and evaluator:
every format kind, the internal stop, garbage output, the user simulator and finalization."""

from __future__ import annotations

import itertools
import random

import pytest
from tau2.data_model.message import AssistantMessage
from tau2.data_model.simulation import TerminationReason

from handoff.agent.context import TokenContext
from handoff.agent.finalize import termination_of
from handoff.agent.handoff_agent import INTERNAL_STOP, HandoffAgent
from handoff.agent.parsing import ToolCallParser
from handoff.agent.user import UserSpec, make_user
from handoff.engine.base import ContextOverflowError, Sampling
from handoff.engine.scripted import Scripted, ScriptExhausted
from handoff.records import EpisodeRecord
from handoff.rules import RewardWeights
from handoff.scoring import Scorer, trajectory_of
from handoff.tasks import get_task
from tests.support.agent import (
    AIRLINE_USER,
    call,
    chat,
    comparable,
    kinds,
    run,
    scripted,
    settings,
)

LOOKUP = call("get_user_details", {"user_id": AIRLINE_USER})
USER_OK = ["Hi, I need help with my reservation.", "My user id is mia_li_3668.", "###STOP###"]


def no_stop_message(result) -> bool:
    return not any(isinstance(m, AssistantMessage) and m.content == INTERNAL_STOP for m in result.simulation.messages)


# --- well-formed turns ------------------------------------------------------------------------------


def test_tool_call_then_text_is_a_clean_episode():
    result = run([LOOKUP, "I found your profile. What can I do?", "Goodbye."], USER_OK)
    messages = result.simulation.messages
    assert result.simulation.termination_reason == TerminationReason.USER_STOP
    assert result.format_events == []
    assert messages[2].tool_calls[0].name == "get_user_details" and messages[2].content is None
    assert messages[3].role == "tool" and not messages[3].error and AIRLINE_USER in messages[3].content
    assert messages[4].content == "I found your profile. What can I do?"
    assert [m.turn_idx for m in messages] == list(range(len(messages)))
    assert result.usage.agent_turns == 3 and result.usage.user_completion_tokens > 0


def test_a_user_reply_cut_at_max_tokens_is_counted_in_the_record():
    """The user simulator's reply cut at its max_tokens goes on as the user's message (tau2's way);
    the record says how many were cut, instead of nothing."""
    cut = Scripted(text="My user id is mia_li_3668 and I would like", truncated=True)
    result = run([LOOKUP, "I found your profile. What can I do?", "Goodbye."], [USER_OK[0], cut, USER_OK[2]])
    assert result.usage.user_truncated_turns == 1 and result.usage.user_completion_tokens > 0
    assert run([LOOKUP, "I found your profile.", "Goodbye."], USER_OK).usage.user_truncated_turns == 0


def test_prompts_grow_append_only_and_mask_marks_generated_tokens():
    agent = scripted([LOOKUP, "Done.", "Bye."])
    task = get_task("airline", "0")
    user = make_user(UserSpec(), task, engine=scripted(USER_OK), chat=chat())
    from handoff.agent.episode import run_episode

    result = run_episode("airline", task, agent, chat(), user, settings(), seed=1)
    prompts, ctx = agent.prompts, result.agent_tokens
    for earlier, later in itertools.pairwise(prompts):
        assert later[: len(earlier)] == earlier  # the next prompt extends the previous one
    generated = [agent.replay(Scripted(text=t), 64).token_ids for t in [LOOKUP, "Done.", "Bye."]]
    assert sum(ctx.mask) == sum(len(g) for g in generated)
    assert ctx.ids[: len(prompts[-1])] == prompts[-1]
    assert chat().decode(prompts[1][len(prompts[0]):]).startswith(LOOKUP)  # the model's own tokens, verbatim


def test_transfer_is_a_tool_call_and_scores_with_the_label():
    transfer = call("transfer_to_human_agents", {"summary": "user wants a human"})
    result = run([transfer, "You are being transferred."], ["I want a human agent.", "###STOP###"])
    score = Scorer("default").score(result.to_record("m")).score
    assert score.transferred is True and score.label.should_transfer is False
    assert score.reward_terms.handoff == RewardWeights.load("default").handoff.false_positive
    assert trajectory_of(result.to_record("m")).termination_reason == "user_stop"


# --- format events that leave the episode running ------------------------------------------------


def test_unparsed_tool_call_stays_in_the_text_and_is_recorded():
    half = 'Let me check. <tool_call>{"name": "get_user_details", "arguments": {"user_id": '
    result = run([half, "Anything else?"], ["Hi.", "Fine.", "###STOP###"])
    assert kinds(result) == [("unparsed_tool_call", 2)]
    assert result.simulation.messages[2].content == half and result.simulation.messages[2].tool_calls is None
    assert result.simulation.termination_reason == TerminationReason.USER_STOP


def test_text_without_markup_is_no_format_error():
    result = run(["I can help with tool calls later.", "Bye."], ["Hi.", "Ok.", "###STOP###"])
    assert result.format_events == []


def test_unknown_tool_is_recorded_and_answered_by_tau2():
    result = run([call("book_a_spaceship", {"to": "mars"}), "Sorry."], ["Hi.", "###STOP###"])
    assert kinds(result) == [("unknown_tool", 2)]
    assert result.simulation.messages[3].error is True


def test_rejected_arguments_are_invalid_arguments():
    wrong = call("get_reservation_details", {"reservation": "ABC123"})  # the parameter is reservation_id
    result = run([wrong, "Sorry."], ["Hi.", "###STOP###"])
    assert kinds(result) == [("invalid_arguments", 2)]
    assert result.simulation.messages[3].error is True


def test_business_error_is_not_a_format_error():
    missing = call("get_reservation_details", {"reservation_id": "ZZZZZZ"})
    result = run([missing, "I could not find it."], ["Hi.", "###STOP###"])
    assert result.simulation.messages[3].error is True  # "Reservation ZZZZZZ not found"
    assert result.format_events == []


# --- unusable turns: the internal stop ---------------------------------------------------------------


@pytest.mark.parametrize(
    "completion, kind, termination",
    [
        (call("get_user_details", ["mia_li_3668"]), "invalid_arguments", "agent_error"),
        ('<tool_call>{"name": "get_user_details", "arguments": "mia"}</tool_call>', "invalid_arguments", "agent_error"),
        ("   ", "empty_message", "agent_error"),
        ("", "empty_message", "agent_error"),
        (Scripted(text="I will now", truncated=True), "truncated_generation", "context_window_exceeded"),
    ],
)
def test_unusable_turn_ends_the_episode_with_its_real_reason(completion, kind, termination):
    result = run([LOOKUP, completion], USER_OK)
    sim = result.simulation
    assert kinds(result) == [(kind, len(sim.messages))]  # the dropped turn's index
    assert no_stop_message(result) and len(sim.messages) == 4
    assert sim.termination_reason == TerminationReason.AGENT_ERROR
    assert termination_of(sim) == termination
    assert sim.reward_info.reward == 0.0 and "prematurely" in sim.reward_info.info["note"]
    assert result.log.stop.termination == termination


def test_context_overflow_ends_the_episode_before_generating():
    agent = scripted([LOOKUP])
    task = get_task("airline", "0")
    user = make_user(UserSpec(), task, engine=scripted(USER_OK), chat=chat())
    from handoff.agent.episode import run_episode

    result = run_episode("airline", task, agent, chat(), user, settings(max_context_tokens=500), seed=1)
    assert agent.prompts == []  # the system prompt alone is longer than 500 tokens
    assert termination_of(result.simulation) == "context_window_exceeded"
    assert result.format_events == [] and no_stop_message(result)
    assert [m.role for m in result.simulation.messages] == ["assistant", "user"]


def test_engine_context_overflow_is_a_context_window_ending():
    class FullEngine:
        def generate(self, prompt_ids, sampling, session_id=None):
            raise ContextOverflowError(len(prompt_ids), 2048)

    task = get_task("airline", "0")
    user = make_user(UserSpec(), task, engine=scripted(USER_OK), chat=chat())
    from handoff.agent.episode import run_episode

    result = run_episode("airline", task, FullEngine(), chat(), user, settings(), seed=1)
    assert termination_of(result.simulation) == "context_window_exceeded"
    assert "2048-token context" in result.simulation.reward_info.info["handoff_termination_detail"]


def test_internal_stop_at_max_steps_keeps_the_real_reason():
    # tau2 turns the agent stop into max_steps when it lands on the last step; finalize restores it
    result = run([LOOKUP, ""], USER_OK, max_steps=4)
    assert termination_of(result.simulation) == "agent_error"
    assert kinds(result) == [("empty_message", 4)]


def test_is_stop_only_for_the_internal_message():
    assert not HandoffAgent.is_stop(AssistantMessage(role="assistant", content=INTERNAL_STOP))
    assert not HandoffAgent.is_stop(AssistantMessage(role="assistant", content="hi", raw_data={"x": 1}))


# --- garbage never raises ------------------------------------------------------------------------------


def test_garbage_output_never_raises_and_records_its_event():
    rng = random.Random(0)
    vocab = chat().tokenizer.vocab_size
    random_ids = Scripted(token_ids=[rng.randrange(vocab) for _ in range(400)])
    nonsense = " ".join(rng.choice(["blorp", "{", "}", "<tool", "call>", "\u00e9\u00df", "]]"]) for _ in range(10_000))
    raw_bytes = bytes(rng.randrange(256) for _ in range(30)).decode("latin-1") + "<tool_call>"
    cases = {
        "random ids": (random_ids, "truncated_generation"),
        "10k tokens": (nonsense, "truncated_generation"),
        "random bytes": (raw_bytes, "unparsed_tool_call"),
        "half a tool call": ('<tool_call>{"name": "get_user_', "unparsed_tool_call"),
        "JSON list arguments": ('<tool_call>{"name": "get_user_details", "arguments": [1, 2]}</tool_call>', "invalid_arguments"),
        "JSON list call": ("<tool_call>[1, 2]</tool_call>", "unparsed_tool_call"),
    }
    for name, (completion, kind) in cases.items():
        result = run([completion, "Sorry.", "Bye."], ["Hi.", "Ok.", "###STOP###"])
        assert kind in [k for k, _ in kinds(result)], name
        EpisodeRecord.model_validate_json(result.to_record("m").model_dump_json()).simulation_run()


def test_parser_classifies_without_raising():
    parser = ToolCallParser(chat().tokenizer, get_task_tools())
    two = LOOKUP + call("search_direct_flight", {"origin": "JFK", "destination": "LAX", "date": "2024-05-20"})
    parsed = parser.parse("Checking. " + two, "c")
    assert [c.id for c in parsed.tool_calls] == ["c_0", "c_1"] and parsed.content == "Checking. "
    assert parser.parse('<tool_call>{"name": 5, "arguments": {}}</tool_call>', "c").events[0][0].value == "unparsed_tool_call"
    assert parser.parse("</tool_call>", "c").events[0][0].value == "unparsed_tool_call"
    assert parser.parse("\n\n", "c").unusable.value == "empty_message"


def _deep(levels: int) -> str:
    """A call whose arguments object nests `levels` deep (the object itself is level 1)."""
    inner = "[" * (levels - 1) + "]" * (levels - 1)
    return '<tool_call>{"name": "get_user_details", "arguments": {"a": ' + inner + "}}</tool_call>"


_LONE_SURROGATE = "\\ud800"  # a JSON escape json.loads accepts; the str it gives cannot be UTF-8 encoded
HOSTILE_CALLS = {
    "surrogate in a value": '<tool_call>{"name": "get_user_details", "arguments": {"user_id": "%s"}}</tool_call>',
    "surrogate in a key": '<tool_call>{"name": "get_user_details", "arguments": {"%s": "x"}}</tool_call>',
    "surrogate in the name": '<tool_call>{"name": "get_user%s", "arguments": {}}</tool_call>',
    "surrogate as the arguments": '<tool_call>{"name": "get_user_details", "arguments": "%s"}</tool_call>',
}
HOSTILE_CALLS = {name: text % _LONE_SURROGATE for name, text in HOSTILE_CALLS.items()}
HOSTILE_CALLS |= {"arguments 33 deep": _deep(33), "arguments 900 deep": _deep(900)}


@pytest.mark.parametrize("name", list(HOSTILE_CALLS))
def test_hostile_tool_call_is_unparsed(name):
    parser = ToolCallParser(chat().tokenizer, get_task_tools())
    parsed = parser.parse("Checking. " + LOOKUP + HOSTILE_CALLS[name], "c")
    assert parsed.tool_calls == [] and parsed.unusable is None
    assert parsed.content == "Checking. " + LOOKUP + HOSTILE_CALLS[name]
    assert [kind.value for kind, _ in parsed.events] == ["unparsed_tool_call"]
    assert parser.parse(_deep(32), "c").tool_calls[0].arguments["a"][0]  # 32 levels are fine


@pytest.mark.parametrize("name", list(HOSTILE_CALLS))
def test_hostile_tool_call_episode_is_recorded_and_serialises(name):
    long_enough = Sampling(max_tokens=1024)  # the 900 levels are ~930 tokens
    result = run([HOSTILE_CALLS[name], "Sorry.", "Bye."], ["Hi.", "Ok.", "###STOP###"], agent_sampling=long_enough)
    assert kinds(result) == [("unparsed_tool_call", 2)]
    assert result.simulation.messages[2].tool_calls is None
    data = result.to_record("m").model_dump_json().encode("utf-8")
    EpisodeRecord.model_validate_json(data).simulation_run()


def test_text_around_several_tool_calls_is_kept():
    parser = ToolCallParser(chat().tokenizer, get_task_tools())
    parsed = parser.parse("Before. " + LOOKUP + " Between. " + LOOKUP + " After.", "c")
    assert [c.id for c in parsed.tool_calls] == ["c_0", "c_1"]
    assert parsed.content == "Before.  Between.  After."
    assert parser.parse(LOOKUP + "\n", "c").content is None


def test_stray_markup_beside_a_decoded_call_is_recorded():
    parser = ToolCallParser(chat().tokenizer, get_task_tools())
    for text in (LOOKUP + "</tool_call>", "</tool_call>" + LOOKUP, LOOKUP + " </tool_call> Done."):
        parsed = parser.parse(text, "c")
        assert [c.name for c in parsed.tool_calls] == ["get_user_details"], text
        assert [kind.value for kind, _ in parsed.events] == ["unparsed_tool_call"], text
    assert parser.parse(LOOKUP + " Done.", "c").events == []


def test_text_after_a_tool_call_is_a_multiple_actions_violation():
    script = [LOOKUP + " Let me know!", LOOKUP + LOOKUP, "Done.", "Bye."]
    result = run(script, USER_OK, agent_sampling=Sampling(max_tokens=256))
    messages = result.simulation.messages
    assert messages[2].content == " Let me know!" and len(messages[2].tool_calls) == 1
    assert len(messages[4].tool_calls) == 2 and messages[4].content is None
    score = Scorer("default").score(result.to_record("m")).score
    assert [(v.rule.value, v.turn) for v in score.violations] == [
        ("multiple_actions_in_turn", 2), ("multiple_actions_in_turn", 4)]
    assert result.format_events == []


def get_task_tools():
    from tau2.registry import registry

    return registry.get_env_constructor("airline")().get_tools()


# --- user simulator, records -----------------------------------------------------------------------


def test_empty_user_reply_is_a_user_error():
    result = run([LOOKUP, "Anything else?"], ["Hi.", ""])
    assert result.simulation.termination_reason == TerminationReason.USER_ERROR
    assert result.simulation.reward_info.reward == 0.0
    assert "empty message" in result.simulation.reward_info.info["handoff_termination_detail"]


def test_user_simulator_uses_tau2_prompt_and_flipped_roles():
    task = get_task("airline", "0")
    engine = scripted(["Hello, I need help.", "###STOP###"])
    user = make_user(UserSpec(), task, engine=engine, chat=chat())
    run_result = run(["How can I help?"], ["Hello, I need help.", "###STOP###"])
    assert run_result.simulation.termination_reason == TerminationReason.USER_STOP
    state = user.get_init_state()
    first = AssistantMessage(role="assistant", content="Hi! How can I help you today?")
    reply, state = user.generate_next_message(first, state)
    prompt = chat().decode(engine.prompts[0], skip_special_tokens=False)
    assert str(task.user_scenario) in prompt and "<|im_start|>user\nHi! How can I help you today?" in prompt
    assert reply.content == "Hello, I need help."


def test_make_user_kinds_and_errors():
    task = get_task("retail", "0")
    api_user = make_user(UserSpec(kind="litellm", llm="gpt-4.1"), task)
    assert api_user.llm == "gpt-4.1" and str(task.user_scenario) == api_user.instructions
    with pytest.raises(ValueError, match="needs user.llm"):
        make_user(UserSpec(kind="litellm"), task)
    with pytest.raises(ValueError, match="needs an engine"):
        make_user(UserSpec(), task)


def test_script_too_short_is_a_clear_error():
    with pytest.raises(ScriptExhausted):
        scripted([]).generate([1], Sampling())


def test_record_roundtrip_and_same_script_same_messages():
    first = run([LOOKUP, "Done."], USER_OK[:1] + ["###STOP###"])
    second = run([LOOKUP, "Done."], USER_OK[:1] + ["###STOP###"])
    assert comparable(first.simulation.messages) == comparable(second.simulation.messages)
    record = EpisodeRecord.model_validate_json(first.to_record("smollm2", step=3, trial=1).model_dump_json())
    assert (record.domain, record.task_id, record.step, record.trial, record.seed) == ("airline", "0", 3, 1, 7)
    assert comparable(record.simulation_run().messages) == comparable(first.simulation.messages)


def test_token_context_closes_turns_like_the_template():
    ctx = TokenContext(chat(), tools=None)
    ctx.start([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    ctx.add_generation(chat().encode("hello") + [chat().eos_token_id])
    ctx.add_messages([{"role": "user", "content": "again"}])
    expected = chat().render([
        {"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"},
    ])
    assert ctx.ids == expected
    assert sum(ctx.mask) == len(chat().encode("hello")) + 1
