"""Paired comparison of two checkpoints (of two runs, or two of one sweep) on the tasks both ran:
A - B for every headline metric with its 95% interval (paired t over tasks,
handoff.rules.metrics.paired_difference). The PRIMARY metrics are significant when their
Holm-adjusted p-value is under 0.05 (the family-wise error over the four is at most 5%); the rest are
exploratory: significant when their own interval excludes 0, uncorrected (docs/metrics.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from handoff.report.cost import CostMetrics, cost_metrics
from handoff.report.cost_view import side_cost
from handoff.report.flips import Flip, find_flips, summary
from handoff.report.reducer import reduce_run
from handoff.report.wandb_log import WandbError, place_of, resolve_target, run_id
from handoff.rules import EpisodeScore
from handoff.rules.intervals import MIN_TASKS, MIN_VARYING_TASKS, holm
from handoff.rules.metrics import Difference, PairedComparison, paired_difference
from handoff.rules.sequential import METRICS, SequenceBound, confidence_sequence, paired_observations
from handoff.rundir import RunDir, RunDirError
from handoff.scoring import Scorer

PRIMARY = ("handoff_accuracy", "handoff_recall", "handoff_precision", "tau2_reward")
ALPHA = 0.05


class Side(BaseModel):
    run_dir: Path
    checkpoint: str
    step: int
    domain: str | None = None
    wandb_runs: list[str] = []  # ENTITY/PROJECT/runs/ID of the side's (sweep, domain) W&B runs
    scoring: dict = {}  # handoff.scoring.Scorer.info: the reward weights and labels it was scored with
    cost: CostMetrics | None = None  # the side's cost per episode and per success (handoff.report.cost)

    @property
    def label(self) -> str:
        return f"{self.run_dir.name}:{self.checkpoint}" + (f":{self.domain}" if self.domain else "")


class Comparison(BaseModel):
    a: str
    b: str
    side_a: Side
    side_b: Side
    result: PairedComparison
    significant: dict[str, bool]
    primary: list[str] = list(PRIMARY)  # Holm-corrected across them; every other metric is exploratory
    p_holm: dict[str, float | None] = {}  # the primary metrics' Holm-adjusted p (None: too few tasks)
    flips: list[Flip] = []
    sequences: dict[str, SequenceBound] = {}  # anytime-valid A - B per CS metric, a round per trial
    decisions: dict[str, str] = {}  # "A"/"B" -> what its adaptive sweep decided about it


def significant(d: Difference) -> bool:
    return d.lo is not None and d.hi is not None and (d.lo > 0 or d.hi < 0)


def primary_p(result: PairedComparison) -> dict[str, float | None]:
    """Holm's adjusted p of each primary metric with an interval (None for one without)."""
    tested = {name: result.metrics[name].p for name in PRIMARY if result.metrics[name].p is not None}
    return {name: None for name in PRIMARY} | holm(tested)


def significance(result: PairedComparison, p_holm: dict[str, float | None]) -> dict[str, bool]:
    """Primary metrics by their Holm-adjusted p, the exploratory ones by their own interval."""
    return {name: (p_holm[name] is not None and p_holm[name] < ALPHA) if name in p_holm else significant(d)
            for name, d in result.metrics.items()}


