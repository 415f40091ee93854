"""The GRPO dataset of examples/verl/grpo_tau2.yaml: one parquet row per task of a split (both
domains), naming the task for Tau2AgentLoop (`extra_info`: domain, task_id, seed). The `prompt`
is a placeholder verl's dataset needs; the agent loop builds the real one from the task.

    python examples/verl/make_dataset.py [--out data/verl]   # train.parquet and test.parquet
"""

from __future__ import annotations

import argparse
from pathlib import Path

DOMAINS = ("airline", "retail")


def rows(split: str, seed: int = 0) -> list[dict]:
    from handoff.sweep.plan import episode_seed
    from handoff.tasks import load_tasks

    return [{"data_source": "tau2_handoff", "agent_name": "tau2_handoff",
             "prompt": [{"role": "user", "content": f"tau2 {domain} task {task.id}"}],
             "extra_info": {"domain": domain, "task_id": task.id, "seed": episode_seed(seed, domain, task.id, 0),
                            "split": split}}
            for domain in DOMAINS for task in load_tasks(domain, split=split)]


def main(argv: list[str] | None = None) -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data/verl", help="directory of train.parquet and test.parquet")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        pd.DataFrame(rows(split)).to_parquet(out / f"{split}.parquet")
        print(out / f"{split}.parquet")


if __name__ == "__main__":
    main()
