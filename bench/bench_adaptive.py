"""Adaptive sweeps with known answers: episodes spent against the fixed design, false decisions
and the confidence sequences' coverage, over many seeds.

A full sweep per seed is too slow on 2 cores, so the episodes are simulated with the scripted
engine's own statistics: the known-answer agent (engine.script.accuracy) of checkpoint c is right
in episode (domain, task, trial) of sweep seed s iff seed_draw(episode_seed(s, domain, task,
trial)) < accuracy[c] (handoff.engine.scripted.handoff_decision), so its hand-off accuracy there is
exactly that indicator. The rounds are the sweep's (handoff.sweep.adaptive): the checkpoints still
running get a round, handoff.rules.sequential.decide decides. The tasks are those the sweep would
run (tasks.split=test, tasks.per_kind=null: every test task of both domains). `--draws independent`
gives every checkpoint its own draw (seed_draw of the seed and the checkpoint): no common random
numbers, the harder case.

    python -m bench.bench_adaptive [--scenario done-when|spread] [--seeds 20] [--draws seed|independent]
"""

from __future__ import annotations

import argparse
import hashlib
import time

import handoff  # noqa: F401
from bench.common import report
from handoff.engine.scripted import seed_draw
from handoff.report.adaptive import Round, finished, n_rounds
from handoff.rules.sequential import confidence_sequence, decide, paired_observations
from handoff.sweep.adaptive import running
from handoff.sweep.plan import episode_seed

SCENARIOS = {
    "done-when": {"ckpt-055": 0.55, "ckpt-070": 0.70, "ckpt-085a": 0.85, "ckpt-085b": 0.85},
    "spread": {"ckpt-050": 0.50, "ckpt-060": 0.60, "ckpt-065": 0.65, "ckpt-070": 0.70, "ckpt-075": 0.75,
               "ckpt-080": 0.80, "ckpt-090a": 0.90, "ckpt-090b": 0.90},
}


def test_tasks() -> list[tuple[str, str]]:
    from handoff.tasks import load_tasks

    return [(d, t.id) for d in ("airline", "retail") for t in load_tasks(d, split="test")]


def draw(seed: int, domain: str, task: str, trial: int, ckpt: str, independent: bool) -> float:
    episode = episode_seed(seed, domain, task, trial)
    if not independent:
        return seed_draw(episode)
    return int.from_bytes(hashlib.sha256(f"{episode}/{ckpt}".encode()).digest()[:8], "big") / 2**64


def one_seed(seed: int, accuracy: dict[str, float], tasks, args) -> dict:
    """The rounds of one sweep seed: the final verdicts, and per checkpoint whether its sequence
    against the best missed the true difference at some round."""
    names, values, rounds = list(accuracy), {c: {} for c in accuracy}, []
    missed = {c: False for c in names}
    while not finished(rounds, n_rounds(args.max_trials, args.round_trials)):
        number = len(rounds) + 1
        trials = range((number - 1) * args.round_trials, min(number * args.round_trials, args.max_trials))
        for c in running(rounds, names):
            for domain, task in tasks:
                for trial in trials:
                    values[c][(domain, task, trial)] = float(draw(seed, domain, task, trial, c, args.independent)
                                                             < accuracy[c])
        previous = rounds[-1].verdicts if rounds else {}
        verdicts = decide(values, previous, number, args.margin, args.confidence, args.round_trials, args.max_trials)
        best = next(c for c, v in verdicts.items() if v.status == "best")
        for c, v in verdicts.items():
            truth = accuracy[c] - accuracy[best]
            if v.vs_best is not None and v.round == number and not v.vs_best.lo <= truth <= v.vs_best.hi:
                missed[c] = True
        rounds.append(Round(round=number, trials=trials.stop, verdicts=verdicts))
    return {"verdicts": rounds[-1].verdicts, "rounds": len(rounds), "missed": missed}


