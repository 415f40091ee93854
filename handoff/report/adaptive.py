"""What an adaptive sweep decided (handoff.sweep.adaptive): reduced/adaptive.json, the report's
section and W&B's summary keys. Per checkpoint: its status (best, tied, worse, undecided), the round
and episodes at the decision, the episodes it cost against the fixed design of adaptive.max_trials
trials for every checkpoint; and the tie set: the checkpoints not shown worse than the best."""

from __future__ import annotations

import math

from pydantic import BaseModel

from handoff.rules.sequential import SequenceBound, Status, Verdict
from handoff.rundir import RunDir


class Round(BaseModel):
    """A decided round: its number (1-based), the trials per task after it, every verdict."""

    round: int
    trials: int
    verdicts: dict[str, Verdict]
    trials_by: dict[str, int] | None = None  # a set that grows (adaptive.growing): each checkpoint's trials


def n_rounds(max_trials: int, round_trials: int) -> int:
    return math.ceil(max_trials / round_trials)


def recorded_rounds(manifest) -> list[Round]:
    return [Round.model_validate(r) for r in manifest.adaptive]


def finished(rounds: list[Round], max_rounds: int) -> bool:
    return bool(rounds) and (len(rounds) >= max_rounds or
                             all(v.status != "undecided" for v in rounds[-1].verdicts.values()))


def arrival_order(manifest) -> list[str]:
    """The run's checkpoints in the order they joined it: its first plan's (in the plan's order),
    then each extension's (handoff sweep extend, handoff follow). Outcomes never change it."""
    added = [name for extension in manifest.extensions for name in extension.checkpoints_added]
    return [c["name"] for c in manifest.checkpoints if c["name"] not in set(added)] + added


def trials_so_far(rounds: list[Round], names: list[str]) -> dict[str, int]:
    """A set that grows: each checkpoint's trials per task after the last decided round (0: none yet)."""
    given = (rounds[-1].trials_by or {}) if rounds else {}
    return {name: given.get(name, 0) for name in names}


def next_trials(rounds: list[Round], names: list[str], round_trials: int, max_trials: int,
                settle: bool = True) -> dict[str, int]:
    """A set that grows (docs/sweep.md, "A set that grows"): each checkpoint's trials per task after
    the next step. A checkpoint still undecided (or new) and the best advance their pair by a round:
    the one of the two with fewer trials gets `round_trials` more (both, when equal), up to
    `max_trials`; with no best yet, every undecided one gets a round. When no pair can advance, the
    best gets `max_trials` if a checkpoint arrived after it (its row, in step order, would hold
    theirs back) or `settle` (the run stops growing: a sweep's or an extension's end, follow's stop):
    from then on it is compared with the checkpoints to come at any depth and its row is final. Only
    a best that is the latest arrival waits with fewer (handoff follow, between checkpoints)."""
    trials = trials_so_far(rounds, names)
    verdicts = rounds[-1].verdicts if rounds else {}
    status = {n: verdicts[n].status if n in verdicts else "undecided" for n in names}
    best = next((n for n in names if status[n] == "best"), None)
    if best is None:
        return {n: min(trials[n] + round_trials, max_trials) if status[n] == "undecided" else trials[n]
                for n in names}
    out = dict(trials)
    for name in (n for n in names if status[n] == "undecided"):
        level = min(min(trials[name], trials[best]) + round_trials, max_trials)
        out[name], out[best] = max(out[name], level), max(out[best], level)
    if out == trials and (settle or best != names[-1]):
        out[best] = max_trials
    return out


def growing_names(manifest) -> list[str]:
    """The checkpoints a growing adaptive run decides on: all it holds, in arrival order, but those
    skipped (deleted before their episodes finished: handoff follow)."""
    skipped = manifest.skipped()
    return [n for n in arrival_order(manifest) if n not in skipped]


def growing_finished(rounds: list[Round], names: list[str], round_trials: int, max_trials: int,
                     settle: bool = True) -> bool:
    """Nothing left to run (next_trials), and a best decided (no checkpoint at all: nothing to decide)."""
    best = rounds and any(v.status == "best" for n, v in rounds[-1].verdicts.items() if n in names)
    return not names or bool(best) and next_trials(rounds, names, round_trials, max_trials, settle) == (
        trials_so_far(rounds, names))


