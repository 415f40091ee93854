"""Who asked for the human? User requests and agent offers of a transfer, detected by rule.

Everything reads the messages before the agent's first `transfer_to_human_agents` call (the whole
episode when there is none). Like the confirmation rule it is lexical; docs/rules.md ("Requests and
offers") lists what it misses.

- A *user request*: a user message with a clause that asks to be passed to a human: a request verb
  (speak, talk, transfer, connect, get, want, escalate, ...) with a human target after it (a human,
  person, human/live/real agent, representative, supervisor, manager, someone else or higher up)
  or an escalation, and no negator just before the verb ("I don't want to be transferred").
  Conditional requests and questions count; a mention without a request verb and tau2's
  `###TRANSFER###` stop token do not.
- An *agent offer*: an assistant message without a transfer call with a sentence that proposes a
  transfer ("I can transfer you", "Would you like me to connect you with a supervisor?") and leaves
  it to the user: an offering phrase (would you like, I can, if you'd like, ...) and no negator.
"""

from __future__ import annotations

import re
from enum import Enum

from pydantic import BaseModel, Field

from handoff.rules.outcome import transfer_message
from handoff.rules.trajectory import Trajectory

USER_STOP_TRANSFER = "###TRANSFER###"  # tau2.user.base.TRANSFER: the user simulator ends, asking for a human

_PERSON = (
    r"(?:(?:real|live|actual)\s+(?:person|human)|human|humans|person|people|supervisor|supervisors|manager|managers"
    r"|representative|rep|someone\s+(?:else|higher)|somebody\s+(?:else|higher)|anyone\s+else|anybody\s+else"
    r"|higher[-\s]up|(?:human|live|real|another|other|different)\s+(?:customer\s+service\s+)?"
    r"(?:agent|representative|rep))"
)
_FILLER = r"(?:\s+\S+){0,4}?"  # up to four words between the verb and its target
_NEGATED = re.compile(  # a negator within the four words before the end of the text
    r"\b(?:no|not|never|nor|without|rather\s+not|hold\s+off(?:\s+on)?|\w+n't|dont|cant|wont|didnt)\W+(?:\S+\W+){0,3}$")

_USER_REQUEST = re.compile(
    r"\b(?P<verb>(?:speak|speaking|talk|talking|chat|chatting|transfer|transferred|transferring|connect|connected|put\s+me\s+through|pass\s+me|"
    r"hand\s+me|escalate|escalated|escalating)" + _FILLER + r"\s+" + _PERSON + r"\b"
    r"|(?:get|want|need|request|have)(?:\s+me)?(?:\s+(?:a|an|to\s+a|the|your|some))?\s+" + _PERSON + r"\b"
    r"|(?:transfer|connect)(?:ed)?\s+(?:me|us)\s+(?:to|with)\s+(?:someone|somebody|anyone)\b"
    r"|(?:escalate|escalated|escalation|escalating)\b"
    r"|(?:someone\s+(?:else|higher\s+up)|anyone\s+else|somebody\s+else|a\s+supervisor|a\s+manager)"
    r"(?:\s+\S+){0,3}?\s+(?:i|we)\s+(?:can|could|may)\s+(?:speak|talk)\b)",
    re.IGNORECASE,
)
_HANDOFF_PHRASE = re.compile(
    r"\b(?P<verb>(?:transfer|transferring|connect|escalate|put)\s+(?:you|your\s+\w+|this|it)\b"
    r"|(?:speak|speaking|talk|talking)\s+(?:to|with)" + _FILLER + r"\s+" + _PERSON + r"\b"
    r"|the\s+transfer\b|transfer\s+to\s+(?:a\s+)?(?:human|live)\b)",
    re.IGNORECASE,
)
_OFFERING = re.compile(
    r"\b(?:would\s+you\s+(?:like|prefer)|do\s+you\s+(?:want|wish)|shall\s+i|should\s+i|may\s+i|i\s+can|i\s+could|"
    r"happy\s+to|glad\s+to|if\s+you(?:'d|\s+would)?\s+(?:like|prefer|want|wish)|you'd\s+(?:like|prefer)|option)\b",
    re.IGNORECASE,
)
_SCENARIO_MENTION = re.compile(r"\b(?:human|supervisor|manager|representative|escalat\w*|transfer\w*)", re.IGNORECASE)
_HYPOTHETICAL = re.compile(r"\b(?:if\s+i\s+were\s+to|even\s+if\s+i|even\s+a)\b", re.IGNORECASE)
_CLAUSE_END = re.compile(r"[.,;:!?\n]+")
_SENTENCE = re.compile(r"[^.;!?\n]+[.;!?]*")


