"""Translator and `aiayn translate`: a checkpoint in, one line out per line in, always."""

from __future__ import annotations

import io
import os
import stat
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aiayn.cli import main
from aiayn.errors import ConfigError
from aiayn.translate import Translator, one_line, translate_stream
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

LINES = [
    "the cat sat on a mat",
    "",
    "   ",
    "der Hund",
    "die Katze sitzt auf einer Matte the cat sat on a mat der Hund die Katze",
    "ünïcödé ✓ 漢字",
    "a",
]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("translate") / "ckpt")


def test_cli_writes_one_line_per_input_line(ckpt, tmp_path):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(LINES), encoding="utf-8")  # no final newline
    assert main(["translate", "--checkpoint", str(ckpt), "-i", str(src), "-o", str(out),
                 "--chunk-lines", "3", "--max-tokens", "16"]) == 0  # fmt: skip
    result = out.read_text(encoding="utf-8").split("\n")
    assert result[-1] == "" and len(result) - 1 == len(LINES)
    assert result[1] == result[2] == ""  # blank in, blank out
    empty_file = tmp_path / "empty.txt"
    empty_file.write_text("", encoding="utf-8")
    args = ["translate", "--checkpoint", str(ckpt), "-i", str(empty_file), "-o", str(out)]
    assert main(args) == 0
    assert out.read_text(encoding="utf-8") == ""