def rounds_finished(manifest, settle: bool = False) -> bool:
    """The run's adaptive rounds (fixed or growing) are finished: nothing to run now (a growing run's
    latest best may still get trials when it stops growing or another arrives: in_rounds; with
    `settle`, not even that: next_trials); a run that is not adaptive has none."""
    cfg = manifest.config.get("adaptive") or {}
    if not cfg.get("enabled"):
        return True
    rounds = recorded_rounds(manifest)
    if cfg.get("growing"):
        return growing_finished(rounds, growing_names(manifest), cfg["round_trials"], cfg["max_trials"], settle)
    return finished(rounds, n_rounds(cfg["max_trials"], cfg["round_trials"]))


class CheckpointDecision(BaseModel):
    status: Status
    mean: float | None
    vs_best: SequenceBound | None
    against: str | None = None  # the best its vs_best was measured against (a tie was with it, not the final best)
    round: int
    episodes_at_decision: int
    episodes: int  # run in all (the episodes of the rounds it was given)
    fixed_episodes: int  # what the fixed design spends on it


class AdaptiveResult(BaseModel):
    metric: str
    margin: float
    confidence: float
    max_trials: int
    round_trials: int
    growing: bool = False  # adaptive.growing: alpha spent in arrival order (docs/metrics.md)
    rounds: int
    finished: bool  # no checkpoint undecided, or max_trials spent
    tie_set: list[str]
    episodes: int
    fixed_episodes: int
    checkpoints: dict[str, CheckpointDecision]


def adaptive_result(run: RunDir) -> AdaptiveResult | None:
    """The decisions recorded in the run's manifest; None for a run that is not adaptive."""
    cfg = run.config.get("adaptive") or {}
    if not cfg.get("enabled"):
        return None
    rounds = recorded_rounds(run.manifest)
    planned: dict[str, int] = {}
    for shard in run.manifest.shards:
        planned[shard["model"]] = planned.get(shard["model"], 0) + len(shard["episodes"])
    ran = {name: 0 for name in planned}
    trials = scheduled_trials(run) or {}
    for shard in run.manifest.shards:
        if shard["trial"] < trials.get(shard["model"], 0) and run.shard_path(shard["id"]).is_file():
            ran[shard["model"]] += len(shard["episodes"])
    verdicts = rounds[-1].verdicts if rounds else {}
    decisions = {name: CheckpointDecision(status=v.status, mean=v.mean, vs_best=v.vs_best, against=v.against,
                                          round=v.round,
                                          episodes_at_decision=v.episodes, episodes=ran.get(name, 0),
                                          fixed_episodes=planned.get(name, 0))
                 for name, v in verdicts.items()}
    return AdaptiveResult(
        metric=cfg["metric"], margin=cfg["margin"], confidence=cfg["confidence"], max_trials=cfg["max_trials"],
        round_trials=cfg["round_trials"], growing=bool(cfg.get("growing")), rounds=len(rounds),
        finished=rounds_finished(run.manifest),
        tie_set=[n for n, d in decisions.items() if d.status != "worse"],
        episodes=sum(ran.values()), fixed_episodes=sum(planned.values()), checkpoints=decisions)


def in_rounds(run: RunDir) -> set[str]:
    """The checkpoints an unfinished adaptive sweep may still give episodes (best or undecided after
    the last decided round; all before the first): their metrics are not final."""
    cfg = run.config.get("adaptive") or {}
    if not cfg.get("enabled"):
        return set()
    rounds = recorded_rounds(run.manifest)
    if cfg.get("growing"):  # a checkpoint still running with fewer than max_trials (the latest best too)
        names = growing_names(run.manifest)
        trials, last = trials_so_far(rounds, names), rounds[-1].verdicts if rounds else {}
        return {n for n in names if trials[n] < cfg["max_trials"] and (n not in last or last[n].status in
                                                                          ("best", "undecided"))}
    if rounds_finished(run.manifest):
        return set()
    names = {s["model"] for s in run.manifest.shards}
    return names if not rounds else {n for n in names if rounds[-1].verdicts[n].status in ("best", "undecided")}


def scheduled_trials(run: RunDir) -> dict[str, int] | None:
    """checkpoint -> the trials per task its rounds gave it (an adaptive run; else None): a
    checkpoint decided tied or worse has those of its deciding round, the others those of the
    last round (of the next one while the rounds go on)."""
    return manifest_trials(run.manifest)


