"""The layering of src/attnlab, checked over its import graph (parsed, not imported).

Layers, lowest first (docs/architecture.md, "Layout"): a module may import its own layer and
the layers below it, never one above, with function-level (lazy) imports counted too. The
graph has no import cycles. The few upward imports that remain are listed in KNOWN_UPWARD
with the reason; each must still exist (remove it from the list when the code is fixed),
and no new one may appear.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"

LAYERS = [
    # families: the registry (attnlab/families/__init__.py) only
    {"linear", "files", "limits", "quantize", "head_screen", "families"},
    {"attention"},
    {"layers"},
    {"models"},
    {"interop", "generation"},
    {"data"},
    {"training"},
    {"tasks", "translation", "evaluation"},
    {"viz"},
    {"pipelines"},
    {"cli", "family"},  # family: a family package, attnlab.families.<name>
]
RANK = {package: index for index, packages in enumerate(LAYERS) for package in packages}

# (importer, imported): upward imports still in the code, each with its reason; a fixed one
# must be removed from this list (the family-package restructuring of issue 30 emptied it).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def import_graph(root: Path = SRC, *, lazy: bool = True) -> dict[str, dict[str, int]]:
    """``{module: {imported attnlab module: line}}``; ``lazy`` also counts imports inside
    functions. ``from package import name`` counts as importing ``package.name`` when that
    is a module, else ``package``."""
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        deps: dict[str, int] = {}
        for node in (ast.walk(tree) if lazy else tree.body):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                names = [f"{module}.{alias.name}" for alias in node.names]
                targets = [target for target in names if target in modules] or [module]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == "attnlab":
                    resolved = resolve(target)
                    if resolved and resolved != name:
                        deps.setdefault(resolved, node.lineno)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def layer(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "families":
        return "family"  # attnlab.families.<name>...: one family's package, at the top
    return parts[1] if len(parts) > 1 else None


def family_of(module: str) -> str | None:
    """``"music"`` for ``attnlab.families.music.verbs``; None outside a family package."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "families" else None


def test_every_subpackage_has_a_layer():
    packages = {layer(module) for module in import_graph()} - {None}
    assert packages <= set(RANK), f"add {sorted(packages - set(RANK))} to LAYERS (and docs/architecture.md)"


def upward_imports(graph) -> dict[tuple[str, str], int]:
    found = {}
    for module, deps in graph.items():
        low = layer(module)
        if low is None:
            continue  # the package root re-exports the public API from every layer
        for dep, line in deps.items():
            high = layer(dep)
            if high is None:
                # importing the root package (attnlab/__init__.py) pulls in every layer
                if RANK[low] < RANK["cli"]:
                    found[(module, dep)] = line
            elif RANK[high] > RANK[low]:
                found[(module, dep)] = line
    return found


def test_nothing_imports_upward():
    found = upward_imports(import_graph())
    new = {pair: line for pair, line in found.items() if pair not in KNOWN_UPWARD}
    assert not new, "upward imports (a lower layer importing a higher one): " + "; ".join(
        f"{a} (line {line}) imports {b}" for (a, b), line in sorted(new.items()))
    gone = KNOWN_UPWARD - set(found)
    assert not gone, f"fixed, remove from KNOWN_UPWARD: {sorted(gone)}"


def family_imports(graph) -> dict[tuple[str, str], int]:
    """Imports of a family package from anywhere but that family itself: the core and the
    command line reach families only through the registry (attnlab.families), and no
    family imports another."""
    found = {}
    for module, deps in graph.items():
        for dep, line in deps.items():
            family = family_of(dep)
            if family is not None and family_of(module) != family:
                found[(module, dep)] = line
    return found


def test_only_a_family_imports_its_package():
    found = family_imports(import_graph())
    assert not found, "a family package imported from outside it (use attnlab.families' registry): " + "; ".join(
        f"{a} (line {line}) imports {b}" for (a, b), line in sorted(found.items()))


