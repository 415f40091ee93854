"""What the rules need to know besides the trajectory: the domain's tools and the task's reference
actions. Tools are read from the pinned tau2 toolkit at run time (never hard-coded) and cached
per domain; building them needs no database.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel, ValidationError
from tau2.data_model.message import ToolCall
from tau2.data_model.tasks import Action, Task
from tau2.environment.toolkit import ToolKitBase, ToolType

from handoff.errors import HandoffError
from handoff.rules.trajectory import Call


class UnknownDomain(HandoffError, ValueError):
    """A domain the pinned tau2 does not have."""


@dataclass(frozen=True)
class DomainTools:
    domain: str
    names: frozenset[str]
    write: frozenset[str]
    params: dict[str, type[BaseModel]]

    @classmethod
    def for_domain(cls, domain: str) -> DomainTools:
        return _domain_tools(domain)

    def rejects_arguments(self, call: Call) -> bool:
        """Whether the arguments break the tool's signature: an unexpected or missing name, or a
        value of the wrong JSON type. Checked strictly, as JSON, against the parameter model tau2
        builds from the tool's signature (tau2 itself passes arguments through unconverted)."""
        model = self.params[call.name]
        if set(call.arguments) - model.model_fields.keys():
            return True
        try:
            model.model_validate_json(json.dumps(call.arguments), strict=True)
        except ValidationError:
            return True
        return False


@dataclass(frozen=True)
class TaskContext:
    """The domain's tools and the task's reference actions (None: the task defines none, so
    off_reference_write cannot be judged; empty: the reference solution makes no call), and the
    user simulator's scenario text (None: no task)."""

    domain: str
    tools: DomainTools
    task_id: str | None = None
    reference_actions: tuple[Action, ...] | None = None
    user_scenario: str | None = None

    @classmethod
    def for_task(cls, domain: str, task: Task | None) -> TaskContext:
        tools = DomainTools.for_domain(domain)
        if task is None:
            return cls(domain, tools)
        actions = task.evaluation_criteria.actions if task.evaluation_criteria is not None else None
        return cls(domain, tools, task.id, None if actions is None else tuple(actions), str(task.user_scenario))

    def matches_reference(self, call: Call, requestor: str = "assistant", actions=None) -> bool:
        """tau2's own comparison (Action.compare_with_tool_call), as its action evaluator uses it, with a
        reference action of the call's requestor (of `actions`, default every reference action)."""
        tool_call = ToolCall(id=call.id, name=call.name, arguments=call.arguments, requestor=requestor)
        return any(action.requestor == requestor and action.compare_with_tool_call(tool_call)
                   for action in (self.reference_actions or () if actions is None else actions))


def tau2_domains() -> list[str]:
    import tau2.domains

    return sorted(m.name for m in pkgutil.iter_modules(tau2.domains.__path__) if m.ispkg)


@cache
def _domain_tools(domain: str) -> DomainTools:
    if domain not in tau2_domains():
        raise UnknownDomain(f"unknown domain {domain!r}; tau2 has {', '.join(tau2_domains())}")
    toolkit = _toolkit_class(domain)(None)
    tools = toolkit.get_tools()
    return DomainTools(
        domain=domain,
        names=frozenset(tools),
        write=frozenset(n for n in tools if toolkit.tool_type(n) == ToolType.WRITE),
        params={name: tool.params for name, tool in tools.items()},
    )


def _toolkit_class(domain: str) -> type[ToolKitBase]:
    module = importlib.import_module(f"tau2.domains.{domain}.tools")
    classes = [
        c
        for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, ToolKitBase) and c.__module__ == module.__name__
    ]
    if len(classes) != 1:
        raise UnknownDomain(f"tau2 domain {domain!r} has {len(classes)} agent toolkits, expected 1")
    return classes[0]