def manifest_trials(manifest) -> dict[str, int] | None:
    """scheduled_trials of the run whose manifest this is."""
    cfg = manifest.config.get("adaptive") or {}
    if not cfg.get("enabled"):
        return None
    rounds = recorded_rounds(manifest)
    if cfg.get("growing"):
        names = growing_names(manifest)
        return (trials_so_far(rounds, names) if rounds_finished(manifest)
                else next_trials(rounds, names, cfg["round_trials"], cfg["max_trials"], settle=False))
    last = rounds[-1] if rounds else None
    done = finished(rounds, n_rounds(cfg["max_trials"], cfg["round_trials"]))
    current = last.trials if done else min((len(rounds) + 1) * cfg["round_trials"], cfg["max_trials"])
    names = {s["model"] for s in manifest.shards}
    out = {}
    for name in names:
        v = last.verdicts.get(name) if last else None
        decided = v is not None and v.status in ("tied", "worse")
        out[name] = rounds[v.round - 1].trials if decided else current
    return out


def write_adaptive(run: RunDir) -> AdaptiveResult | None:
    from handoff.records import write_atomic

    result = adaptive_result(run)
    if result is not None:
        write_atomic(run.metrics.parent / "adaptive.json", result.model_dump_json(indent=1) + "\n")
    return result


def guarantee(result: AdaptiveResult) -> str:
    """What the verdicts and the tie set promise (docs/sweep.md, "What a decision guarantees")."""
    alpha = f"{1 - result.confidence:g}"
    return (f"Each checkpoint's verdict is wrong with probability at most {alpha} (`worse` though truly within "
            f"{result.margin:g} of the best it was measured against, or `tied` though truly more than "
            f"{result.margin:g} below it); the tie set holds a *unique* best checkpoint with probability at least "
            f"{result.confidence:g}. With several equally good checkpoints each may be dropped at {alpha}, so "
            "one of them is missing from the set more often than that. `tied` and `worse` are against the best "
            "of their round (`against`), which need not be the final best." + (
                f" The set grows (adaptive.growing): each checkpoint's {alpha} is spent over the others in the "
                "order they joined the run (the k-th other gets 6/(pi^2 k^2) of it), so this holds however many "
                "checkpoints arrive." if result.growing else ""))


def markdown_lines(result: AdaptiveResult) -> list[str]:
    """The report's section: the tie set, what it guarantees, then a row per checkpoint."""
    spent = f"{result.episodes} episodes of the fixed design's {result.fixed_episodes}"
    lines = ["## Adaptive decisions", "",
             f"Best checkpoints (the tie set: not shown worse than the best by more than {result.margin:g} in "
             f"{result.metric}, anytime-valid at confidence {result.confidence:g}): "
             f"**{', '.join(result.tie_set) or 'none'}**. {result.rounds} round(s) of {result.round_trials} "
             f"trial(s), {spent}" + ("" if result.finished else "; the rounds are not finished (resume the sweep)")
             + ". Checkpoints within the margin of each other may need the whole budget to be told apart.", "",
             guarantee(result), ""]
    header = ["checkpoint", "status", result.metric, f"{result.metric} - best (CS)", "against", "decided at round",
              "episodes at decision", "episodes", "fixed design"]
    rows = []
    for name, d in result.checkpoints.items():
        cs = "" if d.vs_best is None else f"{d.vs_best.estimate:+.3f} [{d.vs_best.lo:+.3f}, {d.vs_best.hi:+.3f}]"
        cs += " (ends crossed)" if d.vs_best is not None and d.vs_best.crossed else ""
        decided = d.round if d.status in ("tied", "worse") else ""
        mean = "n/a" if d.mean is None else f"{d.mean:.3f}"
        rows.append([name, d.status, mean, cs, d.against or "", decided, d.episodes_at_decision, d.episodes,
                     d.fixed_episodes])
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return lines + [""]


def wandb_summary(result: AdaptiveResult) -> dict:
    out = {"best/tie_set": ", ".join(result.tie_set), "adaptive/episodes": result.episodes,
           "adaptive/fixed_episodes": result.fixed_episodes, "adaptive/rounds": result.rounds}
    for name, d in result.checkpoints.items():
        out |= {f"adaptive/{name}/status": d.status, f"adaptive/{name}/round": d.round,
                f"adaptive/{name}/episodes": d.episodes, f"adaptive/{name}/against": d.against or ""}
    return out
