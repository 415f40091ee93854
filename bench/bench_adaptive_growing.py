"""Adaptive rounds over a set that grows (adaptive.growing: handoff follow, handoff sweep extend):
false decisions and episodes over many seeds, checkpoints arriving one by one.

The episodes are simulated with the scripted engine's known-answer statistic (as bench.bench_adaptive):
checkpoint c is right in episode (task, trial) of seed s iff a draw falls below accuracy[c]; `--draws
seed` shares the draw between checkpoints (the test double as the sweep runs it), `--draws
independent` gives each its own (the harder case). The checkpoints arrive in the scenario's order,
each once the steps of those before are finished (one follow batch per checkpoint), and follow
stops after the last (its settling step); the steps are the sweep's own (handoff.report.adaptive.next_trials, growing_finished), decided by
handoff.rules.sequential.decide at arrival_spending's shares on the trials each step gave
(handoff.sweep.adaptive.within).

A verdict is false as docs/metrics.md defines it: `worse` though the checkpoint is truly within
`margin` of the best it was measured against, `tied` though truly more than `margin` below it.
The guarantee is per checkpoint (at most 1 - confidence each); the share of seeds with any false
verdict (family-wise, not guaranteed) is reported too.

    python -m bench.bench_adaptive_growing [--scenario curve|null|late-best|collapse] [--tasks 30] [--seeds 60]
"""

from __future__ import annotations

import time

import handoff  # noqa: F401
from bench.bench_adaptive import draw, rounds_parser
from bench.common import report
from handoff.report.adaptive import Round, growing_finished, next_trials
from handoff.rules.sequential import arrival_spending, decide
from handoff.sweep.adaptive import within

SCENARIOS = {
    # a training curve: improving, then flat within the margin, one late regression
    "curve": [0.50, 0.60, 0.68, 0.74, 0.78, 0.80, 0.82, 0.82, 0.72, 0.84],
    # every checkpoint the same: any `worse` is false
    "null": [0.80] * 10,
    # the best arrives last, at the smallest share
    "late-best": [0.70, 0.72, 0.70, 0.74, 0.72, 0.70, 0.74, 0.72, 0.70, 0.90],
    # training improves, then collapses: the later checkpoints are clearly worse than the best
    "collapse": [0.60, 0.75, 0.90, 0.88, 0.70, 0.50, 0.40, 0.30, 0.30, 0.20],
}


def one_seed(seed: int, accuracy: dict[str, float], args) -> Round:
    """The last recorded step after every checkpoint arrived and was decided."""
    names, rounds = list(accuracy), []
    values = {c: {(("retail", str(t), k)): float(draw(seed, "retail", str(t), k, c, args.independent) < p)
                  for t in range(args.tasks) for k in range(args.max_trials)} for c, p in accuracy.items()}
    shares = arrival_spending(names, args.confidence)
    for arrived in range(1, len(names) + 1):
        present, settle = names[:arrived], arrived == len(names)  # follow's stop after the last
        while not growing_finished(rounds, present, args.round_trials, args.max_trials, settle):
            target = next_trials(rounds, present, args.round_trials, args.max_trials, settle)
            previous = rounds[-1].verdicts if rounds else {}
            verdicts = decide(within({c: values[c] for c in present}, target), previous, len(rounds) + 1,
                              args.margin, args.confidence, args.round_trials, args.max_trials, shares)
            rounds.append(Round(round=len(rounds) + 1, trials=max(target.values()), verdicts=verdicts,
                                trials_by=target))
    return rounds[-1]


def false_verdict(c: str, last: Round, accuracy: dict[str, float], margin: float) -> bool:
    v = last.verdicts[c]
    if v.status not in ("tied", "worse"):
        return False
    gap = accuracy[c] - accuracy[v.against]
    return gap >= -margin if v.status == "worse" else gap < -margin


def summarize(accuracy: dict[str, float], runs: list[Round], args) -> dict:
    fixed = args.tasks * args.max_trials
    top = max(accuracy.values())
    per = {}
    for c, p in accuracy.items():
        statuses = [r.verdicts[c].status for r in runs]
        per[c] = {"accuracy": p,
                  "status_counts": {s: statuses.count(s) for s in sorted(set(statuses))},
                  "false_decision_rate": sum(false_verdict(c, r, accuracy, args.margin) for r in runs) / len(runs),
                  "episodes_share_of_fixed": sum(r.trials_by[c] for r in runs) / len(runs) / args.max_trials}
    any_false = sum(any(false_verdict(c, r, accuracy, args.margin) for c in accuracy) for r in runs)
    unique_best = [c for c, p in accuracy.items() if p == top]
    best_kept = (sum(r.verdicts[unique_best[0]].status != "worse" for r in runs) / len(runs)
                 if len(unique_best) == 1 else None)
    spent = sum(sum(r.trials_by.values()) for r in runs) * args.tasks / len(runs)
    return {"checkpoints": per,
            "max_false_decision_rate": max(d["false_decision_rate"] for d in per.values()),
            "seeds_with_any_false_verdict": any_false / len(runs),
            "unique_best_in_tie_set": best_kept,
            "episodes_mean": spent, "fixed_episodes": fixed * len(accuracy),
            "fraction_of_fixed": spent / (fixed * len(accuracy))}


def main() -> None:
    parser = rounds_parser(__doc__, list(SCENARIOS), seeds=60, draws="independent")
    parser.add_argument("--tasks", type=int, default=30)
    args = parser.parse_args()
    args.independent = args.draws == "independent"
    accuracy = {f"step{10 * (i + 1)}": p for i, p in enumerate(SCENARIOS[args.scenario])}
    started = time.perf_counter()
    runs = [one_seed(seed, accuracy, args) for seed in range(args.seeds)]
    result = {"scenario": args.scenario, "draws": args.draws, "seeds": args.seeds, "tasks": args.tasks,
              "margin": args.margin, "confidence": args.confidence, "max_trials": args.max_trials,
              "round_trials": args.round_trials, **summarize(accuracy, runs, args),
              "wall_s": round(time.perf_counter() - started, 1)}
    report("bench_adaptive_growing", result, args.out)


if __name__ == "__main__":
    main()