def side_scores(run_dir: str | Path, checkpoint: str | None, domain: str | None) -> tuple[Side, list[EpisodeScore]]:
    """The (incrementally reduced) scores of one checkpoint of a run, optionally of one domain."""
    scorer = Scorer.for_config(RunDir(run_dir).config)
    episodes = reduce_run(run_dir, scorer).episodes
    names = sorted({e.model for e in episodes})
    if checkpoint is None:
        if len(names) != 1:
            raise RunDirError(f"{run_dir} has checkpoints {', '.join(names) or '(none)'}: name one with --a NAME "
                              f"(side A, the first run) or --b NAME (side B), e.g. --a {names[0] if names else 'NAME'}")
        checkpoint = names[0]
    if checkpoint not in names:
        raise RunDirError(f"{run_dir} has no checkpoint {checkpoint!r} (it has {', '.join(names)})")
    mine = [e for e in episodes if e.model == checkpoint and domain in (None, e.score.domain)]
    scores = [e.score.model_copy(update={"trial": e.trial}) for e in mine]  # the record's trial (a SimulationRun may lack it)
    if not scores:
        raise RunDirError(f"{run_dir}: checkpoint {checkpoint!r} has no episodes in domain {domain!r}")
    step = next(e.step for e in episodes if e.model == checkpoint)
    domains = [domain] if domain else sorted({e.score.domain for e in episodes if e.model == checkpoint})
    side = Side(run_dir=Path(run_dir), checkpoint=checkpoint, step=step, domain=domain,
                wandb_runs=wandb_runs(RunDir(run_dir), domains), scoring=scorer.info, cost=cost_metrics(mine))
    return side, scores


def wandb_runs(run: RunDir, domains: list[str]) -> list[str]:
    """Where the W&B runs of these domains are (with the logger settings the run was logged with)."""
    try:
        target = resolve_target(run.config.get("logger") or {}, run.root)
    except WandbError:
        return []
    return [target.path(run_id(run, d)) for d in domains]


def compare(a: tuple[Side, list[EpisodeScore]], b: tuple[Side, list[EpisodeScore]],
            mixed_scoring: bool = False) -> Comparison:
    """A - B on the tasks both ran. Sides scored with different reward weights or labels are refused
    (their rewards do not compare) unless `mixed_scoring`."""
    differs = [name for name in ("reward_weights", "labels_sha256") if a[0].scoring.get(name) != b[0].scoring.get(name)]
    if differs and not mixed_scoring:
        raise RunDirError(f"{a[0].label} and {b[0].label} were scored with different {' and '.join(differs)} "
                          "(each run's `reward` config): their rewards do not compare; pass --mixed-scoring to "
                          "compare them anyway")
    result = paired_difference(a[1], b[1])
    if result.n_tasks == 0:
        raise RunDirError(f"{a[0].label} and {b[0].label} have no task in common")
    p_holm = primary_p(result)
    return Comparison(a=a[0].label, b=b[0].label, side_a=a[0], side_b=b[0], result=result,
                      significant=significance(result, p_holm), p_holm=p_holm,
                      flips=find_flips(a[1], b[1]), sequences=sequences(a[1], b[1]),
                      decisions={tag: d for tag, side in (("A", a[0]), ("B", b[0])) if (d := decision(side))})


def decision(side: Side) -> str:
    """What the side's adaptive sweep decided about its checkpoint ("" for a fixed sweep)."""
    from handoff.report.adaptive import adaptive_result

    result = adaptive_result(RunDir(side.run_dir))
    d = result.checkpoints.get(side.checkpoint) if result is not None else None
    if d is None:
        return ""
    return (f"{d.status} at round {d.round} of {result.rounds} ({d.episodes_at_decision} episodes; "
            f"{d.episodes} run of the fixed design's {d.fixed_episodes}), {result.metric} margin {result.margin:g}")


def sequences(a: list[EpisodeScore], b: list[EpisodeScore], confidence: float = 0.95) -> dict[str, SequenceBound]:
    """The anytime-valid CS (handoff.rules.sequential) of A - B for each of its metrics, trial by
    trial as rounds: valid also for a comparison looked at while the runs grow."""
    def values(scores: list[EpisodeScore], metric: str) -> dict:
        return {(s.domain, s.task_id, s.trial or 0): METRICS[metric](s) for s in scores}

    return {metric: confidence_sequence(paired_observations(values(a, metric), values(b, metric), 1), confidence)
            for metric in METRICS}


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.4f}" if x < 0 or x > 0 else "0"


