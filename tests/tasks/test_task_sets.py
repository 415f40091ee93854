"""Task sets, labels and manifests (handoff.tasks): determinism, counts, splits, tau2 compatibility,
override validation and the hash chain. Everything runs on the pinned tau2 package; no model."""

from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest
from tau2.agent.base import BaseAgent
from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.orchestrator.orchestrator import Orchestrator
from tau2.registry import registry
from tau2.user.base import BaseUser
from tau2.utils.utils import get_now

import handoff  # noqa: F401  (prepares the process for tau2)
from handoff.cli import main as cli_main
from handoff.rules.label import Label
from handoff.tasks import (
    DOMAINS,
    get_task,
    load_tasks,
    manifest_hashes,
    parse_derived_id,
    paths,
    split_of,
)
from handoff.tasks.authoring.catalog import CATALOG
from handoff.tasks.authoring.derive import scenarios
from handoff.tasks.authoring.kinds.hard_negative import gold_changes_db, strip_persona_lines
from handoff.tasks.authoring.labelling import Override, apply_override, read_overrides
from handoff.tasks.authoring.manifests import check, render
from handoff.tasks.domains import DERIVED_DOMAINS, facts
from handoff.tasks.ids import DERIVED_KINDS as KINDS
from handoff.tasks.labels import ManifestError, load_labels
from handoff.tasks.upstream import (
    LABELLED_SET,
    TRANSFER_TOOL,
    has_gold_transfer,
    upstream_splits,
    write_tools,
)

ROOT = paths.REPO_ROOT
# airline: 18 hard negatives (issue 32: parents 23, 33, 35 dropped)
MIN_COUNT = {"airline": 18, "retail": 30, "telecom": 30}


@pytest.fixture(scope="module")
def rendered():
    return render(ROOT)


def derived(domain: str) -> list:
    return load_tasks(domain, kinds=list(KINDS))


# --- determinism ------------------------------------------------------------------------------------------


def test_committed_files_are_a_fresh_build(rendered):
    """The committed files were built in another process: equal bytes mean the build is deterministic."""
    for rel, data in rendered.items():
        assert (ROOT / rel).read_bytes() == data, f"{rel} differs from a fresh build: run `handoff labels build`"
    assert render(ROOT) == rendered


def test_labels_check_passes_on_the_checkout(capsys):
    assert cli_main(["labels", "check"]) == 0
    assert "up to date" in capsys.readouterr().out


# --- counts and content -----------------------------------------------------------------------------------


@pytest.mark.parametrize("domain", DOMAINS)
def test_counts_and_ids(domain):
    upstream = load_tasks(domain, kinds=["upstream"])
    assert len(upstream) == {"airline": 50, "retail": 114, "telecom": 114}[domain]
    for kind in KINDS:
        tasks = load_tasks(domain, kinds=[kind])
        assert len(tasks) == facts(domain).COUNTS[kind] >= MIN_COUNT[domain]
        refs = [parse_derived_id(t.id) for t in tasks]
        assert {r.kind for r in refs} == ({kind} if tasks else set())
        assert len({r.parent_id for r in refs}) == len(tasks), "a parent is used once per kind"
        for task, ref in zip(tasks, refs):
            assert task.description.notes == f"kind={kind}; parent={ref.parent_id}; template={ref.template}"
            assert get_task(domain, task.id) is task
    all_ids = [t.id for t in load_tasks(domain)]
    assert len(all_ids) == len(set(all_ids)) == len(upstream) + sum(facts(domain).COUNTS.values())
    assert parse_derived_id("12") is None
    with pytest.raises(ValueError, match="unknown task kind 'bogus'"):
        load_tasks(domain, kinds=["bogus"])
    with pytest.raises(ValueError, match="unknown domain 'banking'"):
        load_tasks("banking")
    with pytest.raises(KeyError, match="unknown"):
        get_task(domain, "explicit_request-999-insist")


def test_every_domain_has_its_facts_and_every_kind_its_module():
    from handoff.tasks.authoring.kinds import REGISTRY
    from handoff.tasks.domains import FACTS
    from handoff.tasks.ids import KINDS as ALL_KINDS

    assert tuple(FACTS) == DOMAINS and tuple(REGISTRY) == ALL_KINDS
    assert all(set(f.COUNTS) == set(KINDS) for f in FACTS.values())
    assert [k for k, kind in REGISTRY.items() if kind.derive is None] == ["upstream"]
    with pytest.raises(ValueError, match="unknown domain 'banking'"):
        facts("banking")