def summarize(accuracy: dict[str, float], runs: list[dict], tasks, args) -> dict:
    top = max(accuracy.values())
    fixed = len(tasks) * args.max_trials
    per = {}
    for c, p in accuracy.items():
        truly_worse = top - p > args.margin
        statuses = [r["verdicts"][c].status for r in runs]
        spent = [r["verdicts"][c].episodes for r in runs]
        per[c] = {
            "accuracy": p, "truly_worse": truly_worse,
            "status_counts": {s: statuses.count(s) for s in sorted(set(statuses))},
            "episodes_mean": sum(spent) / len(runs), "episodes_max": max(spent), "fixed_episodes": fixed,
            "fraction_of_fixed_max": max(spent) / fixed,
            "seeds_over_a_third": sum(e > fixed / 3 for e in spent),
            "decided_at_round": _counts(r["verdicts"][c].round for r in runs
                                        if r["verdicts"][c].status in ("tied", "worse")),
            # a false decision: best or tied though truly worse, worse though not (undecided decides nothing)
            "false_decision_rate": (sum(s in ("best", "tied") for s in statuses) if truly_worse
                                    else sum(s == "worse" for s in statuses)) / len(runs),
            "undecided_rate": statuses.count("undecided") / len(runs),
            "sequence_missed_rate": sum(r["missed"][c] for r in runs) / len(runs),
        }
    spent_all = sum(r["verdicts"][c].episodes for r in runs for c in accuracy) / len(runs)
    return {"checkpoints": per, "episodes_mean": spent_all, "fixed_episodes": fixed * len(accuracy),
            "fraction_of_fixed": spent_all / (fixed * len(accuracy)),
            "rounds_mean": sum(r["rounds"] for r in runs) / len(runs)}


def _counts(values) -> dict:
    values = list(values)
    return {v: values.count(v) for v in sorted(set(values))}


def identical_pair_told_apart(tasks, args) -> int:
    """Seeds in which two checkpoints of the same accuracy (common draws) got different statuses
    or a sequence excluding 0 (they must never be told apart)."""
    count = 0
    for seed in range(args.seeds):
        values = {c: {(d, t, k): float(draw(seed, d, t, k, c, False) < 0.85) for d, t in tasks
                      for k in range(args.max_trials)} for c in ("a", "b")}
        cs = confidence_sequence(paired_observations(values["a"], values["b"], args.round_trials), args.confidence)
        count += not cs.lo <= 0 <= cs.hi
    return count


def rounds_parser(doc: str, scenarios: list[str], seeds: int, draws: str) -> argparse.ArgumentParser:
    """The options of a benchmark of adaptive rounds over simulated known answers."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=scenarios, default=scenarios[0])
    parser.add_argument("--seeds", type=int, default=seeds)
    parser.add_argument("--draws", choices=["seed", "independent"], default=draws)
    parser.add_argument("--margin", type=float, default=0.05)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--max-trials", type=int, default=8)
    parser.add_argument("--round-trials", type=int, default=1)
    parser.add_argument("--out")
    return parser


def main() -> None:
    args = rounds_parser(__doc__, list(SCENARIOS), seeds=20, draws="seed").parse_args()
    args.independent = args.draws == "independent"
    accuracy, tasks = SCENARIOS[args.scenario], test_tasks()
    started = time.perf_counter()
    runs = [one_seed(seed, accuracy, tasks, args) for seed in range(args.seeds)]
    result = {"scenario": args.scenario, "draws": args.draws, "seeds": args.seeds, "tasks": len(tasks),
              "margin": args.margin, "confidence": args.confidence, "max_trials": args.max_trials,
              "round_trials": args.round_trials, **summarize(accuracy, runs, tasks, args),
              "identical_pair_told_apart": identical_pair_told_apart(tasks, args) if args.draws == "seed" else None,
              "wall_s": round(time.perf_counter() - started, 1)}
    report("bench_adaptive", result, args.out)


if __name__ == "__main__":
    main()
