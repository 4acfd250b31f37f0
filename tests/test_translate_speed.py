"""`benchmarks/translate_speed.py`'s agreement check: aiayn scored through its decoding
cache, as the timed search runs it, agrees with teacher forcing, and a float32 cache that
does not stops the script before anything is timed."""

import copy
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import translate_speed  # noqa: E402

from aiayn.config import ModelConfig  # noqa: E402
from aiayn.data.vocab import EOS_ID  # noqa: E402
from aiayn.model.transformer import Transformer  # noqa: E402
from aiayn import fast  # noqa: E402
from aiayn.fast.compiled_step import ByRows  # noqa: E402
from aiayn.fast.search_step import SearchStep  # noqa: E402


def tiny_model() -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=translate_speed.VOCAB, d_model=32, d_ff=64, n_heads=4,
                         n_layers=2)  # fmt: skip
    return Transformer(config).eval()


SENTS = [[5, 9, 13, 2], [7, 11, 2], [4, 6, 8, 10, 12, 2]]  # eos-terminated, unequal lengths


def test_cached_scores_equal_teacher_forced_ones():
    model = fast.for_inference(tiny_model()).model
    src = translate_speed.padded(SENTS, "cpu")
    gen = torch.Generator().manual_seed(3)
    tgt = torch.randint(4, translate_speed.VOCAB, (len(SENTS), 7), generator=gen)
    forced = translate_speed.aiayn_logp(model, src, tgt)  # (batch, 8)
    cached = translate_speed.aiayn_cached_logp(
        model, src, tgt, translate_speed.aiayn_search("aiayn_float32", model)
    )
    assert cached.shape == forced.shape == (len(SENTS), 8)
    torch.testing.assert_close(cached, forced, atol=1e-5, rtol=0)


def test_a_built_search_is_the_one_timed_and_scored():
    """The compiled step's search (`compiled_search`), handed in as `built`, is the one the
    system decodes with and is scored through (here its eager step: no build in a test)."""
    from aiayn.fast.static_search import StepSearch

    model = fast.for_inference(tiny_model(), compile="never").model
    built = {"aiayn_float32": StepSearch(model)}
    assert translate_speed.aiayn_search("aiayn_float32", model, built) is built["aiayn_float32"]
    assert isinstance(translate_speed.aiayn_search("aiayn_int8", model, built),
                      translate_speed.FastSearch)  # fmt: skip
    src = translate_speed.padded(SENTS, "cpu")
    tgt = torch.randint(4, translate_speed.VOCAB, (len(SENTS), 7), generator=torch.Generator().manual_seed(3))
    cached = translate_speed.aiayn_cached_logp(model, src, tgt, built["aiayn_float32"])
    torch.testing.assert_close(cached, translate_speed.aiayn_logp(model, src, tgt), atol=1e-5, rtol=0)
    steps = translate_speed.runner("aiayn_float32", "cpu", [], built)(model, [SENTS], 4, "cpu")
    assert steps == len(SENTS) * 4
    calls = []  # with a whole search step (the compiled one, where it is built), the search runs it
    whole = SearchStep(model)

    def search_step(*inputs):
        calls.append(1)
        return whole(*inputs)

    with_step = {"aiayn_float32": StepSearch(model, search_step=search_step)}
    steps = translate_speed.runner("aiayn_float32", "cpu", [], with_step)(model, [SENTS], 4, "cpu")
    assert steps == len(SENTS) * 4 and len(calls) == 4


def test_agreement_reports_each_aiayn_system_through_its_cache():
    model = tiny_model()
    systems = {"aiayn_float32": fast.for_inference(model).model,
               "aiayn_int8": fast.for_inference(copy.deepcopy(model), int8=True).model,
               "ctranslate2_float32": None}  # fmt: skip
    diffs = translate_speed.agreement(systems, SENTS, 6, "cpu")
    assert set(diffs) == {"aiayn_int8", "aiayn_float32_cached", "aiayn_int8_cached"}
    assert diffs["aiayn_float32_cached"] <= 1e-5
    assert 0 < diffs["aiayn_int8_cached"] < 0.5  # int8's rounding, reported, not enforced


def test_agreement_stops_when_the_float32_cache_disagrees(monkeypatch):
    model = fast.for_inference(tiny_model()).model
    scored = translate_speed.aiayn_cached_logp
    monkeypatch.setattr(translate_speed, "aiayn_cached_logp",
                        lambda m, src, tgt, search: scored(m, src, tgt, search) + 0.01)  # fmt: skip
    with pytest.raises(SystemExit, match="aiayn_float32_cached"):
        translate_speed.agreement({"aiayn_float32": model}, SENTS, 6, "cpu")


