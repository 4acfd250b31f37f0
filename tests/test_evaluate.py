"""Scores: sacreBLEU as the `sacrebleu` command computes it, and the paper's tokenized BLEU
checked against a value computed by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.cli import main
from aiayn.errors import DataError
from aiayn.evaluate import split_compounds, tokenized_bleu
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

HYPS = [
    "The cat sat on the mat.",
    "Der schnelle braune Fuchs springt über den faulen Hund!",
    "It's a rich-text format, isn't it?",
    "",
    "Zwei Hunde spielen im Schnee.",
]
REFS = [
    "The cat is sitting on the mat.",
    "Der schnelle Fuchs springt über den faulen Hund.",
    "It is a rich-text format, is it not?",
    "Ein Satz.",
    "Zwei Hunde spielen im Schnee.",
]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _sacrebleu_cli(*args: str) -> float:
    exe = Path(sys.executable).with_name("sacrebleu")
    out = subprocess.run([str(exe), *args, "-b", "-w", "4"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip())


def test_scores_equal_the_sacrebleu_command_line(tmp_path, capsys):
    hyp, ref = _write(tmp_path / "hyp.de", HYPS), _write(tmp_path / "ref.de", REFS)
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert round(report["sacrebleu"]["score"], 4) == _sacrebleu_cli(str(ref), "-i", str(hyp))
    chrf = _sacrebleu_cli(str(ref), "-i", str(hyp), "-m", "chrf")
    assert round(report["chrf"]["score"], 4) == chrf
    assert report["sacrebleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert report["tokenized_bleu"]["lang"] == "de"  # from the suffix of --ref

    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[-1] == f"BLEU {report['sacrebleu']['score']:.2f}"
    assert any(line.startswith("tokenized BLEU") for line in text)
    assert any("tok:13a" in line for line in text)


def test_compound_splitting_is_tensor2tensors_perl_substitution():
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"  # matches do not overlap
    assert split_compounds("Aix-en-Provence") == "Aix ##AT##-##AT## en ##AT##-##AT## Provence"
    assert split_compounds("- x -y z-") == "- x -y z-"


def test_tokenized_bleu_by_hand():
    hyps = ["the rich-text format is fine.", "ein Haus"]
    refs = ["the rich-text format is good.", "ein großes Haus"]
    # Moses + compound splitting: "the rich ##AT##-##AT## text format is fine ." (8 tokens)
    # against "the rich ##AT##-##AT## text format is good ." (8), and "ein Haus" (2) against
    # "ein großes Haus" (3). Clipped n-gram matches / hypothesis n-grams, over the corpus:
    #   1-grams: 7 + 2 = 9 / 10      (all but "fine"; "ein", "Haus")
    #   2-grams: 5 + 0 = 5 / 8       (the rich, rich ##AT##, ##AT## text, text format, format is)
    #   3-grams: 4 + 0 = 4 / 6
    #   4-grams: 3 + 0 = 3 / 5
    # BP = exp(1 - 11 / 10) since the hypotheses are shorter (10 tokens) than the refs (11).
    expected = 100 * math.exp(1 - 11 / 10) * (9 / 10 * 5 / 8 * 4 / 6 * 3 / 5) ** 0.25  # 62.32
    result = tokenized_bleu(hyps, refs, lang="de")
    assert result.score == pytest.approx(expected, abs=1e-6)
    assert result.score == pytest.approx(62.3184, abs=1e-4)
    # Without splitting, "rich-text" is one token and fewer n-grams match.
    assert tokenized_bleu(hyps, refs, lang="de", compounds=False).score < expected


def test_evaluate_translates_with_a_checkpoint_and_writes_the_hypotheses(tmp_path, capsys):
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    src, ref = _write(tmp_path / "src.en", REFS), _write(tmp_path / "ref.de", REFS)
    hyp_out = tmp_path / "hyp.de"
    args = ["evaluate", "--checkpoint", str(ckpt), "--src", str(src), "--ref", str(ref)]
    assert main([*args, "--hyp-out", str(hyp_out), "--beam", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sentences"] == len(REFS)
    assert len(hyp_out.read_text(encoding="utf-8").split("\n")) == len(REFS) + 1
    # the same hypotheses scored from the file give the same figures
    assert main(["evaluate", "--hyp", str(hyp_out), "--ref", str(ref), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == report


def test_hyp_out_may_not_be_an_input_and_must_be_writable_before_translating(
    tmp_path, capsys, monkeypatch
):
    src, ref = _write(tmp_path / "src.en", REFS), _write(tmp_path / "ref.de", REFS)
    before = ref.read_bytes()
    args = ["evaluate", "--hyp", str(ref), "--ref", str(ref)]
    assert main([*args, "--hyp-out", str(ref)]) == 2  # it would overwrite the references
    assert "is also an input" in capsys.readouterr().err and ref.read_bytes() == before
    # an --hyp-out that cannot be written fails before any translating starts
    translated = []
    monkeypatch.setattr("aiayn.cli._translator", lambda args: translated.append(args))
    args = ["evaluate", "--checkpoint", str(tmp_path), "--src", str(src), "--ref", str(ref)]
    assert main([*args, "--hyp-out", str(tmp_path / "no-dir" / "hyp.de")]) == 2
    assert "no-dir/hyp.de: No such file or directory" in capsys.readouterr().err
    assert translated == []
    # a run that fails after that check leaves an existing --hyp-out as it was
    kept = _write(tmp_path / "kept.de", HYPS)

    def failing(args):
        raise DataError("the model failed")

    monkeypatch.setattr("aiayn.cli._translator", failing)
    assert main([*args, "--hyp-out", str(kept)]) == 2
    assert kept.read_text(encoding="utf-8") == "".join(h + "\n" for h in HYPS)


def test_mismatched_line_counts_are_an_error(tmp_path, capsys):
    hyp, ref = _write(tmp_path / "h", HYPS[:2]), _write(tmp_path / "r", REFS)
    assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref)]) == 2
    assert "2 hypotheses but 5 references" in capsys.readouterr().err


def test_sources_and_references_of_different_counts_fail_before_translating(
    tmp_path, capsys, monkeypatch
):
    src, ref = _write(tmp_path / "src.en", REFS[:3]), _write(tmp_path / "ref.de", REFS)
    translated = []
    monkeypatch.setattr("aiayn.cli._translator", lambda args: translated.append(args))
    args = ["evaluate", "--checkpoint", str(tmp_path), "--src", str(src), "--ref", str(ref)]
    assert main(args) == 2
    assert f"{src} has 3 lines but {ref} has 5" in capsys.readouterr().err
    assert translated == []


def test_gzip_references_score_as_plain_ones(tmp_path, capsys):
    """Test sets ship gzipped (Multi30k's do): evaluate reads them as the corpus reader does."""
    import gzip

    hyp = _write(tmp_path / "h", HYPS)
    with gzip.open(tmp_path / "r.de.gz", "wt", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in REFS))
    scores = []
    for ref in (_write(tmp_path / "r.de", REFS), tmp_path / "r.de.gz"):
        assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
        scores.append(json.loads(capsys.readouterr().out))
    assert scores[0] == scores[1] and scores[0]["sentences"] == len(REFS)
    assert scores[1]["tokenized_bleu"]["lang"] == "de"  # the suffix before .gz