def test_the_policy_clock_is_written_once():
    """Airline's "now" (policy.md line 3) is handoff.tasks.domains.airline.NOW and nowhere else in the package."""
    from handoff.tasks.domains import airline

    day = airline.TODAY
    spelled = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "handoff").rglob("*.py") if day in p.read_text())
    assert spelled == ["handoff/tasks/domains/airline.py"] and airline.NOW.startswith(day)


@pytest.mark.parametrize("domain", DOMAINS)
def test_positive_kinds_reference_a_transfer_and_no_write(domain):
    for kind in ("explicit_request", "out_of_scope"):
        for task in load_tasks(domain, kinds=[kind]):
            criteria = task.evaluation_criteria
            assert [a.name for a in criteria.actions] == [TRANSFER_TOOL]
            assert criteria.actions[0].compare_args == [], "the summary is not compared"
            assert {b.value for b in criteria.reward_basis} == {"DB", "ACTION"}


@pytest.mark.parametrize("domain", DOMAINS)
def test_hard_negatives_keep_a_solvable_parent(domain):
    for task in load_tasks(domain, kinds=["hard_negative"]):
        parent = get_task(domain, parse_derived_id(task.id).parent_id)
        assert not has_gold_transfer(parent) and parent.id not in facts(domain).ASKS_FOR_HUMAN
        assert any(a.name in write_tools(domain) for a in parent.evaluation_criteria.actions)
        assert task.evaluation_criteria == parent.evaluation_criteria
        assert task.user_scenario.persona in scenarios(domain)["hard_negative"]["personas"][ref_template(task)]
        instructions = task.user_scenario.instructions
        parent_reason = parent.user_scenario.instructions.reason_for_call
        assert instructions.reason_for_call == strip_persona_lines(parent_reason, domain)
        assert any(line in instructions.task_instructions for line in scenarios(domain)["hard_negative"]["no_human"])
        assert gold_changes_db(domain, parent), "a transfer instead of the gold must fail tau2's DB check"


def ref_template(task) -> str:
    return parse_derived_id(task.id).template


ASKS_FOR_A_HUMAN = re.compile(
    r"(?<!not )(?<!never )(?<!n't )\bask(s)? (to be transferred|for (a )?human|for a supervisor)|transfer to a human"
)


@pytest.mark.parametrize("domain", DOMAINS)
def test_users_who_ask_for_a_human_never_parent_a_hard_negative(domain):
    asking = set()
    for task in load_tasks(domain, kinds=["upstream"]):
        instructions = task.user_scenario.instructions
        if ASKS_FOR_A_HUMAN.search(f"{instructions.reason_for_call} {instructions.task_instructions}".lower()):
            asking.add(task.id)
    gold = {t.id for t in load_tasks(domain, kinds=["upstream"]) if has_gold_transfer(t)}
    assert asking - gold == set(facts(domain).ASKS_FOR_HUMAN), "ASKS_FOR_HUMAN is incomplete"
    assert ASKS_FOR_A_HUMAN.search("if the agent refuses, ask to be transferred")
    assert not ASKS_FOR_A_HUMAN.search("do not ask to be transferred")
    parents = {parse_derived_id(t.id).parent_id for t in load_tasks(domain, kinds=["hard_negative"])}
    assert not parents & (asking | gold)


@pytest.mark.parametrize("domain", DERIVED_DOMAINS)
def test_out_of_scope_catalog(domain):
    catalog = CATALOG[domain]
    assert len({r.id for r in catalog}) == len(catalog) >= 10
    assert all(r.tools_checked and r.policy_checked and r.why for r in catalog)
    used = {parse_derived_id(t.id).template for t in load_tasks(domain, kinds=["out_of_scope"])}
    assert used == {r.id for r in catalog}, "every request of the catalog is used"
    doc = (ROOT / paths.CATALOG_DOC).read_text()
    assert all(f"`{r.id}`" in doc for r in catalog)
    for task in load_tasks(domain, kinds=["out_of_scope"]):
        instructions = task.user_scenario.instructions
        assert "{" not in instructions.reason_for_call
        assert not ASKS_FOR_A_HUMAN.search(f"{instructions.reason_for_call} {instructions.task_instructions}".lower())


