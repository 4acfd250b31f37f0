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


def imports(name: str, path: Path) -> list[tuple[str, str | None]]:
    """(dotted name, local name it binds or None) of every import in `path`, relative ones
    resolved: `import a.b` gives ("a.b", None) and ("a", "a"); `import a.b as c` ("a.b", "c");
    `from X import y as z` (X, None) and ("X.y", "z") (y may be a submodule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.partition(".")[0]
                found += [(alias.name, alias.asname)] if alias.asname else \
                    [(alias.name, None), (top, top)]  # fmt: skip
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.append((base, None))
            found += [(f"{base}.{alias.name}", alias.asname or alias.name) for alias in node.names]
    return found


def imported_names(name: str, path: Path) -> set[str]:
    """Every dotted name `path` imports (absolute; relative imports resolved), with each
    `from X import y` given as both X and X.y (y may be a submodule)."""
    return {dotted for dotted, _ in imports(name, path)}


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


# what the data stage may use: the config, errors and the two file helpers (leaves)
BELOW_DATA = {"aiayn.config", "aiayn.errors", "aiayn.jsonfile", "aiayn.outfile"}


def imports_outside(graph: dict[str, set[str]], package: str, allowed: set[str]) -> dict[str, list[str]]:
    """{module of `package`: the aiayn modules it imports that are neither in `package` nor
    `allowed`}, for the modules that import any."""
    inside = lambda name: name == package or name.startswith(package + ".")  # noqa: E731
    found = {
        name: sorted(t for t in targets if not inside(t) and t not in allowed)
        for name, targets in graph.items()
        if inside(name)
    }
    return {name: targets for name, targets in found.items() if targets}


def test_the_data_stage_imports_nothing_above_it():
    """Data flows data -> model -> checkpoints: `aiayn.data` uses only the config, errors and
    file helpers, never the model, the checkpoints or the trainer (`prepare --vocab-from`
    reads a checkpoint's vocabularies through `data.checkpoint_vocabs`)."""
    graph = import_graph(module_files())
    assert "aiayn.data.prepare" in graph
    assert imports_outside(graph, "aiayn.data", BELOW_DATA) == {}
    graph["aiayn.data.prepare"] = graph["aiayn.data.prepare"] | {"aiayn.checkpoint"}
    assert imports_outside(graph, "aiayn.data", BELOW_DATA) == {"aiayn.data.prepare": ["aiayn.checkpoint"]}


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

