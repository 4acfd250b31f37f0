"""`aiayn prepare parse`, `aiayn parse`, `aiayn evaluate --task parse` and the parse demo."""

from __future__ import annotations

import io
import json
import re

import pytest
import torch

from aiayn.cli import main
from aiayn.config import load_config
from aiayn.data.vocab import Vocab
from aiayn.parsing.demo_treebank import demo_treebank
from aiayn.parsing.linearize import linearize
from aiayn.parsing.trees import read_trees, write_trees

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def bank():
    return demo_treebank(300, 20, 20, seed=9)


def write_bank(bank, folder):
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in ("train", "valid", "test"):
        files[name] = folder / f"{name}.mrg"
        write_trees(getattr(bank, name), files[name])
    return files


def test_prepare_parse_writes_the_prepared_directory_and_the_split_texts(tmp_path, bank):
    files = write_bank(bank, tmp_path / "bank")
    out = tmp_path / "data"
    args = ["prepare", "parse", "--train", str(files["train"]), "--valid", str(files["valid"]),
            "--test", str(files["test"]), "--out", str(out), "--vocab-size", "400", "--quiet"]
    assert main(args) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["src_lang"], manifest["tgt_lang"]) == ("words", "tree")
    assert [manifest["splits"][s]["read"] for s in ("train", "valid", "test")] == [300, 20, 20]
    texts = out / "parse"
    words = (texts / "test.words").read_text().splitlines()
    assert words == [" ".join(t.words()) for t in bank.test]
    targets = (texts / "train.tree").read_text().splitlines()
    assert targets == [linearize(t) for t in bank.train]
    assert [str(t) for t in read_trees(texts / "valid.gold")] == [str(t) for t in bank.valid]


def test_prepared_vocabulary_keeps_tree_tokens_whole(tmp_path, bank):
    # sentencepiece's default splits "(NP" into "(" + "NP" (letters and brackets are other
    # scripts): the targets were 1.6 times as long as the trees, each closing label spelled
    # out. The frequent bracket tokens are one piece each (rare ones may stay two in a
    # vocabulary this small).
    files = write_bank(bank, tmp_path / "bank")
    out = tmp_path / "data"
    assert main(["prepare", "parse", "--train", str(files["train"]), "--valid", str(files["valid"]),
                 "--out", str(out), "--vocab-size", "400", "--quiet"]) == 0  # fmt: skip
    vocab = Vocab.load(out / "vocab.model")
    for token in ("(S", ")S", "(NP", ")NP", "(VP", ")VP", "(PP", ")PP", "(SBAR", ")SBAR"):
        assert [vocab.piece(i) for i in vocab.encode(token)] == ["\u2581" + token]
    targets = [linearize(tree) for tree in bank.valid]
    pieces = sum(len(ids) for ids in vocab.encode_batch(targets))
    assert pieces < 1.1 * sum(len(target.split()) for target in targets)


