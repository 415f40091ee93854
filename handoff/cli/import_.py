"""`handoff import FILE... --run-dir DIR`: tau2 results become a standard run directory (manifest,
shards, reduced metrics, report with episode pages, W&B offline run), one checkpoint per file, that
`handoff compare` and `handoff report` read like a sweep's.

FILE is a tau2 results JSON, a JSON list of SimulationRuns or a single SimulationRun (gzip-compressed
or not); one naming no domain gets it from its tasks and tools. Each simulation's task id is checked
against the checks tau2 recorded and the identifiers its user gave, and recovered (with the evidence)
where missing or contradicted; one no task explains alone is left out, never guessed. Tasks whose
definition in the file differs from the pinned one are named and left out (--keep-drifted keeps
them; it also imports a policy variant such as airline_tighter_policy, refused otherwise). Every
reward is re-evaluated by tau2's evaluator against its task; an episode whose re-evaluated reward
differs from the recorded one, or that cannot be replayed (the whole error and the message where it
diverged are kept), is listed in manifest.json (`import`) and the report, and left out of the metrics
(--keep-mismatched keeps the mismatched ones, with the re-evaluated reward). A file losing more than
5% is warned about on stderr and in the report. Checkpoints are named by their files, at step 0 (a
set, not a curve) unless --step is given. Importing the same files again changes nothing; a file
changed since is refused for the run.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("import", help="tau2 results files -> a run directory, rewards re-evaluated",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="FILE", help="tau2 results JSON, list or SimulationRun")
    parser.add_argument("--run-dir", required=True, help="the run directory to write (new, or this import's)")
    parser.add_argument("--name", help="run name: report title, W&B group (default: the directory's name)")
    parser.add_argument("--domain", help="tau2 domain of files that do not name theirs (refused if one contradicts)")
    parser.add_argument("--checkpoint", action="append", default=[], metavar="NAME",
                        help="checkpoint name of each file, in order (default: the file's name without its "
                             "extensions, so that two submissions of one model stay apart)")
    parser.add_argument("--step", action="append", type=int, default=[], metavar="N",
                        help="training step of each file, in order: the checkpoints become one learning curve "
                             "(default: 0 for all, a set of unrelated files, drawn as no curve)")
    parser.add_argument("--keep-mismatched", action="store_true",
                        help="keep episodes whose re-evaluated reward differs from the recorded one (with the "
                             "re-evaluated reward)")
    parser.add_argument("--keep-drifted", action="store_true",
                        help="keep the episodes of tasks whose definition in the file differs from the pinned one "
                             "(left out by default), and import a policy variant (airline_tighter_policy) as its "
                             "domain; both marked as drifted in the manifest and the report")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.importing import counts, import_files
    from handoff.report import finish_run
    from handoff.report.imported import drift_lines, left_out_warnings
    from handoff.report.text import run_headline

    section = import_files(args.run_dir, args.files, name=args.name, domain=args.domain,
                           checkpoints=args.checkpoint, steps=args.step, keep_mismatched=args.keep_mismatched,
                           keep_drifted=args.keep_drifted)
    fate = "kept, with the re-evaluated reward" if section.keep_mismatched else "left out of the metrics"
    for entry in section.files:
        agreed, mismatched, failed, recovered, unattributed, drifted = counts(section, entry.path)
        print(f"{entry.path}: {entry.checkpoint} (step {entry.step}, {entry.domain}): {entry.episodes} simulations, "
              f"{agreed} agreed, {mismatched} mismatched ({fate}), {failed} failed to replay (left out), "
              f"{recovered} task ids recovered, {unattributed} without a task (left out)"
              + (f", {drifted} of drifted tasks (left out)" if drifted else ""))
    for warning in drift_lines(section) + left_out_warnings(section):
        print(f"WARNING: {warning}", file=sys.stderr)
    paths = finish_run(args.run_dir)
    print("\n" + run_headline(args.run_dir) + "\n")
    print("\n".join(f"  {name}: {path}" for name, path in paths.items() if not name.startswith("plot_")))
    return 0