# Modules outside the family packages that name a family's module in a string (resolved on
# use, so the import graph does not show it), each with its reason; everything else reaches a
# family through what its registration names (attnlab.families: verbs, train, pipeline,
# attention, explore, onnx, exporters, ...). A fixed one must leave the list.
KNOWN_NAMED: dict[str, str] = {
    "attnlab.translation": "the documented public path of the translation family's Python API (docs/translation.md)",
    "attnlab.cli.evaluate": "`attnlab evaluate` is the translation family's own scorer (its registration says "
                            "evaluate='evaluate')",
}
_FAMILY_MODULE = re.compile(r"^attnlab\.families\.[a-z_]+[\w.]*(:[\w.]+)?$")


def named_family_modules(root: Path = SRC) -> dict[str, list[str]]:
    """``{module: [family module strings it holds]}`` for modules outside the family packages
    (the registry itself included): string constants that are a family's module path, with or
    without ``:attribute`` (docstrings and prose do not match)."""
    found: dict[str, list[str]] = {}
    for path in root.rglob("*.py"):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        if family_of(name) is not None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _FAMILY_MODULE.match(node.value):
                found.setdefault(name, []).append(node.value)
    return found


def test_the_core_names_no_family_module():
    found = named_family_modules()
    new = {module: names for module, names in found.items() if module not in KNOWN_NAMED}
    assert not new, "a family's module named outside its package (name it in the family's registration): " + \
        "; ".join(f"{module}: {names}" for module, names in sorted(new.items()))
    gone = set(KNOWN_NAMED) - set(found)
    assert not gone, f"fixed, remove from KNOWN_NAMED: {sorted(gone)}"


def test_the_name_check_finds_a_family_module_in_a_string(tmp_path):
    root = tmp_path / "attnlab"
    for package in ("families", "families/a", "interop"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "interop" / "table.py").write_text('"""attnlab.families.a:f in prose"""\nT = {"a": "attnlab.families.a.x:f"}\n')
    (root / "families" / "a" / "__init__.py").write_text('X = "attnlab.families.a.x:f"\n')  # its own package
    assert named_family_modules(root) == {"attnlab.interop.table": ["attnlab.families.a.x:f"]}


def test_the_family_check_finds_one_family_importing_another(tmp_path):
    root = tmp_path / "attnlab"
    for package in ("families", "families/a", "families/b", "cli"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "families" / "a" / "verbs.py").write_text("from attnlab.families.b import thing\n")
    (root / "cli" / "main.py").write_text("def f():\n    import attnlab.families.a.verbs\n")
    assert family_imports(import_graph(root)) == {("attnlab.families.a.verbs", "attnlab.families.b"): 1,
                                                  ("attnlab.cli.main", "attnlab.families.a.verbs"): 2}


def test_no_import_cycles_at_module_level():
    assert cycles(import_graph(lazy=False)) == []


def test_no_import_cycles_between_modules_counting_lazy_imports():
    """Lazy imports count too, except imports of a package's ``__init__`` (a registry that
    imports its package to make the families register is the one sanctioned late import)."""
    graph = import_graph(lazy=True)
    packages = {path for path in graph if (SRC.parent / path.replace(".", "/") / "__init__.py").exists()}
    modules_only = {module: {dep: line for dep, line in deps.items() if dep not in packages}
                    for module, deps in graph.items() if module not in packages}
    assert cycles(modules_only) == []


@pytest.mark.parametrize("source, expected", [
    ({"a.py": "import attnlab.b\n", "b.py": "from attnlab import a\n"}, [["attnlab.a", "attnlab.b"]]),
    ({"a.py": "def f():\n    from attnlab.b import x\n", "b.py": "from attnlab.a import y\n"}, [["attnlab.a", "attnlab.b"]]),
    ({"a.py": "import attnlab.b\n", "b.py": "import os\n"}, []),
])
def test_the_cycle_finder_finds_cycles(tmp_path, source, expected):
    root = tmp_path / "attnlab"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, text in source.items():
        (root / name).write_text(text)
    assert cycles(import_graph(root, lazy=True)) == expected


def test_the_layer_check_finds_an_upward_import(tmp_path):
    root = tmp_path / "attnlab"
    for package, text in {"attention": "def f():\n    from attnlab.cli.main import main\n", "cli": ""}.items():
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (root / package / "core.py").write_text(text)
    (root / "cli" / "main.py").write_text("")
    (root / "__init__.py").write_text("")
    assert upward_imports(import_graph(root)) == {("attnlab.attention.core", "attnlab.cli.main"): 2}
