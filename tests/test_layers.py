"""Every import of the package against the layer order of docs/architecture.md: a module imports only
its own layer and those below it, and no import is circular. Imports inside functions count (read
with ast, nothing is imported): they hide a dependency from the reader, not from the order. No exception
is allowed: neither an upward import nor a cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layers(root: Path) -> list[str]:
    """The layers of docs/architecture.md, bottom first: the paths opening the lines of its first code block."""
    block = (root / "docs" / "architecture.md").read_text().split("```")[1]
    return re.findall(r"^(handoff/\S*)", block, re.MULTILINE)


def layer_of(module: str, order: list[str]) -> int | None:
    """The index of a module's layer: a package (`handoff/rules/`) or one file (`handoff/records.py`;
    `handoff/__init__.py` is the package module `handoff` alone); of the entries that hold it, the most
    specific (`handoff/tasks/authoring/` holds handoff.tasks.authoring.derive, `handoff/tasks/` the rest of handoff.tasks)."""
    found = None
    for i, entry in enumerate(order):
        name = entry.rstrip("/").removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        if (module == name or (entry.endswith("/") and module.startswith(name + "."))) and (
                found is None or len(name) > len(found[1])):
            found = (i, name)
    return found and found[0]


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted((root / "handoff").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(module: str, known: dict[str, Path]) -> set[str]:
    """The handoff modules one module imports, wherever the import statement is."""
    path, found = known[module], set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from . import x`, `from ..y import z`
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            # `from base import name` imports the submodule base.name if there is one, else base itself
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {_existing(name, known) for name in found if name.split(".")[0] == "handoff"} - {module}


def _existing(name: str, known: dict[str, Path]) -> str:
    while name not in known:  # `import handoff.x.y` where y is no module: its package
        name = name.rpartition(".")[0]
    return name


def graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {m: imports(m, known) for m in known}


def upward(edges: dict[str, set[str]], order: list[str]) -> set[tuple[str, str]]:
    """Imports of a higher layer (a module without a layer is test_every_module_has_a_layer's)."""
    layer = {m: layer_of(m, order) for m in edges}
    return {(m, t) for m, ts in edges.items() for t in ts if None not in (layer[m], layer[t]) and layer[t] > layer[m]}


def cycles(edges: dict[str, set[str]]) -> set[frozenset[str]]:
    """The groups of modules that import each other (directly or not), each group whole."""
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {m: reach(m) for m in edges}
    return {frozenset({m} | {n for n in reached[m] if m in reached[n]}) for m in edges if m in reached[m]}


def test_every_module_has_a_layer():
    order = layers(ROOT)
    assert len(order) >= 10, f"docs/architecture.md lists no layers: {order}"
    assert [m for m in modules(ROOT) if layer_of(m, order) is None] == [], "add these to docs/architecture.md"


def test_no_import_goes_up_a_layer_or_round_in_a_circle():
    edges = graph(ROOT)
    found_up, found_cycles = upward(edges, layers(ROOT)), cycles(edges)
    assert found_up == set(), "imports from a higher layer of docs/architecture.md"
    assert found_cycles == set(), "circular imports"


def test_an_upward_or_circular_import_inside_a_function_is_found(tmp_path):
    """The negative examples, on a package of three modules: a relative import inside a function that
    goes up, then one back down that closes a circle; the same package in order has neither."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(
        "```\nhandoff/__init__.py  root\nhandoff/low.py       low\nhandoff/high/        high\n```\n")
    package = tmp_path / "handoff"
    (package / "high").mkdir(parents=True)
    for path in (package / "__init__.py", package / "high" / "__init__.py", package / "low.py"):
        path.write_text("import os\n")
    (package / "high" / "top.py").write_text("from handoff import low\nfrom . import helper\n")
    (package / "high" / "helper.py").write_text("")
    order = layers(tmp_path)
    assert upward(graph(tmp_path), order) == set() and cycles(graph(tmp_path)) == set()

    (package / "low.py").write_text("def f():\n    from .high.top import g\n")
    assert upward(graph(tmp_path), order) == {("handoff.low", "handoff.high.top")}
    assert cycles(graph(tmp_path)) == {frozenset({"handoff.low", "handoff.high.top"})}


def test_a_layer_inside_a_package_is_its_own(tmp_path):
    """A sub-package listed above its package (handoff/tasks/authoring/ above handoff/tasks/) is a layer of its own:
    the package importing it goes up, it importing the package goes down."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(
        "```\nhandoff/__init__.py  root\nhandoff/pkg/          read side\nhandoff/pkg/build/    build side\n```\n")
    (tmp_path / "handoff" / "pkg" / "build").mkdir(parents=True)
    for path in ("__init__.py", "pkg/__init__.py", "pkg/build/__init__.py", "pkg/read.py"):
        (tmp_path / "handoff" / path).write_text("")
    (tmp_path / "handoff" / "pkg" / "build" / "make.py").write_text("from handoff.pkg import read\n")
    order = layers(tmp_path)
    assert [layer_of(m, order) for m in ("handoff.pkg", "handoff.pkg.read", "handoff.pkg.build.make")] == [1, 1, 2]
    assert upward(graph(tmp_path), order) == set()

    (tmp_path / "handoff" / "pkg" / "read.py").write_text("def f():\n    from handoff.pkg.build import make\n")
    assert upward(graph(tmp_path), order) == {("handoff.pkg.read", "handoff.pkg.build.make")}
