"""Where the committed task sets and manifests live (relative to the repository root)."""

from __future__ import annotations

import hashlib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TASKS_DIR = Path("data/tasks")
LABELS_FILE = Path("data/manifests/labels_v1.json")
SPLITS_FILE = Path("data/manifests/splits_v1.json")
OVERRIDES_FILE = Path("data/manifests/label_overrides_v1.json")
CATALOG_DOC = Path("docs/out_of_scope.md")
SCENARIOS_DIR = Path("data/scenarios")
PRODUCT_CLASSES_FILE = SCENARIOS_DIR / "retail_products.yaml"
BEHAVIOUR_FILE = Path("data/manifests/behaviour_v1.json")
POLICY_CLAUSES_FILE = Path("data/policy/clauses.yaml")
GOLD_RESOLUTIONS_FILE = Path("data/policy/gold_resolutions.yaml")


def task_file(domain: str, kind: str) -> Path:
    return TASKS_DIR / domain / f"{kind}.json"


def scenario_file(domain: str) -> Path:
    return SCENARIOS_DIR / f"{domain}.yaml"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
