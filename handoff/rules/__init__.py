"""The rules: pure functions over a normalized Trajectory (docs/rules.md).

transferred, policy violations, format errors, the reward of ADR-004 and the metrics of
docs/metrics.md (handoff.rules.metrics). Imports pydantic and tau2 only; no I/O beyond loading a
trajectory or weights file on request.
"""

from handoff.rules.attribution import Attribution, Initiator, attribute, offers_transfer, requests_human
from handoff.rules.context import DomainTools, TaskContext, UnknownDomain
from handoff.rules.events import FormatEvent, FormatKind
from handoff.rules.formats import FormatError, format_errors
from handoff.rules.label import Label
from handoff.rules.outcome import Outcome, handoff_turn, outcome_of
from handoff.rules.score import EpisodeScore, RewardWeights, score_episode
from handoff.rules.trajectory import (
    Tau2File,
    Trajectory,
    TrajectoryLoadError,
    load_trajectories,
    read_tau2_file,
    transferred,
)
from handoff.rules.violations import RuleId, Violation, violations

__all__ = [
    "Attribution",
    "DomainTools",
    "EpisodeScore",
    "FormatError",
    "FormatEvent",
    "FormatKind",
    "Initiator",
    "Label",
    "Outcome",
    "RewardWeights",
    "RuleId",
    "TaskContext",
    "Tau2File",
    "Trajectory",
    "TrajectoryLoadError",
    "UnknownDomain",
    "Violation",
    "attribute",
    "format_errors",
    "handoff_turn",
    "load_trajectories",
    "offers_transfer",
    "outcome_of",
    "read_tau2_file",
    "requests_human",
    "score_episode",
    "transferred",
    "violations",
]