# --- splits -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("domain", DOMAINS)
def test_splits_inherit_and_do_not_leak(domain):
    manifest = json.loads((ROOT / paths.SPLITS_FILE).read_text())["domains"][domain]
    train, test = set(manifest["train"]), set(manifest["test"])
    assert not train & test
    assert train | test == {t.id for t in load_tasks(domain)}
    assert {t.id for t in load_tasks(domain, split="train")} == train
    assert {t.id for t in load_tasks(domain, split="test")} == test
    sides = defaultdict(set)
    for task_id in train | test:
        ref = parse_derived_id(task_id)
        root_id = ref.parent_id if ref else task_id
        sides[root_id].add("train" if task_id in train else "test")
        assert split_of(domain, task_id) == upstream_splits(domain)[root_id]
    assert all(len(s) == 1 for s in sides.values()), "a parent on both sides of the split"
    for kind in [k for k in KINDS if facts(domain).COUNTS[k]]:  # stratified: both splits get every kind
        assert {split_of(domain, t.id) for t in load_tasks(domain, kinds=[kind])} == {"train", "test"}
    with pytest.raises(ValueError, match="unknown split"):
        load_tasks(domain, split="base")


# --- labels -----------------------------------------------------------------------------------------------


def test_labels_follow_the_rules():
    labels = load_labels()
    for domain in DOMAINS:
        for task in load_tasks(domain, task_set=LABELLED_SET.get(domain, "base")):
            label = labels[(domain, task.id)]
            ref = parse_derived_id(task.id)
            expected = ref.kind if ref else ("gold_transfer_action" if has_gold_transfer(task) else "no_transfer")
            assert label.base_rule == expected
            if not label.overridden:
                assert label.should_transfer == (expected != "no_transfer" and expected != "hard_negative")
    assert labels[("airline", "13")] == Label(should_transfer=True, rule="gold_transfer_action")
    assert labels[("retail", "25")].rule == "override:no_transfer" and labels[("retail", "25")].should_transfer
    assert len(labels) == sum(len(load_tasks(d, task_set=LABELLED_SET.get(d, "base"))) for d in DOMAINS)


def test_label_model():
    assert Label(should_transfer=True, rule="override:no_transfer", reason="hand-checked").overridden
    with pytest.raises(ValueError, match="unknown rule"):
        Label(should_transfer=True, rule="because")
    with pytest.raises(ValueError, match="non-empty reason"):
        Label(should_transfer=True, rule="override:no_transfer")


# --- overrides --------------------------------------------------------------------------------------------

KNOWN = {"airline": {"1", "2"}, "retail": {"7"}}


def write_overrides(tmp_path, domains):
    path = tmp_path / "overrides.json"
    path.write_text(json.dumps({"domains": domains}))
    return path


def test_valid_overrides_are_read_and_applied(tmp_path):
    path = write_overrides(tmp_path, {"airline": {"1": {"should_transfer": True, "reason": "asks for a human"}}})
    overrides = read_overrides(path, KNOWN)
    assert overrides == {("airline", "1"): Override(should_transfer=True, reason="asks for a human")}
    label = apply_override("airline/1", Label(should_transfer=False, rule="no_transfer"), overrides[("airline", "1")])
    assert label == Label(should_transfer=True, rule="override:no_transfer", reason="asks for a human")
    assert read_overrides(write_overrides(tmp_path, {}), KNOWN) == {}


def entry(**fields) -> dict:
    return {"should_transfer": True, "reason": "r", **fields}


@pytest.mark.parametrize(
    "domains, message",
    [
        ({"airline": {"1": {"should_transfer": True}}}, "airline/1: reason: Field required"),
        ({"airline": {"1": entry(reason="  ")}}, "airline/1: reason: Value error, reason must not be empty"),
        ({"airline": {"1": entry(should_transfer="yes")}}, "airline/1: should_transfer: Input should be a valid bool"),
        ({"airline": {"2": entry(should_transfer=1)}}, "airline/2: should_transfer: Input should be a valid boolean"),
        ({"airline": {"1": entry(reason=3)}}, "airline/1: reason: Input should be a valid string"),
        ({"airline": {"1": entry(rule="x")}}, "airline/1: rule: Extra inputs"),
        ({"airline": {"99": entry()}}, "airline/99: unknown task id"),
        ({"banking": {"1": entry()}}, "banking: unknown domain"),
        ({"retail": ["7"]}, "retail: expected an object"),
    ],
)
def test_invalid_overrides_are_rejected_naming_the_entry(tmp_path, domains, message):
    with pytest.raises(ManifestError, match="invalid overrides") as exc:
        read_overrides(write_overrides(tmp_path, domains), KNOWN)
    assert message in str(exc.value)


def test_malformed_override_files_and_no_op_overrides(tmp_path):
    path = tmp_path / "overrides.json"
    path.write_text("{not json")
    with pytest.raises(ManifestError, match="cannot read overrides"):
        read_overrides(path, KNOWN)
    path.write_text(json.dumps({"airline": {}}))
    with pytest.raises(ManifestError, match='expected {"domains"'):
        read_overrides(path, KNOWN)
    with pytest.raises(ManifestError, match="override airline/1: should_transfer=False does not change the label"):
        apply_override(
            "airline/1", Label(should_transfer=False, rule="no_transfer"), Override(should_transfer=False, reason="r")
        )