def test_cli_bad_input_is_a_clear_error(ckpt, tmp_path, capsys):
    out = tmp_path / "out.txt"
    args = ["translate", "--checkpoint", str(ckpt), "-o", str(out)]
    assert main([*args, "-i", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt: cannot read (No such file or directory)" in capsys.readouterr().err
    # the line, not an offset in a read buffer; 300 good lines first, so that a chunk of
    # translations is written before the bad line is read
    (tmp_path / "latin1.txt").write_bytes(b"ok\n" * 300 + b"caf\xe9\n")
    out.write_text("yesterday's translations\n", encoding="utf-8")
    assert main([*args, "-i", str(tmp_path / "latin1.txt")]) == 2
    assert "latin1.txt: line 301: invalid UTF-8 at byte 3" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "yesterday's translations\n"  # left whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latin1.txt", "out.txt"]
    new = tmp_path / "new.txt"
    assert main([*args[:-1], str(new), "-i", str(tmp_path / "latin1.txt")]) == 2
    assert not new.exists()  # not created empty
    (tmp_path / "good.txt").write_bytes(b"ok\n" * 300)
    assert main([*args, "-i", str(tmp_path / "good.txt")]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 300
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.txt", "latin1.txt", "out.txt"]


def test_cli_output_through_a_link_a_device_and_with_its_mode(ckpt, tmp_path):
    # The file renamed over the output must be the link's target (the link stays), keep the
    # target's mode, and never take the place of a device such as /dev/null.
    src = tmp_path / "in.txt"
    src.write_text("the cat\n", encoding="utf-8")
    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old\n", encoding="utf-8")
    real.chmod(0o600)
    link.symlink_to(real)
    args = ["translate", "--checkpoint", str(ckpt), "-i", str(src)]
    assert main([*args, "-o", str(link)]) == 0
    assert link.is_symlink() and real.read_text(encoding="utf-8") != "old\n"
    assert real.stat().st_mode & 0o777 == 0o600
    assert main([*args, "-o", os.devnull]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "link.txt", "real.txt"]


def test_cli_refuses_an_output_that_is_its_input_and_names_unwritable_outputs(
    ckpt, tmp_path, capsys
):
    src = tmp_path / "in.txt"
    src.write_text("the cat\nder Hund\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(ckpt), "-i", str(src)]
    assert main([*args, "-o", str(src)]) == 2  # opened for writing, it would be emptied
    assert "is also an input" in capsys.readouterr().err
    assert src.read_text(encoding="utf-8") == "the cat\nder Hund\n"
    assert main([*args, "-o", str(tmp_path / "no-dir" / "out.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aiayn translate: error: ") and "no-dir/out.txt: No such file" in err
    assert main([*args, "-o", str(tmp_path)]) == 2
    assert "Is a directory" in capsys.readouterr().err


def test_cli_names_a_device_it_cannot_use_and_a_chunk_of_no_lines(ckpt, capsys):
    args = ["translate", "--checkpoint", str(ckpt), "--device"]
    assert main([*args, "bogus"]) == 2
    assert "--device='bogus' is not a device; use cpu, cuda or cuda:N" in capsys.readouterr().err
    assert main([*args, "meta"]) == 2
    assert "runs on cpu or cuda devices" in capsys.readouterr().err
    no_lines = ["translate", "--checkpoint", str(ckpt), "--chunk-lines", "0"]
    assert main(no_lines) == 2 and "--chunk-lines must be at least 1" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main([*args, "cuda:1"]) == 2
        assert "--device='cuda:1' but no CUDA GPU is available" in capsys.readouterr().err


def test_cli_refuses_invalid_utf8_on_stdin_under_a_c_locale(ckpt, monkeypatch, capsys):
    # Under a C or POSIX locale Python opens stdin with errors="surrogateescape": the bad
    # byte would reach the tokenizer as a surrogate and fail there, with a traceback.
    stdin = io.TextIOWrapper(io.BytesIO(b"ok\ncaf\xe9\n"), encoding="utf-8",
                             errors="surrogateescape")  # fmt: skip
    monkeypatch.setattr("sys.stdin", stdin)
    assert main(["translate", "--checkpoint", str(ckpt)]) == 2
    assert "stdin: line 2: invalid UTF-8 at byte 3" in capsys.readouterr().err


def test_cli_stops_quietly_when_its_reader_leaves(ckpt, tmp_path):
    # `aiayn translate ... | head -1`: no BrokenPipeError traceback, exit status 141 (SIGPIPE).
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "aiayn", "translate", "--checkpoint", str(ckpt),
         "--chunk-lines", "1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdin.write(("the cat\n" * 2000).encode())
    proc.stdin.close()
    proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == b""


def test_cli_streams_stdin_to_stdout_and_writes_nbest_lists(ckpt, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(LINES) + "\n"))
    assert main(["translate", "--checkpoint", str(ckpt), "--nbest", "3", "--beam", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 * len(LINES)
    for n, line in enumerate(lines):
        index, text, score = line.split(" ||| ")
        assert int(index) == n // 3 and float(score) <= 0.0
    scores = [float(line.rsplit(" ||| ", 1)[1]) for line in lines[:3]]
    assert scores == sorted(scores, reverse=True)
    assert lines[3] == "1 |||  ||| 0.0000"  # an empty line: "" with score 0, K times


def test_a_byte_order_mark_opening_the_input_is_dropped(ckpt):
    translator = Translator.from_checkpoint(ckpt)
    outputs = []
    plain = LINES[0] + "\n" + LINES[2] + "\n"
    for text in ("\ufeff" + plain.replace("\n", "\r\n", 1), plain):
        out = io.StringIO()
        translate_stream(translator, io.StringIO(text, newline=""), out)
        outputs.append(out.getvalue())
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == 2


def test_translations_come_back_in_input_order_whatever_the_batching(ckpt):
    small = Translator.from_checkpoint(ckpt, max_tokens=8)
    large = Translator.from_checkpoint(ckpt, max_tokens=4096)
    together = large.translate(LINES)
    assert small.translate(LINES) == together
    assert [large.translate([line])[0] for line in LINES] == together


@pytest.mark.parametrize("beam", [1, 4])
def test_a_cpu_translator_keeps_its_cache_memory_and_translates_the_same(ckpt, beam):
    kept = Translator.from_checkpoint(ckpt, beam=beam, max_tokens=16)  # several batches
    fresh = Translator.from_checkpoint(ckpt, beam=beam, max_tokens=16)
    fresh.search.buffers = None
    expected = fresh.translate_nbest(LINES)
    def held() -> int:  # bytes kept, read from the buffers' insides
        pairs = kept.search.buffers._buffers.values()
        return sum(b.untyped_storage().nbytes() for pair in pairs for b in pair)

    assert held() == 0
    assert kept.translate_nbest(LINES) == expected
    assert held() > 0
    # Later calls on the kept memory: a store's pair of buffers settles at the sizes the
    # batches need (one may grow once, when its turn comes with a larger store), then stays.
    assert kept.translate_nbest(LINES) == expected
    settled = held()
    assert kept.translate_nbest(LINES) == expected
    assert held() == settled


def test_blank_inputs_do_not_run_the_model(ckpt, monkeypatch):
    translator = Translator.from_checkpoint(ckpt)

    def fail(*args, **kwargs):
        raise AssertionError("the model ran")

    monkeypatch.setattr(translator.model, "encode", fail)
    assert translator.translate(["", " \t "]) == ["", ""]
    assert translator.translate_nbest([""]) == [[("", 0.0)]]


def test_options_override_the_checkpoint_and_are_checked(ckpt):
    greedy = Translator.from_checkpoint(ckpt, beam=1, alpha=0.0, max_len_offset=2)
    assert (greedy.decode.beam, greedy.decode.alpha, greedy.decode.max_len_offset) == (1, 0.0, 2)
    assert len(greedy.translate(LINES)) == len(LINES)
    with pytest.raises(ConfigError, match="nbest"):
        Translator.from_checkpoint(ckpt, beam=2, nbest=3)
    with pytest.raises(ConfigError, match="dtype"):
        Translator.from_checkpoint(ckpt, dtype="float8")


def test_bfloat16_decodes(ckpt):
    translator = Translator.from_checkpoint(ckpt, dtype="bfloat16")
    assert translator.model.tgt_embed.weight.dtype == torch.bfloat16
    nbest = translator.translate_nbest(LINES[:1])[0]
    assert len(nbest) == 1 and nbest[0][1] <= 0.0


def test_inputs_beyond_learned_positions_are_truncated_with_a_warning(tmp_path):
    ckpt = save_tiny_checkpoint(tmp_path / "learned", positional="learned", max_len=12)
    translator = Translator.from_checkpoint(ckpt, max_len_offset=50)
    text = " ".join(["the cat sat on a mat"] * 6)
    n = len(translator.src_vocab.encode(text)) + 1  # + eos
    message = rf"12 learned positions \(model.max_len=12; the longest has {n} tokens"
    with pytest.warns(UserWarning, match=message):
        (out,) = translator.translate([text])
    assert isinstance(out, str)


def test_a_min_len_past_the_maximum_output_length_warns_and_the_maximum_wins(ckpt):
    """A source of n ids (eos included) gives at most n + 3 output tokens (eos included)
    with max_len_offset 3: min_len n + 3 asks for one token too many before eos, so the
    translation ends at the maximum, with a warning that counts the one input concerned
    (not the blank one); min_len n + 2 fits, without a warning."""
    n = len(Translator.from_checkpoint(ckpt).encode(["a"])[0])
    translator = Translator.from_checkpoint(ckpt, max_len_offset=3, min_len=n + 3, beam=2)
    message = rf"^1 input\(s\) allow fewer output tokens than min_len {n + 3} "
    with pytest.warns(UserWarning, match=message):
        found = translator.hypotheses(["a", " "])
    assert len(found[0][0].tokens) == n + 2  # tokens before eos: the maximum, not min_len
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fits = Translator.from_checkpoint(ckpt, max_len_offset=3, min_len=n + 2, beam=2)
        assert len(fits.hypotheses(["a"])[0][0].tokens) == n + 2


def test_one_line_removes_line_breaks():
    assert one_line("a\nb\r\nc") == "a b c"
    assert one_line("") == ""


def test_a_one_megabyte_line_is_truncated_with_a_warning(tmp_path, monkeypatch):
    """Sinusoids extend to any length, attention memory does not: cut at model.max_len."""
    ckpt = save_tiny_checkpoint(tmp_path / "short", max_len=64)
    translator = Translator.from_checkpoint(ckpt, beam=2)
    lengths, encode = [], translator.model.encode

    def recording_encode(src, *args, **kwargs):
        lengths.append(src.shape[1])  # (batch, src_len)
        return encode(src, *args, **kwargs)

    monkeypatch.setattr(translator.model, "encode", recording_encode)
    long = " ".join(LINES[4:5] * (1 << 14))  # about 1 MiB of text, one line
    with pytest.warns(UserWarning, match="1 input.* longer than the model's 64 .*truncated"):
        out = translator.translate(["der Hund", long, ""])
    assert len(out) == 3 and out[2] == "" and max(lengths) == 64


@pytest.fixture(scope="module")
def translator(ckpt):
    return Translator.from_checkpoint(ckpt)


# Any Unicode but lone surrogates (not text); LF is what separates the lines of a stream.
ANY_LINE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"),
                   max_size=16)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(ANY_LINE, max_size=4))
def test_any_unicode_gives_exactly_one_output_line_per_input_line(translator, lines):
    """Control characters, CR, U+2028, byte-fallback scripts, blanks: never a crash, and the
    stream keeps the line count that evaluation's alignment with references relies on."""
    out = io.StringIO()
    count = translate_stream(translator, io.StringIO("".join(f"{x}\n" for x in lines)), out)
    assert count == len(lines) and out.getvalue().count("\n") == len(lines)


def test_running_out_of_memory_is_one_line_with_what_to_lower(ckpt, monkeypatch, capsys):
    # `--beam 100000` made torch try to allocate 160 GB: a traceback ending in a RuntimeError.
    def huge(self, texts):
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 160000000000 "
            "bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(Translator, "translate", huge)
    monkeypatch.setattr("sys.stdin", io.StringIO("the cat\n"))
    assert main(["translate", "--checkpoint", str(ckpt), "--beam", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aiayn translate: error: not enough memory (DefaultCPUAllocator")
    assert "--beam" in err and len(err.splitlines()) == 1

    def bug(self, texts):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(Translator, "translate", bug)
    monkeypatch.setattr("sys.stdin", io.StringIO("the cat\n"))
    with pytest.raises(RuntimeError, match="shape mismatch"):  # other errors stay bugs to see
        main(["translate", "--checkpoint", str(ckpt)])
