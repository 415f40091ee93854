"""Each format-error kind, positive and negative (tool results from the real tau2 environment),
and each rule's policy basis checked verbatim against the pinned tau2 policy text."""

from __future__ import annotations

import pytest
from tau2.domains.airline.tools import AirlineTools
from tau2.domains.airline.utils import AIRLINE_POLICY_PATH
from tau2.domains.retail.tools import RetailTools
from tau2.domains.retail.utils import RETAIL_POLICY_PATH
from tau2.domains.telecom.utils import TELECOM_MAIN_POLICY_PATH

from handoff.rules import FormatEvent, FormatKind, RuleId, format_errors
from handoff.rules.basis import RULE_BASIS, TRANSFER_BASIS
from tests.support.episodes import (
    CANCEL,
    RETAIL_ORDER,
    Episode,
    authenticated_retail,
    context,
)

K = FormatKind
HERMES_CALL = '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W8835847"\n</tool_call>'


def errors(ep: Episode, events=(), **simulation) -> list[tuple[FormatKind, int]]:
    traj = ep.trajectory(events, **simulation)
    return [(e.kind, e.turn) for e in format_errors(traj, context(ep.domain))]


# --- unparsed_tool_call -------------------------------------------------------------------------


def test_hermes_markup_left_in_text_is_unparsed_tool_call():
    ep = authenticated_retail()
    turn = ep.say(HERMES_CALL)
    assert errors(ep) == [(K.UNPARSED_TOOL_CALL, turn)]


def test_recorded_event_and_visible_markup_count_once():
    ep = authenticated_retail()
    turn = ep.say(HERMES_CALL)
    assert errors(ep, [FormatEvent(kind=K.UNPARSED_TOOL_CALL, turn=turn)]) == [(K.UNPARSED_TOOL_CALL, turn)]


def test_text_about_tools_is_not_unparsed_tool_call():
    ep = authenticated_retail()
    ep.say("I will use a tool call to look up your order.")
    assert errors(ep) == []


# --- unknown_tool -------------------------------------------------------------------------------


def test_call_to_a_tool_the_domain_lacks_is_unknown_tool():
    ep = authenticated_retail()
    turn = ep.call("refund_everything", order_id=RETAIL_ORDER)
    assert ep.last_result().content == "Error: Tool 'refund_everything' not found."
    assert errors(ep) == [(K.UNKNOWN_TOOL, turn)]


def test_airline_tool_is_unknown_in_retail():
    ep = authenticated_retail()
    turn = ep.call("get_reservation_details", reservation_id="Z7GOZK")
    assert errors(ep) == [(K.UNKNOWN_TOOL, turn)]


def test_known_tool_is_not_unknown_tool():
    ep = authenticated_retail()
    ep.call("get_order_details", order_id=RETAIL_ORDER)
    assert errors(ep) == []


# --- invalid_arguments vs business errors -------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, tau2_says",
    [
        ({}, "missing 1 required positional argument"),
        ({"order_id": RETAIL_ORDER, "verbose": True}, "unexpected keyword argument"),
        ({"order_id": 8835847}, "not found"),  # wrongly typed: tau2 passes the int through
    ],
)
def test_arguments_the_tool_rejected_are_invalid_arguments(arguments, tau2_says):
    ep = authenticated_retail()
    turn = ep.call("get_order_details", **arguments)
    assert ep.last_result().error and tau2_says in ep.last_result().content
    assert errors(ep) == [(K.INVALID_ARGUMENTS, turn)]


@pytest.mark.parametrize(
    "name, arguments",
    [
        ("get_order_details", {"order_id": "#W0000000"}),
        ("cancel_pending_order", {"order_id": "#W0000000", "reason": "ordered by mistake"}),
        ("cancel_pending_order", {"order_id": RETAIL_ORDER, "reason": "too expensive"}),
        ("find_user_id_by_email", {"email": "nobody@example.com"}),
    ],
)
def test_business_errors_are_not_format_errors(name, arguments):
    ep = authenticated_retail()
    ep.call(name, **arguments)
    assert ep.last_result().error  # e.g. "Error: Order not found", "Error: Invalid reason"
    assert errors(ep) == []


def test_wrongly_typed_arguments_the_tool_accepted_are_not_format_errors():
    ep = Episode("airline", "9")
    ep.user("Any direct flight from JFK to MCO on May 22?")
    ep.call("search_direct_flight", origin="JFK", destination="MCO", date=20240522)  # date is a str
    assert not ep.last_result().error  # tau2 answered (an empty list): nothing was rejected
    assert errors(ep) == []


def test_recorded_non_object_arguments_on_a_dropped_turn():
    ep = authenticated_retail()
    dropped = len(ep.messages)
    events = [FormatEvent(kind=K.INVALID_ARGUMENTS, turn=dropped, detail="arguments: [1, 2]")]
    # the turn was lost and the episode ended with agent_error: explained, so no protocol_error
    assert errors(ep, events, termination="agent_error", reward=0.0) == [(K.INVALID_ARGUMENTS, dropped)]


