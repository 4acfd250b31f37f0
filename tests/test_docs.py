"""The documentation site (mkdocs.yml, docs/) cannot rot: `mkdocs build --strict` passes (a
broken link or anchor, a page left out of the nav, an unresolved reference fails it), and the
API reference lists, each with a docstring, every public function and class (and the public
methods of its classes) of each module it documents whole, and every object it names alone;
those modules include every `aiayn` module that the Python examples of the README and the
pages import."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)  # mkdocstrings: document this object
IMPORT = re.compile(r"^\s*(?:from\s+(aiayn[\w.]*)\s+import|import\s+(aiayn[\w.]*))", re.M)


def reference_targets() -> list[str]:
    """What the API pages document, in their order: modules and single objects."""
    pages = sorted((ROOT / "docs" / "api").glob("*.md"))
    return [name for page in pages for name in DIRECTIVE.findall(page.read_text(encoding="utf-8"))]


def module_file(dotted: str) -> Path | None:
    """src/aiayn/x/y.py (or its package's __init__.py) for 'aiayn.x.y'; None if no module."""
    path = ROOT / "src" / Path(*dotted.split("."))
    for file in (path / "__init__.py", path.with_suffix(".py")):
        if file.is_file():
            return file
    return None


def public_names(source: str) -> dict[str, bool]:
    """Each public function and class defined in a module's source, and each public method
    of those classes ('Class.method'): whether it has a docstring. Imported names are not
    the module's own; module constants are data, documented where they are taken."""
    found: dict[str, bool] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            found[node.name] = ast.get_docstring(node) is not None
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                        found[f"{node.name}.{item.name}"] = ast.get_docstring(item) is not None
    return found


def documented_names() -> dict[str, bool]:
    """Every full name the reference must list: name -> whether it has a docstring."""
    names: dict[str, bool] = {}
    for target in reference_targets():
        file = module_file(target)
        if file is not None:  # a module, documented whole
            own = public_names(file.read_text(encoding="utf-8"))
            names.update((f"{target}.{name}", doc) for name, doc in own.items())
            continue
        module, _, name = target.rpartition(".")  # one function or class, named alone
        file = module_file(module)
        assert file is not None, f"docs/api: '::: {target}' names no module of src/"
        own = public_names(file.read_text(encoding="utf-8"))
        assert name in own, f"docs/api: '::: {target}': {module} defines no public {name}"
        names.update((f"{module}.{k}", doc) for k, doc in own.items()
                     if k == name or k.startswith(name + "."))  # fmt: skip
    return names


def example_imports() -> set[str]:
    """The aiayn modules imported by the ```python blocks of the README and the pages."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    text = "".join(f.read_text(encoding="utf-8") for f in files)
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return {a or b for block in blocks for a, b in IMPORT.findall(block)}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's notice about MkDocs 2
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_site_builds_in_strict_mode_with_every_page(site):
    for page in ("index", "train", "translate", "serve", "export", "parse", "attention",
                 "heads", "experiments", "reproduce", "reliability", "code-map", "results",
                 "api", "benchmarks"):  # fmt: skip
        assert (site / page / "index.html").is_file() or (site / f"{page}.html").is_file(), page
    assert (site / "serve.png").is_file()
    assert (site / "benchmarks" / "plots" / "table3.png").is_file()
    results = {p.name for p in (ROOT / "benchmarks" / "results").glob("*.json")}
    assert {p.name for p in (site / "benchmarks" / "results").glob("*.json")} == results


def test_every_public_name_of_the_reference_has_a_docstring_and_its_entry(site):
    html = "".join(p.read_text(encoding="utf-8") for p in (site / "api").rglob("*.html"))
    names = documented_names()
    assert len(names) >= 30  # the reference's modules were found
    assert [name for name, doc in names.items() if not doc] == []
    assert [name for name in names if f'id="{name}"' not in html] == []


def test_the_modules_the_examples_import_are_documented_whole():
    imported = example_imports()
    assert {"aiayn.translate", "aiayn.text.documents"} <= imported  # the parser found them
    assert imported - set(reference_targets()) == set()


def test_the_check_finds_undocumented_functions_classes_and_methods():
    source = '''
import os
from x import helper
LIMIT = 3
def documented():
    """Yes."""
def bare(): pass
def _private(): pass
class Thing:
    """Yes."""
    def method(self): pass
    def told(self):
        """Yes."""
    def _hidden(self): pass
'''
    assert public_names(source) == {"documented": True, "bare": False, "Thing": True,
                                    "Thing.method": False, "Thing.told": True}  # fmt: skip
