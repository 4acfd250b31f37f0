"""No import cycle among aiayn's modules: each stage can be imported, read and tested alone
(data flows one way, as the README's map of the code lays it out). Imports are read with
`ast`, so those inside functions and under `if TYPE_CHECKING:` count too; importing
`aiayn.a.b` also runs `aiayn.a`'s `__init__`."""

from __future__ import annotations

import ast
from pathlib import Path

import aiayn

PACKAGE = Path(aiayn.__file__).parent


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """{"aiayn.train.trainer": path, "aiayn.train": path of its __init__, ...}"""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name `path` imports (absolute; relative imports resolved), with each
    `from X import y` given as both X and X.y (y may be a submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the aiayn modules (and packages) importing it runs."""
    graph = {}
    for name, path in files.items():
        targets = set()
        for imported in imported_names(name, path):
            parts = imported.split(".")
            for i in range(1, len(parts) + 1):  # aiayn, aiayn.a, aiayn.a.b: each __init__ runs
                prefix = ".".join(parts[:i])
                if prefix in files and prefix != name and not name.startswith(prefix + "."):
                    targets.add(prefix)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_aiayns_modules():
    files = module_files()
    assert "aiayn.train.trainer" in files and "aiayn.cli" in files  # it sees the package
    assert cycles(import_graph(files)) == []


def test_the_check_sees_cycles_through_type_checking_function_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (package / "b.py").write_text("def f():\n    from .sub import a\n")
    (package / "c.py").write_text("import pkg.b\n")
    graph = import_graph(module_files(package))
    assert "pkg.sub.a" in graph["pkg.b"] and "pkg.b" in graph["pkg.sub.a"]
    assert cycles(graph) == [["pkg.b", "pkg.sub.a"]]
    (package / "b.py").write_text("X = 1\n")
    assert cycles(import_graph(module_files(package))) == []


ENTRIES = {"for_training", "for_inference"}  # the fast path's only ways in (aiayn.fast)


def fast_path_uses(path: Path) -> set[str]:
    """What a module takes from `aiayn.fast`: `aiayn.fast.x` for `from aiayn.fast import x`,
    for `fast.x` after `from aiayn import fast`, and for `import aiayn.fast.x`."""
    used, bound = set(), set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "aiayn":
            bound |= {a.asname or a.name for a in node.names if a.name == "fast"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiayn.fast"):
            used |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            used |= {a.name for a in node.names if a.name.startswith("aiayn.fast")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in bound:
                used.add(f"aiayn.fast.{node.attr}")
    return used


def test_the_core_imports_no_fast_path_and_the_fast_path_no_trainer():
    """The layering of DESIGN's core/fast split on the import graph: nothing in `model/`,
    `decode/` or the loss runs `aiayn.fast`; nothing in `fast/` runs `aiayn.train`."""
    graph = import_graph(module_files())
    core = [m for m in graph if m.startswith(("aiayn.model", "aiayn.decode")) or m == "aiayn.loss"]
    assert "aiayn.loss" in core and "aiayn.model.attention" in core
    reach = {m: reachable(graph, m) for m in graph}
    assert [m for m in core if any(r.startswith("aiayn.fast") for r in reach[m])] == []
    fast_modules = [m for m in graph if m.startswith("aiayn.fast")]
    assert [m for m in fast_modules if any(r.startswith("aiayn.train") for r in reach[m])] == []


def test_outside_the_fast_path_only_its_two_entries_are_used():
    files = module_files()
    found = {
        name: uses - {f"aiayn.fast.{entry}" for entry in ENTRIES}
        for name, path in files.items()
        if not name.startswith("aiayn.fast") and (uses := fast_path_uses(path))
    }
    assert {name for name, extra in found.items() if not extra} >= {
        "aiayn.train.trainer", "aiayn.translate"
    }  # the two callers, each through its entry
    assert {name: extra for name, extra in found.items() if extra} == {}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module importing `start` runs, transitively."""
    seen, todo = set(), [start]
    while todo:
        for other in graph[todo.pop()]:
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def test_the_entry_check_sees_every_way_of_reaching_into_the_fast_path(tmp_path):
    module = tmp_path / "m.py"
    cases = {
        "from aiayn import fast\nfast.for_inference(m)\n": {"aiayn.fast.for_inference"},
        "from aiayn import fast as f\nf.apply(m)\n": {"aiayn.fast.apply"},
        "from aiayn.fast.int8 import quantize_int8\n": {"aiayn.fast.int8.quantize_int8"},
        "import aiayn.fast.linear\n": {"aiayn.fast.linear"},
        "from aiayn.fast import for_training\n": {"aiayn.fast.for_training"},
    }
    for text, expected in cases.items():
        module.write_text(text)
        assert fast_path_uses(module) == expected, text
