"""The sweep's cost estimate from its first episodes (handoff.sweep.cost_estimate), as the terminal
shows it: once FIRST_EPISODES episodes of a checkpoint finished (all it runs, when fewer), its mean
cost times its planned episodes, with the whole plan's estimate so far and the basis stated."""

from __future__ import annotations

import io

from handoff.records import LOCAL_ENGINE, Cost
from handoff.sweep.cost_estimate import FIRST_EPISODES
from handoff.sweep.progress import Progress

API = Cost(agent_usd=0.03, user_usd=0.01, agent_s=2.0)
LOCAL = Cost(agent_usd_note=LOCAL_ENGINE, user_usd_note=LOCAL_ENGINE, agent_engine_s=10.0, user_engine_s=2.0,
             gpu_s=24.0)
UNPRICED = Cost(agent_usd=None, agent_usd_note="litellm has no price for hosted_vllm/tiny-hermes", user_usd=0.0)


def progress(episodes: dict[str, tuple[int, int]]) -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(episodes, max_steps=12, enabled=False, stream=out), out


def test_the_terminal_gets_each_checkpoints_estimate_after_its_first_episodes_and_the_plans():
    bar, out = progress({"gpt": (0, 40), "local": (0, 20)})
    for _ in range(FIRST_EPISODES - 1):
        bar.episode_done("gpt", 10, API)
    assert out.getvalue() == ""  # not before the first FIRST_EPISODES
    bar.episode_done("gpt", 10, API)
    bar.episode_done("gpt", 10, API)  # once per checkpoint
    for _ in range(FIRST_EPISODES):
        bar.episode_done("local", 10, LOCAL)
    assert out.getvalue().splitlines() == [
        ("[plan] cost estimate: gpt ~$1.60 for its 40 planned episodes ($0.0400 per episode, the mean of its first "
         "5 finished); the plan: ~$1.60 (1 of 2 checkpoints estimated)"),
        ("[plan] cost estimate: local ~240 engine-s, ~480 GPU-s for its 20 planned episodes (12.0 engine-s, "
         "24.0 GPU-s per episode, the mean of its first 5 finished); the plan: ~$1.60, ~240 engine-s, ~480 GPU-s "
         "(2 of 2 checkpoints estimated)")]


def test_a_model_without_a_price_is_estimated_n_a_with_the_reason_never_0():
    bar, out = progress({"tiny": (0, 8)})
    for _ in range(FIRST_EPISODES):
        bar.episode_done("tiny", 4, UNPRICED)
    assert out.getvalue() == ("[plan] cost estimate: tiny $ n/a (no price) for its 8 planned episodes ($ n/a (no price) "
                              "per episode, the mean of its first 5 finished); no price: litellm has no price for "
                              "hosted_vllm/tiny-hermes\n")


def test_a_resumed_checkpoint_with_fewer_left_is_estimated_when_they_are_done_and_old_records_never():
    bar, out = progress({"gpt": (6, 8)})  # 6 recorded by an earlier run: 2 to run now
    bar.episode_done("gpt", 3, None)  # a record without cost fields counts for nothing
    assert out.getvalue() == ""
    bar.episode_done("gpt", 3, API)
    bar.episode_done("gpt", 3, API)
    assert out.getvalue().startswith("[plan] cost estimate: gpt ~$0.3200 for its 8 planned episodes ($0.0400 per "
                                     "episode, the mean of its first 2 finished)")


def test_a_local_checkpoint_beside_an_unpriced_user_simulator_names_the_users_missing_price():
    bar, out = progress({"tiny": (0, 2)})
    user_unpriced = Cost(agent_usd_note=LOCAL_ENGINE, agent_engine_s=5.0, user_usd=None,
                         user_usd_note="litellm has no price for hosted_vllm/user")
    bar.episode_done("tiny", 4, user_unpriced)
    bar.episode_done("tiny", 4, user_unpriced)
    assert out.getvalue() == ("[plan] cost estimate: tiny $ n/a (no price), ~10.0 engine-s, ~0.0 GPU-s for its 2 planned "
                              "episodes ($ n/a (no price), 5.0 engine-s, 0.0 GPU-s per episode, the mean of its first 2 "
                              "finished); no price: litellm has no price for hosted_vllm/user\n")


def test_a_small_total_never_reads_0_and_a_large_one_reads_whole():
    from handoff.sweep.cost_estimate import amounts

    assert amounts(None, 0.45, 0.0) == "$ n/a (no price), ~0.5 engine-s, ~0.0 GPU-s"
    assert amounts(0.0042, 0.0, 0.0) == "~$0.0042"
    assert amounts(1234.5, 12345.0, 24690.0) == "~$1234.50, ~12,345 engine-s, ~24,690 GPU-s"