# --- hash chain and `labels check` on a copy of the repository --------------------------------------------


def test_hash_chain():
    hashes = manifest_hashes()
    labels = json.loads((ROOT / paths.LABELS_FILE).read_text())
    splits = json.loads((ROOT / paths.SPLITS_FILE).read_text())
    assert splits["labels_sha256"] == hashes["labels_sha256"] == paths.sha256_file(ROOT / paths.LABELS_FILE)
    assert labels["inputs"]["overrides_sha256"] == hashes["overrides_sha256"]
    assert hashes["splits_sha256"] == paths.sha256_file(ROOT / paths.SPLITS_FILE)
    for rel, sha in labels["inputs"]["tasks_sha256"].items():
        assert paths.sha256_file(ROOT / rel) == sha
    assert labels["tau2"]["version"] == hashes["tau2_version"] == "26.3"
    assert labels["tau2"]["commit"] == hashes["tau2_commit"] == "0ed2fd8"


def test_changing_an_override_without_rebuilding_fails_the_check(repo_copy, capsys):
    before = manifest_hashes(repo_copy)
    overrides_path = repo_copy / paths.OVERRIDES_FILE
    doc = json.loads(overrides_path.read_text())
    doc["domains"]["airline"]["3"]["reason"] = "a different reason"
    overrides_path.write_text(json.dumps(doc, indent=2))
    assert cli_main(["labels", "check", "--root", str(repo_copy)]) == 1
    err = capsys.readouterr().err
    assert "recorded sha256 of data/manifests/label_overrides_v1.json does not match" in err
    assert "/labels/airline/3/reason" in err and "splits_v1.json: stale" in err
    with pytest.raises(ManifestError, match="stale"):
        load_labels(repo_copy)
    assert cli_main(["labels", "build", "--root", str(repo_copy)]) == 0
    assert check(repo_copy, rerun=0) == []
    after = manifest_hashes(repo_copy)
    assert {k for k in before if before[k] != after[k]} == {"overrides_sha256", "labels_sha256", "splits_sha256"}
    assert load_labels(repo_copy)[("airline", "3")].reason == "a different reason"
    (repo_copy / paths.LABELS_FILE).unlink()
    with pytest.raises(ManifestError, match="run `handoff labels build`"):
        load_labels(repo_copy)


def test_check_names_edited_task_files_and_broken_links(repo_copy):
    task_file = repo_copy / paths.task_file("retail", "hard_negative")
    tasks = json.loads(task_file.read_text())
    tasks[0]["user_scenario"]["persona"] = "calm"
    task_file.write_text(json.dumps(tasks, indent=2))
    labels_file = repo_copy / paths.LABELS_FILE
    labels_file.write_text(labels_file.read_text().replace('"version": 1', '"version": 1 '))
    problems = "\n".join(check(repo_copy, rerun=0))
    assert "splits_v1.json: labels_sha256" in problems and "does not match data/manifests/labels_v1.json" in problems
    assert "recorded sha256 of data/tasks/retail/hard_negative.json does not match" in problems
    assert f"/{tasks[0]['id']}/user_scenario/persona: committed \"calm\"" in problems


def test_invalid_override_makes_the_cli_fail(repo_copy, capsys):
    (repo_copy / paths.OVERRIDES_FILE).write_text(
        json.dumps({"domains": {"retail": {"no-such-task": {"should_transfer": True, "reason": "r"}}}})
    )
    assert cli_main(["labels", "check", "--root", str(repo_copy)]) == 2
    assert "retail/no-such-task: unknown task id" in capsys.readouterr().err


# --- every derived task runs in tau2's Orchestrator; tau2's evaluator rewards the intended behaviour --------

TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."


class ScriptedUser(BaseUser):
    """Says its lines in order."""

    def __init__(self, lines: list[str]):
        super().__init__()
        self.lines = list(lines)

    def get_init_state(self, message_history=None):
        return list(message_history or [])

    def generate_next_message(self, message, state):
        line = self.lines.pop(0)  # a text, or a UserMessage (a tool call on the user's phone), stamped when sent
        sent = line if isinstance(line, UserMessage) else UserMessage(role="user", content=line)
        return sent.model_copy(update={"timestamp": get_now()}), state + [message]

    @classmethod
    def is_stop(cls, message) -> bool:
        return any(token in (message.content or "") for token in ("###STOP###", "###TRANSFER###"))

    def set_seed(self, seed: int) -> None:
        pass


