"""docs/reliability.md cannot rot: every row names tests, and every named test exists."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
NODE = re.compile(r"`(tests/(?:\w+/)*test_\w+\.py)::(test_\w+)`")  # subfolders too

# What issue 8 asks the table to cover, as words some row must contain (any case).
REQUIRED = [
    "missing file", "empty file", "unreadable", "different line counts", "invalid UTF-8",
    "NUL", "control characters", "1-MB line", "whitespace-only", "CRLF", "BOM",
    "unknown or mistyped key", "impossible model", "truncated weights", "another architecture",
    "missing vocabulary", "pickle", "learned positions", "memory allows", "SIGKILL", "SIGINT",
    "disk full", "NaN loss", "rank dying",
    # issue 43: the exports
    "cannot represent", "mid-write", "existing OUT",
]  # fmt: skip


def table_rows() -> list[str]:
    """The body rows of every table: not the header line, nor the |---| line under it."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    headers = ("| input |", "| fault |")
    return [line for line in lines if line.startswith("|") and not line.startswith(headers)
            and not re.match(r"\|\s*-", line)]  # fmt: skip


@functools.lru_cache(maxsize=None)
def defined_tests(path: str) -> frozenset[str]:
    """Top-level `test_*` functions of a test module, read without importing it."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return frozenset(
        node.name for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    )  # fmt: skip


def missing_tests(rows: list[str]) -> list[str]:
    """Rows naming no test, and named tests that are not defined where the row says."""
    problems = []
    for row in rows:
        nodes = NODE.findall(row)
        if not nodes:
            problems.append(f"names no test: {row}")
        for path, name in nodes:
            if not (ROOT / path).is_file() or name not in defined_tests(path):
                problems.append(f"{path}::{name}")
    return problems


def test_every_row_names_tests_that_exist():
    rows = table_rows()
    assert len(rows) >= 40  # the parser found the tables
    assert missing_tests(rows) == []


def test_the_table_covers_every_case_the_issue_lists():
    rows = " ".join(table_rows()).lower()
    assert [case for case in REQUIRED if case.lower() not in rows] == []


def test_the_check_finds_renamed_tests_helpers_and_rows_without_a_test():
    bad = [
        "| a | b | `tests/test_corpus.py::test_missing_file_was_renamed` |",
        "| a | b | `tests/test_nowhere.py::test_missing_file_is_named` |",
        "| a | b | `tests/test_corpus.py::test_write` |",  # `write` is a helper, not a test
        "| a | b | no test |",
        "| a | b | `tests/fast/test_int8.py::test_int8_was_renamed` |",  # in a subfolder
        "| a | b | `tests/test_corpus.py::test_missing_file_is_named` |",  # fine
        "| a | b | `tests/fast/test_int8.py::test_int8_is_refused_on_cuda_and_for_half_precision` |",
    ]
    assert missing_tests(bad) == [
        "tests/test_corpus.py::test_missing_file_was_renamed",
        "tests/test_nowhere.py::test_missing_file_is_named", "tests/test_corpus.py::test_write",
        "names no test: | a | b | no test |", "tests/fast/test_int8.py::test_int8_was_renamed",
    ]  # fmt: skip
