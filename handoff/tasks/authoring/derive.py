"""Derived task sets, built deterministically from the pinned tau2 tasks (docs/tasks.md): what the
derived kinds share (the hand-written texts of data/scenarios, the choice of parents, the description,
the transfer-only reference solution). Each kind's own derivation is its module in
handoff.tasks.authoring.kinds; the ids are handoff.tasks.ids'.
"""

from __future__ import annotations

import hashlib
from functools import cache

import yaml

from handoff.tasks import paths
from handoff.tasks.domains import facts
from handoff.tasks.ids import id_sort_key, parse_derived_id
from handoff.tasks.upstream import POLICY_FILE, SPLITS, TRANSFER_TOOL, upstream_splits

TRANSFER_CLAUSE = (
    "Transfer the user to a human agent if and only if the request cannot be handled within the scope of your "
    "actions (both policies); transfer_to_human_agents: only transfer if the user explicitly asks for a human "
    "agent or you cannot solve the user's issue with the policy and the tools."
)


def policy_file(domain: str) -> str:
    """The name of the domain's agent policy, as a derived task's description cites it."""
    return POLICY_FILE.get(domain, "policy.md")


def transfer_clause(domain: str) -> str:
    """TRANSFER_CLAUSE with its source: "both policies" (airline's and retail's policy.md: their tasks' text
    as it was), else the domain's own policy file (telecom's main_policy.md holds the same clause)."""
    if domain not in POLICY_FILE:
        return TRANSFER_CLAUSE
    return TRANSFER_CLAUSE.replace("(both policies)", f"({policy_file(domain)})")


@cache
def scenarios(domain: str) -> dict:
    """The hand-written text of the domain's derived tasks (data/scenarios/<domain>.yaml); ValueError for a text
    that does not end a sentence (in YAML, " #" starts a comment: an unquoted order id cuts the text short)."""
    doc = yaml.safe_load((paths.REPO_ROOT / paths.scenario_file(domain)).read_text())
    cut = [where for where, text in _texts(doc, "") if not text.rstrip().endswith((".", "!", "?", ")"))]
    if cut:
        raise ValueError(f"{paths.scenario_file(domain)}: texts that do not end a sentence (quote a text with '#'): "
                         + ", ".join(cut))
    return doc


def _texts(node, where: str):
    """(path, text) of every string in a YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _texts(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _texts(value, f"{where}/{i}")
    elif isinstance(node, str):
        yield where, node


@cache
def product_classes() -> dict[str, set[str]]:
    """Retail product classes for complaints (data/scenarios/retail_products.yaml)."""
    doc = yaml.safe_load((paths.REPO_ROOT / paths.PRODUCT_CLASSES_FILE).read_text())
    return {name: set(products) for name, products in doc.items() if isinstance(products, list)}


def damage_phrases() -> dict[str, str]:
    return yaml.safe_load((paths.REPO_ROOT / paths.PRODUCT_CLASSES_FILE).read_text())["damage"]


def pick(options: list, index: int):
    return options[index % len(options)]


def _order_key(domain: str, kind: str, task) -> str:
    return hashlib.sha256(f"{domain}/{kind}/{task.id}".encode()).hexdigest()


def select_parents(domain: str, kind: str, candidates: list, n: int) -> list:
    """n parents, stratified by split (same train/test proportion as upstream; a split with fewer eligible
    parents gives all of them and the other split the rest), in a fixed pseudo-random order."""
    split_of = upstream_splits(domain)
    n_test = round(n * list(split_of.values()).count("test") / len(split_of))
    pools = {
        split: sorted((t for t in candidates if split_of[t.id] == split), key=lambda t: _order_key(domain, kind, t))
        for split in SPLITS
    }
    wanted = {"train": n - n_test, "test": n_test}
    for split, other in (("train", "test"), ("test", "train")):
        short = max(0, wanted[split] - len(pools[split]))
        wanted[split] -= short
        wanted[other] += short
    if any(wanted[s] > len(pools[s]) for s in SPLITS):
        raise ValueError(f"{domain}/{kind}: {sum(map(len, pools.values()))} eligible parents, {n} needed")
    chosen = [t for s in SPLITS for t in pools[s][:wanted[s]]]
    return sorted(chosen, key=lambda t: _order_key(domain, kind, t))


def description(kind: str, parent, template: str, purpose: str, policies: str):
    from tau2.data_model.tasks import Description

    notes = f"kind={kind}; parent={parent.id}; template={template}"
    return Description(purpose=purpose, relevant_policies=policies, notes=notes)


IDENTITY_ACTIONS = ("set_user_info",)  # telecom: the initialization that puts the user's name and number on the phone


def initial_state(domain: str, parent, identity_only: bool = False):
    """A derived task's initial state: none where the user has no device (airline, retail: their tasks have
    none); on telecom the parent's, which puts the user's phone in its faulty state, or with `identity_only`
    only the user's name and number on the phone (a request that has nothing to do with the fault)."""
    if not facts(domain).USER_DEVICE:
        return None
    state = parent.initial_state
    if state is None or not identity_only:
        return state
    actions = [a for a in state.initialization_actions or [] if a.func_name in IDENTITY_ACTIONS]
    return state.model_copy(update={"initialization_actions": actions})


def transfer_criteria(summary: str):
    """Reference solution: transfer_to_human_agents (summary not compared) and no database change."""
    from tau2.data_model.tasks import Action, EvaluationCriteria, RewardType

    transfer = Action(action_id="transfer", name=TRANSFER_TOOL, arguments={"summary": summary}, compare_args=[])
    return EvaluationCriteria(actions=[transfer], reward_basis=[RewardType.DB, RewardType.ACTION])


def by_parent(tasks: list) -> list:
    """The tasks ordered by parent id: numerically (airline, retail), else by the id's text (telecom)."""
    return sorted(tasks, key=lambda t: id_sort_key(parse_derived_id(t.id).parent_id))


def with_templates(templates: tuple[str, ...], parents: list) -> list[tuple]:
    """(parent, template, k, i): templates round-robin along the parent order; k counts the template's uses."""
    return [(p, templates[i % len(templates)], i // len(templates), i) for i, p in enumerate(parents)]