# --- empty_message ------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_assistant_message_without_text_or_calls_is_empty(content):
    ep = authenticated_retail()
    turn = ep.say(content)
    assert errors(ep, termination="agent_error", reward=0.0) == [(K.EMPTY_MESSAGE, turn)]


def test_recorded_empty_turn_that_was_dropped():
    ep = authenticated_retail()
    dropped = len(ep.messages)
    assert errors(ep, [FormatEvent(kind=K.EMPTY_MESSAGE, turn=dropped)], termination="agent_error") == [(K.EMPTY_MESSAGE, dropped)]


def test_message_with_text_is_not_empty():
    ep = authenticated_retail()
    ep.say("How can I help?")
    assert errors(ep) == []


# --- truncated_generation -----------------------------------------------------------------------


def test_recorded_truncation_with_context_window_exceeded():
    ep = authenticated_retail()
    dropped = len(ep.messages)
    events = [FormatEvent(kind=K.TRUNCATED_GENERATION, turn=dropped)]
    traj = ep.trajectory(events, termination="agent_error", reward=0.0, real_termination="context_window_exceeded")
    assert traj.termination_reason == "context_window_exceeded"
    assert [(e.kind, e.turn) for e in format_errors(traj)] == [(K.TRUNCATED_GENERATION, dropped)]


def test_no_truncation_unless_recorded():
    ep = authenticated_retail()
    ep.say("A long but complete answer. " * 50)
    assert errors(ep) == []


# --- protocol_error -----------------------------------------------------------------------------


def test_unexplained_agent_error_is_protocol_error():
    ep = authenticated_retail()
    turn = ep.call("get_order_details", text="Looking it up.", order_id=RETAIL_ORDER)
    ep.messages = ep.messages[: turn + 1]  # tau2's protocol check ended it on the mixed message
    assert errors(ep, termination="agent_error", reward=0.0) == [(K.PROTOCOL_ERROR, turn)]


def test_agent_error_after_a_tool_result_names_the_next_turn():
    ep = authenticated_retail()
    assert errors(ep, termination="agent_error", reward=0.0) == [(K.PROTOCOL_ERROR, len(ep.messages))]


def test_agent_error_explained_by_an_empty_message_is_not_protocol_error():
    ep = authenticated_retail()
    turn = ep.say("")
    assert (K.PROTOCOL_ERROR, turn) not in errors(ep, termination="agent_error")


def test_earlier_format_error_does_not_explain_a_final_agent_error():
    ep = authenticated_retail()
    early = ep.call("get_order_details")  # rejected arguments, the episode went on
    ep.user("Hello?")
    assert errors(ep, termination="agent_error") == [(K.INVALID_ARGUMENTS, early), (K.PROTOCOL_ERROR, len(ep.messages))]


@pytest.mark.parametrize("termination", ["user_stop", "agent_stop", "max_steps", "too_many_errors"])
def test_other_terminations_are_not_protocol_errors(termination):
    ep = authenticated_retail()
    ep.user("Thanks, bye.")
    assert errors(ep, termination=termination) == []


def test_errors_are_ordered_by_turn_then_kind():
    ep = authenticated_retail()
    a = ep.call("nope")
    b = ep.say(HERMES_CALL)
    c = ep.call("cancel_pending_order", order_id=RETAIL_ORDER)
    assert errors(ep) == [(K.UNKNOWN_TOOL, a), (K.UNPARSED_TOOL_CALL, b), (K.INVALID_ARGUMENTS, c)]
    assert CANCEL["order_id"] == RETAIL_ORDER


# --- citations ----------------------------------------------------------------------------------

PINNED = {
    "airline/policy.md": AIRLINE_POLICY_PATH.read_text(),
    "retail/policy.md": RETAIL_POLICY_PATH.read_text(),
    "telecom/main_policy.md": TELECOM_MAIN_POLICY_PATH.read_text(),
    "transfer_to_human_agents docstring": AirlineTools.transfer_to_human_agents.__doc__,
}
CITATIONS = [(rule.value, c) for rule, cs in RULE_BASIS.items() for c in cs] + [("transfer", c) for c in TRANSFER_BASIS]


def test_every_rule_has_a_basis():
    assert set(RULE_BASIS) == set(RuleId) and all(RULE_BASIS.values())


@pytest.mark.parametrize("rule, citation", CITATIONS, ids=[f"{r}:{c.source}" for r, c in CITATIONS])
def test_citation_is_verbatim_in_pinned_text(rule, citation):
    assert citation.quote in PINNED[citation.source]


def test_both_domains_share_the_transfer_tool_docstring():
    assert AirlineTools.transfer_to_human_agents.__doc__ == RetailTools.transfer_to_human_agents.__doc__


def test_a_misquote_is_caught():
    quote = RULE_BASIS[RuleId.WRITE_WITHOUT_CONFIRMATION][0].quote
    assert quote.replace("(yes)", "(y)") not in PINNED["airline/policy.md"]