def test_the_peers_are_aiayn_exports_and_agree_with_aiayn(tmp_path):
    """The float32 peers compute aiayn's function (within float32 rounding), and the int8
    export holds aiayn's network with 8-bit weights.

    How close CTranslate2's int8 products come is CTranslate2's, and the CPU's: on x86 CPUs
    not made by Intel it multiplies int8 through oneDNN (MKL on Intel's), whose u8 x s8
    kernels on a CPU without AVX-512 VNNI or AMX add pairs of products in saturating 16-bit
    sums, as fbgemm's do (the reason `Int8Linear` keeps 7 bits there). Measured max |log p|
    difference on this tiny model: 0.997 on such an AVX2 CPU (0.067 on the same CPU with
    CT2_USE_MKL=1), under 0.5 where the sums are exact. `translate_speed.py` reports the
    figure; it is not aiayn's to bound, so here it is only reported (and > 0: quantized).
    The export itself is checked on every CPU with CTranslate2's float32 products over its
    int8 weights, where only the weights' rounding is left: measured 0.045 (another random
    network of this shape: ~4)."""
    import ctranslate2

    config = ModelConfig(vocab_size=translate_speed.VOCAB, d_model=32, d_ff=64, n_heads=4,
                         n_layers=2)  # fmt: skip
    systems, names = translate_speed.build_systems(config, "cpu", "float32", str(tmp_path))
    for export in ("ct2_float32", "ct2_int8", "hf"):  # written by `aiayn export`
        assert (tmp_path / export / "aiayn-export.json").is_file()
    assert len(names) == translate_speed.VOCAB
    sents = [s[:-1] + [EOS_ID] for s in SENTS]  # as `sources` makes them: the export adds eos
    diffs = translate_speed.agreement(systems, sents, 6, "cpu", names)
    assert diffs["ctranslate2_float32"] <= 1e-4 and diffs["transformers_marian"] <= 1e-4
    assert diffs["ctranslate2_int8"] > 0  # int8's rounding, reported
    weights = ctranslate2.Translator(str(tmp_path / "ct2_int8"), compute_type="float32")
    checked = {"aiayn_float32": systems["aiayn_float32"], "ctranslate2_int8_weights": weights}
    assert 0 < translate_speed.agreement(checked, sents, 6, "cpu", names)[
        "ctranslate2_int8_weights"] < 0.1  # fmt: skip


def test_latency_mode_decodes_one_sentence_a_call_in_every_system(monkeypatch, capsys):
    """`--latency`: every system gets one sentence a call (as many batches as sentences),
    and each reports its milliseconds per sentence beside its sentences/s."""
    import json

    argv = ["translate_speed.py", "--small", "--latency", "--sentences", "3", "--out-len", "3",
            "--repeats", "1", "--compile", "never", "--no-save"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    translate_speed.main()
    result = json.loads(capsys.readouterr().out)
    result = result.get("result", result)
    assert result["mode"].startswith("latency") and result["batches"] == 3
    systems = [k for k, v in result.items() if isinstance(v, dict) and "seconds" in v]
    assert {"aiayn_float32", "aiayn_reference", "ctranslate2_float32"} <= set(systems)
    for name in systems:
        r = result[name]
        # "seconds" is rounded to the millisecond, ms_per_sentence from the unrounded time
        assert r["ms_per_sentence"] == pytest.approx(1000 * r["seconds"] / 3, abs=0.2)


def test_latency_mode_refuses_a_batch_size(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["translate_speed.py", "--latency", "--batch-size", "8"])
    with pytest.raises(SystemExit):
        translate_speed.parse_args()


def test_the_result_names_the_rows_from_which_the_wide_libraries_serve():
    search = SimpleNamespace(step=ByRows(None, None, 64, rows=len), source=ByRows(None, None, None, rows=len))
    assert translate_speed.wide_from_rows({"aiayn_float32": search}) == {"step": 64, "source": None}
    assert translate_speed.wide_from_rows({}) is None  # the eager fast path: nothing built


def test_each_system_is_timed_in_a_process_of_its_own(tmp_path):
    """`time_apart` loads each system in a process of its own (not this one, not another
    system's) and times the asked passes there, batch by batch: each pass sums every
    batch's output steps, the same in every pass, as the same batches decode to the same
    lengths."""
    import os

    config = ModelConfig(vocab_size=translate_speed.VOCAB, d_model=32, d_ff=64, n_heads=4,
                         n_layers=2)  # fmt: skip
    names = translate_speed.export_systems(config, str(tmp_path))
    batches = [SENTS[:1], SENTS[1:]]
    job = translate_speed.Job(str(tmp_path), "cpu", "float32", 1, "never", names, batches, 3)
    runs, pids = translate_speed.time_apart(["aiayn_reference", "ctranslate2_float32"], job, 2)
    assert len(set(pids.values())) == 2 and os.getpid() not in pids.values()
    for passes in runs.values():
        assert len(passes) == 2 and all(seconds > 0 for seconds, _ in passes)
        assert passes[0][1] == passes[1][1] == 3 * len(SENTS)  # 3 steps a sentence


def test_a_system_that_fails_to_load_stops_the_script_with_its_name(tmp_path):
    job = translate_speed.Job(str(tmp_path), "cpu", "float32", 1, "never", [], [SENTS], 3)
    with pytest.raises(SystemExit, match="aiayn_reference"):
        translate_speed.time_apart(["aiayn_reference"], job, 1)
