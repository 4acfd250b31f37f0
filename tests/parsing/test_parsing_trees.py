"""Reading Penn Treebank trees: layouts, clear errors (file and line), cleaning."""

from __future__ import annotations

import pytest

from aiayn.errors import DataError
from aiayn.parsing.trees import Tree, base_label, clean, parse_trees, read_trees, with_root

MRG = """( (S
    (NP-SBJ (NNP John) )
    (VP (VBZ has)
      (NP (DT a) (NN dog) ))
    (. .) ))
( (S (NP-SBJ-1 (PRP He)) (VP (VBD left) (S (NP-SBJ (-NONE- *-1)) (VP (TO to) (VP (VB go))))) (. .)) )
"""


def test_reads_mrg_layout_and_one_tree_per_line_alike(tmp_path):
    path = tmp_path / "wsj_0001.mrg"
    path.write_text(MRG)
    trees = read_trees(path)
    assert len(trees) == 2
    # the unlabeled outer bracket is TOP; labels and words as written
    john = "(TOP (S (NP-SBJ (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))"
    assert str(trees[0]) == john
    one_per_line = tmp_path / "lines.txt"
    one_per_line.write_text("".join(f"{t}\n" for t in trees))
    assert [str(t) for t in read_trees(one_per_line)] == [str(t) for t in trees]
    # a directory: every .mrg below it, in path order (the treebank's sections, then files)
    for section, text in (("03", "(S (NN x))\n"), ("02", MRG)):
        (tmp_path / "wsj" / section).mkdir(parents=True)
        (tmp_path / "wsj" / section / f"wsj_{section}00.mrg").write_text(text)
    (tmp_path / "wsj" / "README").write_text("not a tree")
    assert [t.words() for t in read_trees(tmp_path / "wsj")] == [["John", "has", "a", "dog", "."],
                                                         ["He", "left", "*-1", "to", "go", "."],
                                                         ["x"]]


@pytest.mark.parametrize("text, message", [
    ("(S (NP (NN dog))\n(VP (VBZ barks))", "line 1: the tree opened here is never closed"),
    ("(S (NN a))\n\n(S (NN b)))", "line 3: ')' closes no open bracket"),
    ("(S (NN a))\n( )", "line 2: empty tree '()'"),
    ("(S (NN a)\n  (NP ))", "line 2: empty tree '(NP)'"),
    ("(S (NN a))\nstray", "line 2: 'stray' is outside any tree"),
    ("(S (NN a)\n (NP the (NN dog)))", "line 2: (NP ...) mixes the word 'the'"),
])  # fmt: skip
def test_bad_trees_are_clear_errors_naming_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.mrg"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        read_trees(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_files_without_trees_are_errors(tmp_path):
    blank = tmp_path / "blank.mrg"
    blank.write_text("\n  \n")
    with pytest.raises(DataError, match="holds no tree"):
        read_trees(blank)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(DataError, match="without .mrg files"):
        read_trees(tmp_path / "empty_dir")


def test_clean_removes_function_tags_traces_and_emptied_constituents():
    tree = read_one(MRG.splitlines()[-1])
    assert str(clean(tree)) == (
        "(TOP (S (NP (PRP He)) (VP (VBD left) (S (VP (TO to) (VP (VB go))))) (. .)))"
    )
    assert [base_label(x) for x in ("NP-SBJ-1", "NP=2", "PRT|ADVP", "-NONE-", "-LRB-")] == [
        "NP", "NP", "PRT", "-NONE-", "-LRB-"]  # fmt: skip
    only_trace = Tree("S", [Tree("NP", [Tree("-NONE-", ["*"])])])
    assert clean(only_trace) is None
    assert with_root(Tree("S", [Tree("NN", ["x"])])).label == "TOP"


def read_one(text: str) -> Tree:
    (tree,) = parse_trees(text)
    return tree


def test_written_trees_read_back_the_same():
    for line in MRG.splitlines()[-1:]:
        tree = read_one(line)
        assert str(read_one(str(tree))) == str(tree)
