"""`handoff import FILE... --run-dir DIR`: tau2 results become a standard run directory (manifest,
shards, reduced metrics, report with episode pages, W&B offline run), one checkpoint per file, that
`handoff compare` and `handoff report` read like a sweep's.

FILE is a tau2 results JSON, a JSON list of SimulationRuns or a single SimulationRun (gzip-compressed
or not). Every reward is re-evaluated by tau2's evaluator against the pinned task its task_id names;
an episode whose re-evaluated reward differs from the recorded one, or that cannot be replayed, is
listed in manifest.json (`import`) and the report, and left out of the metrics (--keep-mismatched
keeps the mismatched ones, with the re-evaluated reward). Importing the same files again changes
nothing; a file changed since is refused for the run.
"""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("import", help="tau2 results files -> a run directory, rewards re-evaluated",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="FILE", help="tau2 results JSON, list or SimulationRun")
    parser.add_argument("--run-dir", required=True, help="the run directory to write (new, or this import's)")
    parser.add_argument("--name", help="run name: report title, W&B group (default: the directory's name)")
    parser.add_argument("--domain", help="tau2 domain of files that do not name theirs (refused if one contradicts)")
    parser.add_argument("--checkpoint", action="append", default=[], metavar="NAME",
                        help="checkpoint name of each file, in order (default: the file's agent model)")
    parser.add_argument("--step", action="append", type=int, default=[], metavar="N",
                        help="step of each file, in order (default: its place on the command line, from 0)")
    parser.add_argument("--keep-mismatched", action="store_true",
                        help="keep episodes whose re-evaluated reward differs from the recorded one (with the "
                             "re-evaluated reward)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.importing import counts, import_files
    from handoff.report import finish_run
    from handoff.report.text import run_headline

    section = import_files(args.run_dir, args.files, name=args.name, domain=args.domain,
                           checkpoints=args.checkpoint, steps=args.step, keep_mismatched=args.keep_mismatched)
    fate = "kept, with the re-evaluated reward" if section.keep_mismatched else "left out of the metrics"
    for entry in section.files:
        agreed, mismatched, failed = counts(section, entry.path)
        print(f"{entry.path}: {entry.checkpoint} (step {entry.step}, {entry.domain}): {entry.episodes} simulations, "
              f"{agreed} agreed, {mismatched} mismatched ({fate}), {failed} failed to replay (left out)")
    paths = finish_run(args.run_dir)
    print("\n" + run_headline(args.run_dir) + "\n")
    print("\n".join(f"  {name}: {path}" for name, path in paths.items() if not name.startswith("plot_")))
    return 0
