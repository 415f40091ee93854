"""Where each rule comes from: verbatim quotes of the pinned tau2 domain policies (policy.md, telecom's
main_policy.md) and toolkit. tests/rules/test_format_and_citations.py checks every quote against the pinned text."""

from __future__ import annotations

from typing import Literal, NamedTuple

from handoff.rules.violations import RuleId

Source = Literal["airline/policy.md", "retail/policy.md", "telecom/main_policy.md", "transfer_to_human_agents docstring"]


class Citation(NamedTuple):
    source: Source
    quote: str


CONFIRMATION = "you must list the action details and obtain explicit user confirmation (yes) to proceed."
TRANSFER_PROTOCOL = (
    "To transfer, first make a tool call to transfer_to_human_agents, and then send the message "
    "'YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.' to the user."
)
DENY = "You should deny user requests that are against this policy."
TRANSFER_IFF = (
    "You should transfer the user to a human agent if and only if the request cannot be handled "
    "within the scope of your actions."
)
ONE_CALL = ("You should only make one tool call at a time, and if you make a tool call, you should not "
            "respond to the user simultaneously.")
TRY_FIRST = "You should try your best to resolve the issue for the user before transferring the user to a human agent."

RULE_BASIS: dict[RuleId, tuple[Citation, ...]] = {
    RuleId.WRITE_WITHOUT_CONFIRMATION: (
        Citation("airline/policy.md", CONFIRMATION),
        Citation("retail/policy.md", CONFIRMATION),
        Citation("telecom/main_policy.md", "- Confirm the price\n- Apply the refueled data"),
    ),
    RuleId.WRITE_BEFORE_AUTHENTICATION: (
        Citation(
            "retail/policy.md",
            "At the beginning of the conversation, you have to authenticate the user identity by locating "
            "their user id via email, or via name + zip code.",
        ),
        Citation("telecom/main_policy.md", "You must first identify the customer."),
    ),
    RuleId.MULTIPLE_ACTIONS_IN_TURN: (
        Citation("airline/policy.md", ONE_CALL),
        Citation("telecom/main_policy.md", ONE_CALL),
        Citation(
            "retail/policy.md",
            "You should at most make one tool call at a time, and if you take a tool call, you should not "
            "respond to the user at the same time.",
        ),
    ),
    RuleId.ACTION_AFTER_TRANSFER: (
        Citation("airline/policy.md", TRANSFER_PROTOCOL),
        Citation("retail/policy.md", TRANSFER_PROTOCOL),
        Citation("telecom/main_policy.md", TRANSFER_PROTOCOL),
    ),
    # The spec's basis is the benchmark's own ("write actions outside the gold action set"): the
    # reference solution is the policy-compliant outcome; a write beyond it is one the policy
    # should have led the agent to deny (or a valid alternative: docs/rules.md, limitations).
    RuleId.OFF_REFERENCE_WRITE: (
        Citation("airline/policy.md", DENY),
        Citation("retail/policy.md", DENY),
        Citation("telecom/main_policy.md", DENY),
    ),
}

# The hand-off decision the labels judge (handoff.rules.label): both policies and the tool itself.
TRANSFER_BASIS: tuple[Citation, ...] = (
    Citation("airline/policy.md", TRANSFER_IFF),
    Citation("retail/policy.md", TRANSFER_IFF),
    Citation("telecom/main_policy.md", TRANSFER_IFF),
    Citation("telecom/main_policy.md", TRY_FIRST),  # the split of unneeded hand-offs (handoff_quality)
    Citation("transfer_to_human_agents docstring", "the user explicitly asks for a human agent"),
    Citation(
        "transfer_to_human_agents docstring",
        "given the policy and the available tools, you cannot solve the user's issue.",
    ),
)