POSITIVES = ("precision", "recall")


def _counts(name: str, d: Difference) -> str:
    """The tasks and episodes a row rests on ("pos": the positives of precision and recall)."""
    unit = "pos" if name.endswith(POSITIVES) else "ep"
    return f"{d.n_tasks}t {d.n_episodes_a}/{d.n_episodes_b}{unit}"


def _row(cmp: Comparison, name: str, width: int) -> str:
    d = cmp.result.metrics[name]
    a = "n/a" if d.a is None else f"{d.a:.4f}"
    b = "n/a" if d.b is None else f"{d.b:.4f}"
    interval = "too few tasks" if d.too_few else f"[{_num(d.lo)}, {_num(d.hi)}]"
    verdict = "yes" if cmp.significant[name] else "no"
    if name in cmp.p_holm:
        verdict += "" if cmp.p_holm[name] is None else f" (Holm p {cmp.p_holm[name]:.3g})"
    else:
        verdict = f"({verdict})"
    return (f"{name:{width}} {a:>9} {b:>9} {_num(d.diff):>9}  {interval:>21}  {_counts(name, d):>16}  {verdict}")


def format_table(cmp: Comparison, html: Path | None = None) -> str:
    r = cmp.result
    width = max(34, *map(len, r.metrics))
    head = f"{'metric':{width}} {'A':>9} {'B':>9} {'A-B':>9}  {'95% interval':>21}  {'n':>16}  significant"
    lines = [f"A = {cmp.a}   B = {cmp.b}",
             f"{r.n_tasks} shared tasks ({r.n_episodes_a} episodes in A, {r.n_episodes_b} in B)",
             *(["warning: A and B were scored with different reward weights or labels"]
               if cmp.side_a.scoring != cmp.side_b.scoring else []),
             "", f"primary metrics (significant: Holm-adjusted p < {ALPHA:g} over these {len(cmp.primary)}):", head,
             *(_row(cmp, name, width) for name in cmp.primary),
             "", ("exploratory metrics (each interval on its own, not corrected for their number: "
                  "a (yes) is a lead, not a finding):"), head,
             *(_row(cmp, name, width) for name in r.metrics if name not in cmp.primary),
             (f"(too few tasks: under {MIN_TASKS} tasks, or under {MIN_VARYING_TASKS} on which A and B differ; "
              "n: tasks, then episodes counted in A/B, positives for precision and recall)")]
    lines += ["", "anytime-valid (a confidence sequence over the shared trials, docs/metrics.md; n: task-rounds):"]
    for name, cs in cmp.sequences.items():
        interval = f"[{_num(cs.lo)}, {_num(cs.hi)}]"
        lines.append(f"{name:{width}} {'':>9} {'':>9} {_num(cs.estimate):>9}  {interval:>21}  {f'{cs.n} obs':>16}  "
                     f"{'yes' if not cs.crossed and (cs.lo > 0 or cs.hi < 0) else 'no'}")
    lines += [f"adaptive sweep, {tag}: {text}" for tag, text in cmp.decisions.items()]
    lines += [f"cost {tag}: {side_cost(side.cost)}" for tag, side in (("A", cmp.side_a), ("B", cmp.side_b))]
    lines.append("")
    for tag, side in (("A", cmp.side_a), ("B", cmp.side_b)):
        runs = ", ".join(side.wandb_runs) or "(no W&B run)"
        lines.append(f"W&B {tag}: {runs} at {place_of(RunDir(side.run_dir), side.checkpoint, side.step)}")
    if html is not None:
        where = f"Transcripts side by side: {html}"
    else:
        where = ("Transcripts side by side: add --html PAGE; one by one: "
                 + " and ".join(str(s.run_dir / "report" / "episodes" / "index.html") for s in (cmp.side_a, cmp.side_b))
                 + " (written by handoff report)")
    return "\n".join(lines + [""] + summary(cmp.flips, where))
