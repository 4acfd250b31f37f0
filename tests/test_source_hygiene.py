"""What `src/` may not hold (issue "One readable core"): measured figures, dates, run names,
commit ids and machine names belong in benchmarks/ and git history, not in the code a
reader studies (Python, and the web page's JS, HTML and CSS alike); and the core (`model/`,
`decode/`, the training loss) is stock PyTorch that never reaches the fast path. The core's
imports are read on the import graph (`test_imports.py`), so no alias, `from` import or
module in between hides a private op."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from test_imports import import_graph, imports, imported_names, module_files

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "aiayn"
TEXT_SUFFIXES = (".py", ".js", ".html", ".css")
LOSS = SRC / "loss.py"  # the training loss, the core's third part
CORE = [SRC / "model", SRC / "decode", LOSS]

FORBIDDEN = {
    "a date": r"(?<!\d)20\d\d-\d\d-\d\d(?!\d)",  # also in a stamp: _2026-11-26T1114Z
    "a commit id": r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
    "a machine or CPU model": r"(?i)\b(Xeon|EPYC|Ryzen|Threadripper|Zen ?\d|Core i[3579]|"
    r"(Sapphire|Emerald|Granite) Rapids|(Cooper|Ice|Cascade) Lake|Skylake|Genoa|Turin|Graviton|"
    r"H100|H200|A100|V100|KVM|vCPUs?)\b|\d+-core\b",
    "a run name": r"runs/bench|\bruns? [A-Z](-[A-Z])?\b",
    "a timing": r"\d(\.\d+)?\s?(ms|µs|us|ns|s|secs?|seconds|mins?|minutes|hours)\b"
    r"|\b(GFLOP|TFLOP|tokens)/s\b|in-process A/B",
    "a speed-up": r"\d(\.\d+)?[x×](?=[\s,.;:)]|$)|\d(\.\d+)?\s?[x×%] (faster|slower)",
}
# Each pattern against the strings it was written for (issue 43 lists those that got through).
CAUGHT = {
    "a date": ["measured on 2026-11-25", "attention_window_2026-11-26T1114Z_4310f5e"],
    "a commit id": ["since c96d989"],
    "a machine or CPU model": ["on the AMD EPYC", "a 16-core machine", "on an epyc", "Ryzen 9",
                               "Zen 5", "Xeon with AMX", "an H100"],
    "a run name": ["runs/bench-multi30k-v4"],
    "a timing": ["3.6 ms where the two products take 1.6", "in 56.0 min", "12 s a step",
                 "1,200 tokens/s"],
    "a speed-up": ["5.79x at 32 clients", "2.1× faster", "3x.", "20 % slower"],
}  # fmt: skip
# What must pass: text of the kind src/ holds.
PASSED = ["u8 x s8 products add up in 32 bits", "sec. 3.5", "(batch, heads, tgt_len, d_k)",
          "d_model 512, 8 heads", "a 16-bit random mask", "max_time_minutes", "0x7f"]  # fmt: skip
# A CSS animation's or transition's own duration ("animation: spin 0.8s") is a setting of the
# page, not a timing: such declarations are left out before the patterns are applied.
CSS_DURATIONS = re.compile(r"\b(animation|transition)(-duration)?\s*:[^;]*")


def sources() -> list[Path]:
    """Every text file of `src/`: the Python, and the web page's JS, HTML and CSS."""
    return sorted(p for p in (ROOT / "src").rglob("*") if p.suffix in TEXT_SUFFIXES
                  and "__pycache__" not in p.parts and ".egg-info" not in str(p))  # fmt: skip


@pytest.mark.parametrize("what", list(FORBIDDEN))
def test_src_names_no_dates_runs_commits_machines_or_timings(what):
    pattern = re.compile(FORBIDDEN[what])
    found = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in sources()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(CSS_DURATIONS.sub("", line))
    ]
    assert not found, f"{what} in src/ (figures go to benchmarks/):\n" + "\n".join(found)


def test_the_patterns_catch_what_they_are_for_and_pass_what_src_holds():
    assert {p.suffix for p in sources()} == set(TEXT_SUFFIXES)  # not only the Python
    for what, samples in CAUGHT.items():
        assert [s for s in samples if not re.search(FORBIDDEN[what], s)] == [], what
    for text in PASSED:
        assert [w for w, pattern in FORBIDDEN.items() if re.search(pattern, text)] == [], text
    css = "border-radius: 50%; animation: spin 0.8s linear infinite; measured in 0.8s"
    assert re.search(FORBIDDEN["a timing"], CSS_DURATIONS.sub("", css)).group() == "0.8s"


# --- the core, on the import graph -----------------------------------------------------------
# Dotted names the core may not reach however imported: private ops, hand-written backward
# passes (autograd.Function), the fast path.
BANNED = ("torch.ops", "torch._C", "torch.autograd.Function", "torch.autograd.function",
          "aiayn.fast")  # fmt: skip
BANNED_TEXT = re.compile(r"cpuinfo|cpu_vendor|is_autocast")  # vendor checks, autocast branches
FAST_ENTRIES = ("aiayn.fast.for_training", "aiayn.fast.for_inference")


