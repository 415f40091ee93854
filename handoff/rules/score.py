"""The episode score and the reward of ADR-004 (docs/adr/004-reward.md):

    reward = task * tau2_reward + handoff[cell] - min(max_penalty, sum of penalties)

`cell` is the hand-off decision against the label (true/false positive/negative, where
"positive" means a transfer); the penalties are weight x count for each violation (rule, turn)
and each format error (kind, turn). `transferred` is the same function the metrics use, so the
reward and the label never disagree about whether a hand-off happened.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from handoff.errors import ConfigError
from handoff.rules.attribution import Initiator, attribute, offscript
from handoff.rules.context import TaskContext
from handoff.rules.events import FormatKind
from handoff.rules.formats import FormatError, format_errors
from handoff.rules.handoff_quality import handoff_quality
from handoff.rules.label import Label
from handoff.rules.outcome import EPISODE_RULE_USER_REQUEST, Outcome, handoff_turn, outcome_detail, outcome_of
from handoff.rules.trajectory import Trajectory, transferred
from handoff.rules.violations import RuleId, Violation, violations

REWARD_CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "reward"


class HandoffWeights(BaseModel):
    model_config = ConfigDict(extra="forbid")

    true_positive: float
    true_negative: float
    false_positive: float
    false_negative: float

    def of(self, transferred: bool, should_transfer: bool) -> float:
        if transferred:
            return self.true_positive if should_transfer else self.false_positive
        return self.false_negative if should_transfer else self.true_negative


class RewardWeights(BaseModel):
    """All reward weights (conf/reward/*.yaml). Every rule and format kind needs its weight."""

    model_config = ConfigDict(extra="forbid")

    task: float = Field(description="weight of tau2's task reward")
    handoff: HandoffWeights
    violations: dict[RuleId, float] = Field(description="penalty per violation (rule, turn)")
    format_errors: dict[FormatKind, float] = Field(description="penalty per format error (kind, turn)")
    max_penalty: float | None = Field(None, ge=0, description="cap on the summed penalties; null: none")
    label: Literal["task", "episode"] = Field("task", description="what the hand-off term judges against: the "
                                              "task's label, or the episode's (a user request makes it 1)")

    @model_validator(mode="after")
    def _complete(self) -> RewardWeights:
        for name, table, keys in (("violations", self.violations, RuleId), ("format_errors", self.format_errors, FormatKind)):
            missing = [k.value for k in keys if k not in table]
            if missing:
                raise ValueError(f"{name}: no weight for {', '.join(missing)}")
        return self

    @classmethod
    def load(cls, path_or_name: str | Path = "default") -> RewardWeights:
        """From a YAML file, or by name from conf/reward/<name>.yaml."""
        path = Path(path_or_name)
        if not path.suffix:
            path = REWARD_CONF_DIR / f"{path_or_name}.yaml"
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read reward weights {path}: {exc}") from None
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError.from_validation(f"reward weights {path}", exc) from None


class RewardTerms(BaseModel):
    task: float
    handoff: float
    violations: float
    format_errors: float
    penalty: float = Field(description="violations + format_errors, after the cap")


class EpisodeScore(BaseModel):
    """One episode as the rules see it: the record behind the reducer, reports and `handoff score`."""

    task_id: str
    domain: str
    trial: int | None = None
    transferred: bool
    label: Label
    violations: list[Violation]
    format_errors: list[FormatError]
    tau2_reward: float | None
    reward: float
    reward_terms: RewardTerms
    termination_reason: str
    n_assistant_turns: int
    n_messages: int
    handoff_turn: int | None = Field(None, description="agent turn of the first transfer call (handoff.rules.outcome)")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    user_request_turn: int | None = Field(None, description="agent turn answering the first user request of a "
                                          "human before the hand-off (handoff.rules.attribution)")
    agent_offer_turn: int | None = Field(None, description="agent turn of the first offer of a transfer before it")
    handoff_initiator: Initiator | None = Field(None, description="user / agent_offer / agent; None: no hand-off")
    user_ended_for_transfer: bool = Field(False, description="the user ended with ###TRANSFER###, the agent never "
                                          "called the transfer tool (no hand-off by the spec)")
    user_request_offscript: bool | None = Field(None, description="a user request although the task's scenario "
                                                "never mentions a human (the user simulator's drift); None: "
                                                "no scenario known")
    handoff_delay: int | None = Field(None, description="agent turns from the known need (turn 1 for a task label "
                                      "1, else the first user request) to the hand-off (handoff.rules.handoff_quality)")
    write_before_handoff: bool | None = Field(None, description="a write attempted before the first transfer call")
    summary_complete: bool | None = Field(None, description="the transfer summary names the user id and every "
                                          "reservation / order id touched before it")
    tried_before_handoff: bool | None = Field(None, description="a reference action other than the transfer was "
                                              "performed, by the agent or the user, before the first transfer "
                                              "call (None: no hand-off, or nothing but a transfer to try)")
    episode_should_transfer: bool = Field(None, description="the episode label: the task's, or true when the user "
                                          "asked for a human before the hand-off (default: from the fields above)")

    @model_validator(mode="after")
    def _episode_label(self) -> EpisodeScore:
        if self.episode_should_transfer is None:
            self.episode_should_transfer = self.label.should_transfer or self.user_request_turn is not None
        return self

    @property
    def correct_handoff(self) -> bool:
        return self.transferred == self.label.should_transfer

    @property
    def outcome(self) -> Outcome:
        """Against the task's label (the spec's, the primary one)."""
        return outcome_of(self.transferred, self.label.should_transfer)

    @property
    def episode_outcome(self) -> Outcome:
        """Against the episode's label."""
        return outcome_of(self.transferred, self.episode_should_transfer)

    @property
    def episode_correct_handoff(self) -> bool:
        return self.transferred == self.episode_should_transfer

    @property
    def episode_rule(self) -> str:
        """The label rule under the episode label: the task's, or `user_request` where a request made it 1."""
        flipped = self.episode_should_transfer != self.label.should_transfer
        return EPISODE_RULE_USER_REQUEST if flipped else self.label.rule

    def outcome_detail(self, episode: bool = False) -> str:
        """The outcome class with unneeded and missed hand-offs split by who asked (outcome_detail)."""
        outcome = self.episode_outcome if episode else self.outcome
        return outcome_detail(outcome, self.handoff_initiator, self.user_request_turn is not None)


def score_episode(traj: Trajectory, label: Label, ctx: TaskContext, weights: RewardWeights) -> EpisodeScore:
    found_violations = violations(traj, ctx)
    found_errors = format_errors(traj, ctx)
    did_transfer = transferred(traj)
    turn = handoff_turn(traj)
    attribution = attribute(traj)
    episode_should = label.should_transfer or attribution.user_request_turn is not None
    judged = episode_should if weights.label == "episode" else label.should_transfer
    terms = reward_terms(did_transfer, judged, found_violations, found_errors, traj.tau2_reward, weights)
    return EpisodeScore(
        task_id=traj.task_id,
        domain=traj.domain,
        trial=traj.trial,
        transferred=did_transfer,
        label=label,
        violations=found_violations,
        format_errors=found_errors,
        tau2_reward=traj.tau2_reward,
        reward=terms.task + terms.handoff - terms.penalty,
        reward_terms=terms,
        termination_reason=traj.termination_reason,
        n_assistant_turns=assistant_turn_count(traj, found_errors),
        n_messages=len(traj.messages),
        handoff_turn=turn,
        prompt_tokens=traj.prompt_tokens,
        completion_tokens=traj.completion_tokens,
        **attribution.model_dump(),
        episode_should_transfer=episode_should,
        user_request_offscript=offscript(attribution.user_request_turn, ctx.user_scenario),
        **handoff_quality(traj, ctx, turn, label.should_transfer, attribution.user_request_turn).model_dump(),
    )


def reward_terms(
    did_transfer: bool,
    should_transfer: bool,
    found_violations: list[Violation],
    found_errors: list[FormatError],
    tau2_reward: float | None,
    weights: RewardWeights,
) -> RewardTerms:
    """The reward's parts (ADR-004); `should_transfer` is the label `weights.label` names. A missing
    tau2 reward (not evaluated) counts as 0."""
    violation_penalty = sum(weights.violations[v.rule] for v in found_violations)
    format_penalty = sum(weights.format_errors[e.kind] for e in found_errors)
    penalty = violation_penalty + format_penalty
    if weights.max_penalty is not None:
        penalty = min(penalty, weights.max_penalty)
    return RewardTerms(
        task=weights.task * (tau2_reward or 0.0),
        handoff=weights.handoff.of(did_transfer, should_transfer),
        violations=violation_penalty,
        format_errors=format_penalty,
        penalty=penalty,
    )


def assistant_turn_count(traj: Trajectory, errors: list[FormatError]) -> int:
    """The agent's turns: assistant messages after the first user message (tau2's canned greeting
    is not a model turn), plus the final turn the agent failed to produce if an error names it."""
    first_user = next((i for i, m in enumerate(traj.messages) if m.role == "user"), -1)
    dropped = any(e.turn >= len(traj.messages) for e in errors)
    return sum(1 for t in traj.assistant_turns if t > first_user) + dropped
