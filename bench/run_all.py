"""`make bench`: run every benchmark in bench/ (bench_*.py), one process each, and say which failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    failed = []
    for path in sorted(HERE.glob("bench_*.py")):
        print(f"== python -m bench.{path.stem}", flush=True)
        if subprocess.run([sys.executable, "-m", f"bench.{path.stem}"], cwd=HERE.parent).returncode:
            failed.append(path.stem)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
