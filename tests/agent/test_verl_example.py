"""examples/verl: the GRPO trainer config that trains with Tau2AgentLoop, composed by Hydra over
verl's own ppo_trainer config and checked by verl's own config code (validate_config and the
rollout's config dataclass), the agent-loop registry file verl loads, the `handoff` section the
agent loop reads, and the dataset rows it takes. The trainer itself needs GPUs: not run here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

pytest.importorskip("verl")

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import get_class  # noqa: E402
from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass, validate_config  # noqa: E402

from handoff.agent.episode import EpisodeSettings  # noqa: E402
from handoff.agent.user import UserSpec  # noqa: E402
from handoff.agent.verl_loop import Tau2AgentLoop, _episode_fields  # noqa: E402
from handoff.rules import RewardWeights  # noqa: E402
from handoff.tasks import get_task, load_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "verl"


def trainer_config(*overrides: str):
    with initialize_config_dir(str(EXAMPLE), version_base=None):
        return compose("grpo_tau2", overrides=list(overrides))


def verl_validates(cfg) -> None:
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)  # RolloutConfig's own checks


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_verl_validates_the_grpo_config_with_the_tau2_agent_loop():
    cfg = trainer_config()
    verl_validates(cfg)
    assert cfg.algorithm.adv_estimator == "grpo" and not need_critic(cfg) and need_reference_policy(cfg)
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.mode == "async" and rollout.n > 1 and rollout.agent.default_agent_loop == "tau2_handoff"
    entries = OmegaConf.load(ROOT / rollout.agent.agent_loop_config_path)  # as verl's AgentLoopWorker loads it
    assert [(e.name, get_class(e._target_)) for e in entries] == [("tau2_handoff", Tau2AgentLoop)]


@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_verl_refuses_a_batch_the_gpus_cannot_split():
    with pytest.raises(AssertionError, match="real_train_batch_size"):
        verl_validates(trainer_config("data.train_batch_size=3", "actor_rollout_ref.rollout.n=1"))


def test_the_handoff_section_is_what_the_agent_loop_reads():
    section = OmegaConf.to_container(trainer_config().handoff, resolve=True)
    assert EpisodeSettings(**section["episode"]).max_steps == 30
    assert UserSpec(**section["user"]).kind == "engine"
    assert RewardWeights.load(section["reward"]) == RewardWeights.load("default")


def test_the_dataset_rows_name_tasks_the_agent_loop_runs(tmp_path):
    pd = pytest.importorskip("pandas")
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_dataset", EXAMPLE / "make_dataset.py")
    make_dataset = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_dataset)
    make_dataset.main(["--out", str(tmp_path)])
    test = pd.read_parquet(tmp_path / "test.parquet")
    expected = [(d, t.id) for d in ("airline", "retail") for t in load_tasks(d, split="test")]
    assert len(test) == len(expected) and set(test.agent_name) == {"tau2_handoff"}
    for row, (domain, task_id) in zip(test.to_dict("records"), expected):
        assert _episode_fields(row)[:2] == (domain, task_id) and get_task(domain, task_id).id == task_id
    train = pd.read_parquet(tmp_path / "train.parquet")
    assert not {tuple(r["extra_info"][k] for k in ("domain", "task_id")) for r in train.to_dict("records")} & set(expected)


def test_the_launch_script_runs_verls_trainer_on_this_config():
    script = (EXAMPLE / "train_grpo.sh").read_text()
    assert "-m verl.trainer.main_ppo" in script and '--config-name=grpo_tau2' in script
    assert (EXAMPLE / "train_grpo.sh").stat().st_mode & 0o111
    assert subprocess.run([shutil.which("bash") or "bash", "-n", str(EXAMPLE / "train_grpo.sh")]).returncode == 0