def test_prepare_parse_refuses_missing_or_foreign_options(tmp_path, capsys):
    assert main(["prepare", "parse", "--train", "x.mrg", "--out", str(tmp_path / "o")]) == 2
    assert "parse: give --train TREES --valid TREES" in capsys.readouterr().err
    bad = tmp_path / "bad.mrg"
    bad.write_text("(S (NN a)\n")
    assert main(["prepare", "parse", "--train", str(bad), "--valid", str(bad),
                 "--out", str(tmp_path / "o")]) == 2  # fmt: skip
    assert f"{bad}: line 1: the tree opened here is never closed" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_evaluate_parse_scores_tree_files(tmp_path, bank, capsys):
    gold = tmp_path / "gold.mrg"
    write_trees(bank.test, gold)
    assert main(["evaluate", "--task", "parse", "--hyp", str(gold), "--ref", str(gold)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "F1 100.00"
    flat = tmp_path / "flat.txt"  # every word straight under one S: only the S brackets match
    flat.write_text("".join(
        "(TOP (S " + " ".join(f"({p.label} {p.children[0]})" for p in t.preterminals()) + "))\n"
        for t in bank.test))  # fmt: skip
    assert main(["evaluate", "--task", "parse", "--hyp", str(flat), "--ref", str(gold),
                 "--json"]) == 0  # fmt: skip
    figures = json.loads(capsys.readouterr().out)["all"]
    assert figures["precision"] == 100.0 and figures["matched"] == len(bank.test)
    short = tmp_path / "short.txt"
    short.write_text(flat.read_text().split("\n", 1)[1])
    assert main(["evaluate", "--task", "parse", "--hyp", str(short), "--ref", str(gold)]) == 2
    assert f"{gold} has 20 trees but there are 19 parses" in capsys.readouterr().err


def test_the_parsing_recipe_is_the_papers():
    config = load_config("configs/wsj_parsing.yaml")
    model = config.model
    assert (model.n_layers, model.d_model, model.vocab_size) == (4, 1024, 16000)
    assert (config.decode.beam, config.decode.alpha, config.decode.max_len_offset) == (21, 0.3, 300)


# A budget of seconds: greedy decoding, a short maximum output; the same pipeline otherwise.
TINY = ["model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.n_layers=1",
        "decode.beam=1", "decode.max_len_offset=60", "train.warmup=60", "data.max_tokens=1500",
        "train.update_tokens=1500", "train.save_every_steps=30", "train.valid_every_steps=1000"]
# An untrained model's output gives flat trees with no scored bracket (F1 0); 150
# updates of this tiny model learn the S over each sentence and some NPs and VPs inside.
TRAINED_STEPS, FLOOR = 150, 15.0


@pytest.mark.slow
def test_parse_demo_pipeline_learns_past_what_an_untrained_model_reaches(tmp_path, capsys):
    from aiayn.parsing.demo import FAST_SIZES, run_parse_demo

    gold = demo_treebank(**FAST_SIZES).test
    untrained = run_parse_demo(tmp_path / "untrained", fast=True,
                               overrides=TINY + ["train.max_steps=6", "train.save_every_steps=2",
                                                 "train.lr_scale=0"])  # fmt: skip
    trained = run_parse_demo(tmp_path / "trained", fast=True,
                             overrides=TINY + [f"train.max_steps={TRAINED_STEPS}"])
    assert untrained.f1 < FLOOR <= trained.f1, (untrained.f1, trained.f1)
    assert re.fullmatch(r"F1 \d+\.\d\d", capsys.readouterr().out.strip().splitlines()[-1])

    # `aiayn evaluate --task parse` decodes the same way and so gives the demo's score
    texts, parses = tmp_path / "trained" / "data" / "parse", tmp_path / "parses.txt"
    assert main(["evaluate", "--task", "parse", "--checkpoint", str(trained.checkpoint),
                 "--src", str(texts / "test.words"), "--ref", str(texts / "test.gold"),
                 "--hyp-out", str(parses)]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines()[-1] == f"F1 {trained.f1:.2f}"
    assert len(parses.read_text().splitlines()) == len(gold)

    # `aiayn parse` with that checkpoint: one tree per line, over exactly the input words
    sentences = ["The dog sleeps .", "", "Today my old friends read a book ."]
    stdin = io.StringIO("".join(s + "\n" for s in sentences))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", stdin)
        assert main(["parse", "--checkpoint", str(trained.checkpoint)]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == ""
    for sentence, line in zip(sentences[::2], lines[::2]):
        (tree,) = read_trees_text(line, tmp_path)
        assert tree.words() == sentence.split()


def read_trees_text(text: str, folder):
    path = folder / "one.txt"
    path.write_text(text + "\n")
    return read_trees(path)


def test_demo_task_chooses_the_demo_and_its_default_directory(monkeypatch):
    calls = []
    monkeypatch.setattr("aiayn.parsing.demo.run_parse_demo",
                        lambda out, fast: calls.append(("parse", out, fast)))
    monkeypatch.setattr("aiayn.demo.run_demo",
                        lambda out, fast, reference=False: calls.append(("bleu", out, fast)))
    assert main(["demo", "--task", "parse", "--fast"]) == 0
    assert main(["demo", "--task", "parse", "--out", "elsewhere"]) == 0
    assert main(["demo"]) == 0  # the ordinary demo, as before
    assert calls == [("parse", "runs/demo-parse", True), ("parse", "elsewhere", False),
                     ("bleu", "runs/demo", False)]
