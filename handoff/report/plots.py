"""The report's figures (matplotlib, Agg): hand-off confusion matrices per checkpoint,
precision/recall over checkpoint steps, violation and format-error rates over steps."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from handoff.report.reducer import ALL, GroupMetrics, Reduction  # noqa: E402
from handoff.report.text import shown_domains  # noqa: E402
from handoff.rules.metrics import Interval  # noqa: E402


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


def confusion_matrices(reduction: Reduction, path: Path) -> Path:
    """One 2x2 matrix (rows: label, columns: decision) per checkpoint and domain, all domains last."""
    checkpoints, domains = reduction.checkpoints(), shown_domains(reduction)
    fig, axes = plt.subplots(len(checkpoints), len(domains), squeeze=False, sharex=True, sharey=True,
                             figsize=(2.4 * len(domains) + 1.2, 2.2 * len(checkpoints) + 0.6))
    for row, (model, step) in enumerate(checkpoints):
        for col, domain in enumerate(domains):
            ax = axes[row][col]
            try:
                c = reduction.group(model, domain).metrics.handoff.confusion
            except KeyError:
                ax.axis("off")
                continue
            cells = [[c.tp, c.fn], [c.fp, c.tn]]
            ax.imshow(cells, cmap="Blues", vmin=0, vmax=max(1, c.tp + c.fn + c.fp + c.tn))
            for i in range(2):
                for j in range(2):
                    ax.text(j, i, str(cells[i][j]), ha="center", va="center",
                            bbox={"facecolor": "white", "alpha": 0.7, "linewidth": 0})
            ax.set_xticks([0, 1], ["transfer", "no transfer"], fontsize=8)
            ax.set_yticks([0, 1], ["should", "should not"], fontsize=8)
            ax.set_title(f"{model} (step {step}): {domain}", fontsize=8)
    fig.suptitle("Hand-off decisions (rows: label, columns: agent)")
    fig.tight_layout()
    return _save(fig, path)


def _series(groups: list[GroupMetrics], pick) -> tuple[list[int], list[float], list[list[float]]]:
    """x (steps), y and asymmetric error bars of an Interval picked from each group's metrics."""
    xs, ys, lo, hi = [], [], [], []
    for g in sorted(groups, key=lambda g: g.step):
        iv: Interval = pick(g.metrics)
        if iv.value is None:
            continue
        xs.append(g.step)
        ys.append(iv.value)
        lo.append(iv.value - (iv.lo if iv.lo is not None else iv.value))
        hi.append((iv.hi if iv.hi is not None else iv.value) - iv.value)
    return xs, ys, [lo, hi]


def _step_axis(ax, steps: list[int]) -> float:
    """Ticks at the checkpoint steps (up to 10) and a span that shows them, even for a single
    checkpoint (matplotlib would span step ± 0.04). Returns the typical gap between steps."""
    steps = sorted(set(steps))
    gap = (steps[-1] - steps[0]) / (len(steps) - 1) if len(steps) > 1 else max(1.0, abs(steps[0]) * 0.1)
    ax.set_xlim(steps[0] - gap / 2, steps[-1] + gap / 2)
    if len(steps) <= 10:
        ax.set_xticks(steps)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return gap


def over_steps_figure(reduction: Reduction, panels: dict[str, tuple], title: str):
    """One panel per metric, one line per domain (and all domains), x = checkpoint step. `panels`:
    name -> (pick, is_fraction); fractions get a 0..1 y axis, other metrics start at 0."""
    fig, axes = plt.subplots(1, len(panels), squeeze=False, figsize=(4.2 * len(panels), 3.2))
    domains = shown_domains(reduction)
    for ax, (name, (pick, is_fraction)) in zip(axes[0], panels.items()):
        gap = _step_axis(ax, [g.step for g in reduction.groups])
        for i, domain in enumerate(domains):
            groups = [g for g in reduction.groups if g.domain == domain and g.rule == ALL]
            xs, ys, err = _series(groups, pick)
            dodge = (i - (len(domains) - 1) / 2) * 0.06 * gap  # side by side, not on top of each other
            ax.errorbar([x + dodge for x in xs], ys, yerr=err, marker="o", capsize=3, label=domain,
                        linestyle="--" if domain == ALL else "-")
        ax.set_ylim(*((-0.05, 1.05) if is_fraction else (0, max(1.0, ax.get_ylim()[1]))))
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("checkpoint step")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    return fig


PRECISION_RECALL = {
    "precision": (lambda m: m.handoff.precision, True),
    "recall": (lambda m: m.handoff.recall, True),
    "F1": (lambda m: m.handoff.f1, True),
}
RATES = {
    "episodes with a substantive violation": (lambda m: m.violation_rate.get("substantive", m.violation_rate["any"]), True),
    "format errors per 100 assistant turns": (lambda m: m.format_errors_per_100_turns["any"], False),
    "tau2 reward": (lambda m: m.tau2_reward, True),
}


def all_plots(reduction: Reduction, out_dir: Path, curves: bool = True) -> dict[str, Path]:
    """Every figure of the report; none for a run without episodes. Only the confusion matrices where
    no line over steps makes sense: checkpoints that are a set, not steps of one training run (`curves`
    false: files imported without --step), or a run of one checkpoint step (one dot each)."""
    if not reduction.groups:
        return {}
    confusion = {"confusion": confusion_matrices(reduction, out_dir / "confusion.png")}
    if not curves or len({step for _, step in reduction.checkpoints()}) < 2:
        for stale in ("precision_recall", "rates"):
            (out_dir / f"{stale}.png").unlink(missing_ok=True)
        return confusion
    return {
        **confusion,
        "precision_recall": _save(over_steps_figure(reduction, PRECISION_RECALL,
                                                    "Hand-off precision and recall (95% intervals)"),
                                  out_dir / "precision_recall.png"),
        "rates": _save(over_steps_figure(reduction, RATES, "Violations, format errors and task reward (95% intervals)"),
                       out_dir / "rates.png"),
    }