class ScriptedAgent(BaseAgent):
    """Sends its turns in order, stamped when sent (tau2 orders the trajectory by timestamp)."""

    def __init__(self, turns: list[AssistantMessage]):
        self.turns = list(turns)

    def get_init_state(self, message_history=None):
        return None

    def generate_next_message(self, message, state):
        return self.turns.pop(0).model_copy(update={"timestamp": get_now()}), state

    def stop(self, message=None, state=None) -> None:
        pass


def say(text: str) -> AssistantMessage:
    return AssistantMessage(role="assistant", content=text)


def call(name: str, arguments: dict, n: int = 0) -> AssistantMessage:
    return AssistantMessage(role="assistant", tool_calls=[ToolCall(id=f"call_{n}", name=name, arguments=arguments)])


def transfer() -> AssistantMessage:
    return call(TRANSFER_TOOL, {"summary": "The user needs a human agent."})


def gold_dialogue(task) -> tuple[list[AssistantMessage], list]:
    """The agent's turns and the user's lines that perform the task's gold actions in order: the agent's
    own as its tool calls; each of the user's (telecom: on their phone) asked for by the agent, done by the
    user as a tool call, then reported."""
    turns, lines = [], []
    for i, action in enumerate(task.evaluation_criteria.actions):
        if action.requestor == "user":
            turns.append(say(f"Please run {action.name} on your phone."))
            lines += [UserMessage(role="user", tool_calls=[
                ToolCall(id=f"user_call_{i}", name=action.name, arguments=action.arguments, requestor="user")]),
                "Done."]
        else:
            turns.append(call(action.name, action.arguments, i))
    return turns, lines


def opening(task) -> str:
    return task.user_scenario.instructions.reason_for_call.split("\n")[0]


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_derived_task_runs_a_step_in_the_orchestrator(domain):
    shared = registry.get_env_constructor(domain)()  # one db for tasks without an initial state: nothing writes
    for task in derived(domain):
        # telecom's initial state writes (the user's phone, the line): a fresh environment for each task
        environment = registry.get_env_constructor(domain)() if task.initial_state else shared
        positive = parse_derived_id(task.id).kind != "hard_negative"
        agent = ScriptedAgent([transfer() if positive else say("Sure, let me look into it.")])
        orchestrator = Orchestrator(domain, agent, ScriptedUser([opening(task)]), environment, task)
        orchestrator.initialize()
        db_hash = environment.get_db_hash()
        orchestrator.step()  # user -> agent
        orchestrator.step()  # agent -> environment (transfer) or user
        if positive:
            orchestrator.step()  # environment -> agent
            assert isinstance(orchestrator.trajectory[-1], ToolMessage)
            assert orchestrator.trajectory[-1].content == "Transfer successful"
        assert [m.role for m in orchestrator.trajectory[:3]] == ["assistant", "user", "assistant"]
        assert not orchestrator.done, task.id
        assert environment.get_db_hash() == db_hash, task.id


def reward(domain: str, task, turns: list[AssistantMessage], lines: list[str]) -> float:
    environment = registry.get_env_constructor(domain)()
    simulation = Orchestrator(domain, ScriptedAgent(turns), ScriptedUser(lines), environment, task).run()
    info = evaluate_simulation(simulation, task, EvaluationType.ALL, solo_mode=False, domain=domain)
    return info.reward


@pytest.mark.parametrize("domain", DERIVED_DOMAINS)
@pytest.mark.parametrize("kind", ["explicit_request", "out_of_scope"])
def test_transfer_earns_reward_and_not_transferring_does_not(domain, kind):
    task = load_tasks(domain, kinds=[kind])[0]
    assert reward(domain, task, [transfer(), say(TRANSFER_MESSAGE)], [opening(task), "###TRANSFER###"]) == 1.0
    assert reward(domain, task, [say("I can handle that myself.")], [opening(task), "###STOP###"]) == 0.0


@pytest.mark.parametrize("domain", DERIVED_DOMAINS)
def test_hard_negative_rewards_the_parent_solution_not_a_transfer(domain):
    task = next(
        t for t in load_tasks(domain, kinds=["hard_negative"])
        if not any("," in info for info in t.evaluation_criteria.communicate_info or [])
    )
    turns, lines = gold_dialogue(task)
    summary = say(" ".join(task.evaluation_criteria.communicate_info or []) or "All done.")
    assert reward(domain, task, [*turns, summary], [opening(task), *lines, "###STOP###"]) == 1.0
    assert reward(domain, task, [transfer(), say(TRANSFER_MESSAGE)], [opening(task), "###TRANSFER###"]) == 0.0
