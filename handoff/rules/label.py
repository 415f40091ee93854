"""The label of a task: should a correct agent hand off to a human, and which rule says so.

Rule ids (docs/tasks.md): gold_transfer_action, no_transfer, explicit_request, out_of_scope,
hard_negative. A hand-checked correction from data/manifests/label_overrides_v1.json keeps the rule it
corrects behind an "override:" prefix (e.g. "override:no_transfer") and carries its reason.
"""

from __future__ import annotations

from pydantic import BaseModel, field_validator, model_validator

RULES = ("gold_transfer_action", "no_transfer", "explicit_request", "out_of_scope", "hard_negative")
OVERRIDE_PREFIX = "override:"
# What each rule says (a hand-checked override says the opposite of the rule it corrects), and why.
SHOULD_TRANSFER = {"gold_transfer_action": True, "no_transfer": False, "explicit_request": True,
                   "out_of_scope": True, "hard_negative": False}
_WHY = {"gold_transfer_action": "the reference solution transfers", "no_transfer": "the reference solution does not",
        "explicit_request": "the user asks for a human", "out_of_scope": "a request outside the policy",
        "hard_negative": "a hard negative", "user_request": "the user asked for a human (episode label)"}


def display_name(rule: str) -> str:
    """A label rule as a reader takes it: the verdict, then why (ids in files stay as they are).
    `override:no_transfer` is "should transfer: hand-checked, overrides no_transfer"."""
    base = rule.removeprefix(OVERRIDE_PREFIX)
    if base not in SHOULD_TRANSFER:
        return f"should transfer: {_WHY[rule]}" if rule in _WHY else rule
    verdict = SHOULD_TRANSFER[base] != (base != rule)
    why = f"hand-checked, overrides {base}" if base != rule else _WHY[base]
    return f"{'should transfer' if verdict else 'should not transfer'}: {why}"


class Label(BaseModel):
    should_transfer: bool
    rule: str
    reason: str | None = None

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, rule: str) -> str:
        if rule.removeprefix(OVERRIDE_PREFIX) not in RULES:
            raise ValueError(
                f"unknown rule id {rule!r} (known: {', '.join(RULES)}, optionally prefixed {OVERRIDE_PREFIX!r})"
            )
        return rule

    @model_validator(mode="after")
    def _override_has_reason(self) -> Label:
        if self.overridden and not (self.reason or "").strip():
            raise ValueError(f"label with rule {self.rule!r} needs a non-empty reason")
        return self

    @property
    def overridden(self) -> bool:
        return self.rule.startswith(OVERRIDE_PREFIX)

    @property
    def base_rule(self) -> str:
        """The rule before any override (what the task's kind or reference solution says)."""
        return self.rule.removeprefix(OVERRIDE_PREFIX)
