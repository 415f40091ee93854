"""A user who acts (telecom, dual control): the user simulator calls its own tools in the Hermes format,
parsed by the agent's parser; the results go back to it; its slips are the user's, never the agent's."""

from __future__ import annotations

from tau2.data_model.message import ToolMessage, UserMessage
from tau2.user.user_simulator import UserSimulator

from handoff.agent.user import EngineUserSimulator, UserSpec, domain_user_tools, make_user
from handoff.records import EpisodeRecord
from handoff.report.transcripts import transcript_html
from handoff.scoring import Scorer
from handoff.tasks import get_task
from tests.support.agent import call, chat, run, scripted

LOCKED = "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]"
AGENT = ["Could you check your status bar, please?",
         call("transfer_to_human_agents", {"summary": "The SIM is locked."}),
         "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."]
USER = [call("check_status_bar", {}), "My status bar shows airplane mode.", call("fly_away", {}), "ok",
        "###TRANSFER###"]


def test_the_users_tool_call_runs_on_its_phone_and_its_slip_is_its_own():
    result = run(AGENT, USER, domain="telecom", task_id=LOCKED)
    messages = result.simulation.messages
    first, answer = messages[1], messages[2]
    assert isinstance(first, UserMessage) and [(c.name, c.requestor) for c in first.tool_calls] == [
        ("check_status_bar", "user")]
    assert isinstance(answer, ToolMessage) and answer.requestor == "user" and "Airplane Mode" in answer.content
    assert messages[3].content == "My status bar shows airplane mode."  # the result went back to the user
    assert [(e.kind.value, e.turn) for e in result.user_format_events] == [("unknown_tool", 5)]
    assert messages[5].tool_calls[0].name == "fly_away" and result.format_events == []
    record = result.to_record("scripted")
    score = Scorer("default").score(record).score
    assert score.format_errors == [] and score.transferred and result.simulation.reward_info.reward == 1.0
    again = EpisodeRecord.model_validate_json(record.model_dump_json())
    assert again.user_format_events == result.user_format_events
    page = transcript_html(record, Scorer("default").score(record))
    assert "the user's tool call: check_status_bar({})" in page and "tool result to the user" in page
    assert "the user's format error unknown_tool" in page and "(not charged to the agent)" in page


def test_a_user_call_whose_arguments_are_no_object_is_sent_as_its_text():
    broken = '<tool_call>{"name": "check_status_bar", "arguments": [1]}</tool_call>'
    result = run(AGENT, [broken, "###STOP###"], domain="telecom", task_id=LOCKED)
    first = result.simulation.messages[1]
    assert first.content == broken and not first.tool_calls
    assert [(e.kind.value, e.turn) for e in result.user_format_events] == [("invalid_arguments", 1)]
    assert result.format_events == []


def test_users_get_their_domains_tools_in_every_kind():
    task = get_task("telecom", LOCKED)
    names = {t.name for t in domain_user_tools("telecom")}
    assert {"check_status_bar", "toggle_airplane_mode", "reset_apn_settings", "reboot_device"} <= names
    assert domain_user_tools("airline") is None and domain_user_tools("retail") is None
    engine_user = make_user(UserSpec(), task, engine=scripted([]), chat=chat(), domain="telecom")
    assert isinstance(engine_user, EngineUserSimulator) and {t.name for t in engine_user.tools} == names
    api_user = make_user(UserSpec(kind="litellm", llm="gpt-4.1"), task, domain="telecom")
    assert type(api_user) is UserSimulator and {t.name for t in api_user.tools} == names  # tau2's own
    assert api_user.global_simulation_guidelines != make_user(
        UserSpec(kind="litellm", llm="gpt-4.1"), get_task("airline", "0"), domain="airline").global_simulation_guidelines
    airline_user = make_user(UserSpec(), get_task("airline", "0"), engine=scripted([]), chat=chat(), domain="airline")
    assert airline_user.tools is None and airline_user.parser is None