class Initiator(str, Enum):
    USER = "user"  # a user request came before any agent offer
    AGENT_OFFER = "agent_offer"  # an agent offer came first
    AGENT = "agent"  # neither: the agent transferred unprompted


class Attribution(BaseModel):
    user_request_turn: int | None = Field(None, description="agent turn answering the first user request")
    agent_offer_turn: int | None = Field(None, description="agent turn of the first offer of a transfer")
    handoff_initiator: Initiator | None = Field(None, description="who asked first; None without a hand-off")
    user_ended_for_transfer: bool = Field(False, description="no transfer call, but the user ended with ###TRANSFER###")


def requests_human(text: str | None) -> bool:
    """True when a clause of the user's message asks to be passed to a human (not negated)."""
    clean = _normalize(text).replace(USER_STOP_TRANSFER.lower(), " ")
    return any(_holds(_USER_REQUEST, clause) for clause in _CLAUSE_END.split(clean))


def offers_transfer(text: str | None) -> bool:
    """True when a sentence of the agent's text proposes a transfer and leaves it to the user."""
    for sentence in _SENTENCE.findall(_normalize(text)):
        offering = _OFFERING.search(sentence) or sentence.endswith("?")
        if offering and not _HYPOTHETICAL.search(sentence) and _holds(_HANDOFF_PHRASE, sentence):
            return True
    return False


def request_message(traj: Trajectory) -> int | None:
    """The index in `messages` of the first user request before the hand-off."""
    return next((i for i, m in _before_handoff(traj) if m.role == "user" and requests_human(m.content)), None)


def offer_message(traj: Trajectory) -> int | None:
    """The index in `messages` of the first agent offer before the hand-off."""
    return next((i for i, m in _before_handoff(traj)
                 if m.role == "assistant" and not m.tool_calls and offers_transfer(m.content)), None)


def attribute(traj: Trajectory) -> Attribution:
    """The first user request and agent offer before the hand-off, and who initiated it."""
    at, request, offer = transfer_message(traj), request_message(traj), offer_message(traj)
    return Attribution(
        user_request_turn=None if request is None else agent_turn_of(traj, request),
        agent_offer_turn=None if offer is None else agent_turn_of(traj, offer),
        handoff_initiator=None if at is None else _initiator(request, offer),
        user_ended_for_transfer=at is None and any(
            m.role == "user" and USER_STOP_TRANSFER in (m.content or "") for m in traj.messages),
    )


def offscript(user_request_turn: int | None, user_scenario: str | None) -> bool | None:
    """A user request in a task whose scenario never mentions a human, supervisor, manager,
    representative, escalation or transfer: the user simulator went off script. None: no scenario."""
    if user_scenario is None:
        return None
    return user_request_turn is not None and not _SCENARIO_MENTION.search(user_scenario)


def agent_turn_of(traj: Trajectory, index: int) -> int:
    """The agent turn (as handoff_turn counts them) of message `index`: an assistant message's own
    turn, or for a user message the agent turn that answers it."""
    first_user = next((i for i, m in enumerate(traj.messages) if m.role == "user"), -1)
    done = sum(1 for t in traj.assistant_turns if first_user < t <= index)
    return max(1, done + (traj.messages[index].role != "assistant"))


def _before_handoff(traj: Trajectory):
    at = transfer_message(traj)
    return enumerate(traj.messages[: len(traj.messages) if at is None else at])


def _initiator(request: int | None, offer: int | None) -> Initiator:
    if request is not None and (offer is None or request < offer):
        return Initiator.USER
    return Initiator.AGENT if offer is None else Initiator.AGENT_OFFER


def _holds(pattern: re.Pattern, text: str) -> bool:
    """A match of `pattern` in `text` with no negator in the four words before its verb."""
    return any(not _NEGATED.search(text[: m.start()]) for m in pattern.finditer(text))


def _normalize(text: str | None) -> str:
    return (text or "").lower().replace("\u2019", "'")