def _dotted(node: ast.AST) -> str | None:
    """'a.b.c' for the expression a.b.c, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def used_names(name: str, path: Path) -> set[str]:
    """Every dotted name module `name` (at `path`) imports or reaches through what it
    imported: `import torch as t; t.ops.x` gives torch.ops.x, `from torch import ops` gives
    torch.ops, `getattr(t, "_C")` gives torch._C."""
    bound = {local: dotted for dotted, local in imports(name, path) if local}
    names = imported_names(name, path)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        chain = _dotted(node) if isinstance(node, ast.Attribute) else None
        if isinstance(node, ast.Call) and _dotted(node.func) == "getattr" and len(node.args) > 1:
            target, attr = node.args[:2]
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                chain = f"{_dotted(target)}.{attr.value}"
        head, _, rest = (chain or "").partition(".")
        if head in bound:
            names.add(f"{bound[head]}.{rest}" if rest else bound[head])
    return names


def _banned(names: set[str], banned: tuple[str, ...] = BANNED) -> list[str]:
    return sorted(n for n in names if any(n == b or n.startswith(b + ".") for b in banned))


def core_modules(files: dict[str, Path]) -> list[str]:
    core = [c for c in CORE if c is not None]
    return sorted(m for m, p in files.items()
                  if any(p == c or p.is_relative_to(c) and c.is_dir() for c in core))  # fmt: skip


def reachable(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    """`start`, their packages' `__init__`s (importing a module runs them) and every module
    that importing them runs."""
    seen: set[str] = set()
    todo = [".".join(m.split(".")[:i]) for m in start for i in range(1, m.count(".") + 2)]
    while todo:
        module = todo.pop()
        if module in graph and module not in seen:
            seen.add(module)
            todo += graph[module]
    return seen


def test_the_core_reaches_no_private_op_backward_pass_vendor_check_or_fast_path():
    """On the import graph: the core's modules and every aiayn module they import, directly
    or through others, name no private op, `autograd.Function`, `/proc/cpuinfo` or
    `aiayn.fast`, however imported."""
    assert LOSS.is_file(), "the training loss: src/aiayn/loss.py"
    files = module_files(SRC)
    core = core_modules(files)
    assert "aiayn.model.attention" in core and "aiayn.decode.search" in core
    modules = reachable(import_graph(files), core)
    assert "aiayn.fast" not in modules, "the core imports aiayn.fast"
    found = {m: _banned(used_names(m, files[m])) for m in sorted(modules)}
    assert {m: names for m, names in found.items() if names} == {}
    texts = [f"{files[m].relative_to(SRC)}:{n}" for m in sorted(modules)
             for n, line in enumerate(files[m].read_text(encoding="utf-8").splitlines(), 1)
             if BANNED_TEXT.search(line)]  # fmt: skip
    assert texts == []


def test_the_core_check_sees_aliases_from_imports_getattr_and_modules_in_between(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    cases = {
        "alias": "import torch as t\nx = t.ops.mkldnn._linear_pointwise\n",
        "from_import": "from torch import ops\n",
        "getattr": "import torch\nc = getattr(torch, '_C')\n",
        "function": "from torch import autograd\nclass F(autograd.Function):\n    pass\n",
        "fast_user": "from pkg import fast\nfast.apply()\n",
        "clean": "import torch\nfrom torch import nn\ny = torch.nn.functional.linear\n",
    }
    for name, text in {**cases, "__init__": "", "fast": "", "middle": "from pkg import fast\n",
                       "core": "import pkg.middle\n"}.items():  # fmt: skip
        (package / f"{name}.py").write_text(text)
    files = module_files(package)
    found = {n: _banned(used_names(f"pkg.{n}", files[f"pkg.{n}"]), (*BANNED, "pkg.fast"))
             for n in cases}  # fmt: skip
    alias = ["torch.ops", "torch.ops.mkldnn", "torch.ops.mkldnn._linear_pointwise"]  # each node
    assert found == {"alias": alias, "from_import": ["torch.ops"],
                     "getattr": ["torch._C"], "function": ["torch.autograd.Function"],
                     "fast_user": ["pkg.fast", "pkg.fast.apply"], "clean": []}  # fmt: skip
    assert "pkg.fast" in reachable(import_graph(files), ["pkg.core"])  # through pkg.middle


def test_only_the_fast_paths_two_entries_are_used_outside_it():
    """The trainer and inference reach the fast path through
    `fast.for_training(...)` and `fast.for_inference(...)` only, so a reader sees at the call
    site, in one line, where it is applied. Any other name of `aiayn.fast` used outside
    `src/aiayn/fast/` is a second door."""
    files = module_files(SRC)
    assert all(hasattr(__import__("aiayn.fast", fromlist=["x"]), e.rpartition(".")[2])
               for e in FAST_ENTRIES)  # fmt: skip
    others = {}
    for module, path in sorted(files.items()):
        if module == "aiayn.fast" or module.startswith("aiayn.fast."):
            continue
        names = {n for n in used_names(module, path) if n.startswith("aiayn.fast.")}
        wrong = sorted(n for n in names if not n.startswith(FAST_ENTRIES))
        if wrong:
            others[module] = wrong
    assert others == {}


def test_the_fast_path_reaches_no_trainer():
    """The fast path imports only the core and its own pieces: no module of `fast/`, nor any
    module importing one of them runs, is the trainer's (`aiayn.train`)."""
    files = module_files(SRC)
    fast = [m for m in files if m == "aiayn.fast" or m.startswith("aiayn.fast.")]
    assert "aiayn.fast.loss" in fast
    modules = reachable(import_graph(files), fast)
    assert "aiayn.loss" in modules  # the core's loss, which the fast loss reuses
    assert sorted(m for m in modules if m.startswith("aiayn.train")) == []


def test_the_core_stays_small_enough_to_read_in_an_afternoon():
    model = sum(len(f.read_text().splitlines()) for f in (SRC / "model").rglob("*.py"))
    loss = len(LOSS.read_text().splitlines())
    # Restricted self-attention (sec. 4, `model/window.py`) included; the decoding cache is
    # the textbook one (the shared cache is a fast piece, `fast/kv_cache.py`).
    assert model <= 620 and loss <= 120, (model, loss)
