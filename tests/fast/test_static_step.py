"""The decoder step as one function of tensors (`fast/static_step.py`), its search
(`fast/static_search.py`), beam search's step as one (`fast/static_beam.py`), the whole
search step (`fast/search_step.py`) and their compiled forms (`fast/compiled_step.py`),
against the core: the same hypotheses and scores in float64 for every kind of model the
step supports, the whole search step's bit for bit the core's, and the compiled search's
translations equal to the core's in float32."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import time
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from aiayn import fast
from aiayn.config import DecodeConfig
from aiayn.decode.search import search as core_search
from aiayn.fast import compiled_step as compiled_module
from aiayn.fast.compiled_step import (
    PRODUCTS_FILE, SEARCH_STEP_ROWS, SOURCE_SENTENCES, STEP_ROWS, ByRows, artifact_path,
    can_compile, crossover, load_compiled, rows_file, wide_from,
)
from aiayn.fast import int8 as int8_module
from aiayn.fast.int8 import quantize_int8
from aiayn.fast.search import TOPK_CHUNK, FastSearch, block_topk
from aiayn.fast import static_beam, wide_products
from aiayn.fast.search_step import SearchStep
from aiayn.fast.static_beam import CHUNKED_FROM, StepBeam, widest_beam
from aiayn.fast.static_search import StepSearch
from aiayn.fast.linear import BucketedLinear
from aiayn.fast.static_step import DecoderStep, SourceKeys, _step_linears, supports
from aiayn.model.transformer import Transformer
from conftest import tiny_model_config

# Sentences of different lengths (padding, and searches that end at different steps).
SOURCES = torch.tensor([[5, 6, 7, 8, 9, 3], [9, 10, 3, 0, 0, 0], [11, 3, 0, 0, 0, 0]])

KINDS = {
    "paper": {},
    "pre-LN": dict(norm="pre"),
    "learned positions": dict(positional="learned", max_len=64),
    "d_k 3, d_v 5": dict(d_k=3, d_v=5),
    "biases, untied, gelu": dict(attention_bias=True, output_bias=True, tie_embeddings=False,
                                 activation="gelu"),  # fmt: skip
    "own source vocabulary": dict(src_vocab_size=31, tie_embeddings=False),
}


def _model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(tiny_model_config(**overrides)).eval()
    for p in model.parameters():  # weights far from the initial ones: peaked distributions
        p.data.add_(torch.randn_like(p) * 0.3)
    return model


def _same(found, expected) -> None:
    assert [[h.tokens for h in hyps] for hyps in found] == [[h.tokens for h in hyps] for hyps in expected]
    for hyps, ref in zip(found, expected):
        for h, r in zip(hyps, ref):
            # Float32 scores (the search's), summed in another order by a compiled step.
            assert h.score == pytest.approx(r.score, rel=1e-5, abs=1e-5)
            assert h.log_prob == pytest.approx(r.log_prob, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
@pytest.mark.parametrize("beam", [1, 4], ids=["greedy", "beam 4"])
def test_the_step_search_finds_the_core_hypotheses_in_float64(kind, beam):
    core = _model(**KINDS[kind]).double()
    model = fast.apply(copy.deepcopy(core))
    config = DecodeConfig(beam=beam, nbest=2 if beam > 1 else 1, max_len_offset=6)
    found = StepSearch(model)(SOURCES, config)
    _same(found, core_search(core, SOURCES, config))
    assert len({len(h[0].tokens) for h in found}) > 1  # the sentences ended at different steps


def _exactly(found, expected) -> None:
    """The same hypotheses with the same scores, to the bit."""
    as_tuples = lambda hyps: [[(h.tokens, h.score, h.log_prob) for h in x] for x in hyps]  # noqa: E731
    assert as_tuples(found) == as_tuples(expected)


# beam and n-best; min_len that holds eos back; a max_len that cuts hypotheses off
BEAMS = {"beam 4, 2-best": DecodeConfig(beam=4, nbest=2, max_len_offset=6),
         "beam 2, 1-best, min_len 2": DecodeConfig(beam=2, nbest=1, min_len=2, max_len_offset=6),
         "beam 5, 5-best, max_len short": DecodeConfig(beam=5, nbest=5, max_len_offset=1, alpha=1.0)}


@pytest.mark.parametrize("beam", BEAMS, ids=list(BEAMS))
@pytest.mark.parametrize("kind", ["paper", "pre-LN", "learned positions", "own source vocabulary"])
def test_the_whole_search_step_is_the_core_search_to_the_bit(kind, beam):
    """One `SearchStep` a step (decoder step, `BeamStep` from its logits, reorder) finds
    the core search's hypotheses with equal scores, in float64; and the core strategy's over
    the same decoder steps."""
    core = _model(**KINDS[kind]).double()
    model = fast.apply(copy.deepcopy(core))
    config = BEAMS[beam]
    found = StepSearch(model, search_step=SearchStep(model))(SOURCES, config)
    _exactly(found, core_search(core, SOURCES, config))
    _exactly(found, StepSearch(model)(SOURCES, config))
    if config.min_len:
        assert all(len(h.tokens) >= config.min_len for hyps in found for h in hyps)


def test_the_whole_search_step_never_moves_a_written_key_and_keeps_each_hypothesiss_origin():
    """The stores are not reordered (`search_step`): a step writes its own position at the
    rows that computed it and leaves the earlier positions as they were; the origin it
    returns names, at this position, each kept hypothesis's parent (`rows`, within its
    sentence) and, before it, the parent's own origin."""
    model = fast.apply(_model().double())
    whole, calls = SearchStep(model), []

    def search_step(tokens, position, self_k, self_v, *rest):
        origin, slot_k = rest[4], rest[5]
        before = (self_k.clone(), origin.clone())
        out = whole(tokens, position, self_k, self_v, *rest)
        calls.append((before, self_k, slot_k.clone(), out[0], out[-1], tokens.shape))
        return out

    StepSearch(model, search_step=search_step)(SOURCES, DecodeConfig(beam=3, max_len_offset=4))
    assert len(calls) > 3
    for (earlier_k, origin), self_k, slot_k, rows, kept, (sentences, beam) in calls:
        assert torch.equal(self_k, earlier_k)  # the earlier positions: untouched
        assert slot_k.abs().sum() > 0  # this position: written
        parent = rows.view(sentences, beam) - torch.arange(sentences)[:, None] * beam
        assert torch.equal(kept[-1], parent)
        assert torch.equal(kept[:-1], origin.gather(2, parent.expand(origin.shape)))


def test_sentences_that_leave_take_their_rows_and_origin_with_them_and_free_the_old_stores():
    """`_Steps.leave`: the stores keep the written positions of the staying sentences' beam
    rows, in order; their origin and encoder-decoder keys follow; no spare store is kept
    (a search's rows only shrink, so none could be written into again)."""
    model = fast.apply(_model())
    steps = StepSearch(model)._start(SOURCES, 5, rows=SOURCES.size(0) * 2)  # beam 2
    steps.self_k.normal_()
    steps.written, steps.origin = 3, torch.randint(0, 2, (3, SOURCES.size(0), 2))
    before_k, before_origin, before_cross = steps.self_k.clone(), steps.origin.clone(), steps.cross_k.clone()
    stay = torch.tensor([0, 2])
    steps.leave(stay, 2)
    torch.testing.assert_close(steps.self_k[:3], before_k[:3, :, [0, 1, 4, 5]], atol=0, rtol=0)
    assert torch.equal(steps.origin, before_origin[:, stay])
    assert torch.equal(steps.cross_k, before_cross[:, stay])
    assert steps.spare_k is None and steps.spare_v is None


def test_the_beam_step_leaves_other_searches_to_the_core_strategy():
    model = _model(vocab_size=40)
    assert isinstance(StepBeam.for_search(model, SOURCES, DecodeConfig(beam=4)), StepBeam)
    for config in (DecodeConfig(beam=1), DecodeConfig(beam=4, beam_rules="transformers"),
                   DecodeConfig(beam=4, length_penalty="power"), DecodeConfig(beam=21)):
        assert StepBeam.for_search(model, SOURCES, config) is None  # 21: 42 > vocab
    other_eos = model.config.eos_id + 1  # the compiled step's eos is the model's
    assert StepBeam.for_search(model, SOURCES, DecodeConfig(beam=4), eos_id=other_eos) is None
    assert StepBeam.for_search(model, SOURCES, DecodeConfig(beam=4), eos_id=model.config.eos_id)


LARGE_VOCAB = TOPK_CHUNK * CHUNKED_FROM + 5  # the fewest chunks searched by chunks, and a part


def test_a_large_vocabulary_takes_each_sentences_best_by_chunks_to_the_bit(monkeypatch):
    """From `CHUNKED_FROM` chunks of tokens a row on, `BeamStep` takes a sentence's best
    extensions by chunks over all its rows (`block_topk`) and still finds the core's
    hypotheses, to the bit, for every beam the core searches (`widest_beam`)."""
    core = _model(vocab_size=LARGE_VOCAB).double()
    model = fast.apply(copy.deepcopy(core))
    calls = []
    monkeypatch.setattr(static_beam, "block_topk", lambda *a: calls.append(a) or block_topk(*a))
    wide = DecodeConfig(beam=CHUNKED_FROM + 3, nbest=3, max_len_offset=3)
    for config in (*BEAMS.values(), wide):
        found = StepSearch(model, search_step=SearchStep(model))(SOURCES, config)
        _exactly(found, core_search(core, SOURCES, config))
    assert calls  # the chunks were searched
    assert widest_beam(LARGE_VOCAB) == LARGE_VOCAB // 2
    widest = DecodeConfig(beam=widest_beam(LARGE_VOCAB), max_len_offset=3)
    assert isinstance(StepBeam.for_search(model, SOURCES, widest), StepBeam)
    wider = dataclasses.replace(widest, beam=widest.beam + 1)
    assert StepBeam.for_search(model, SOURCES, wider) is None


def _products(package: Path) -> set[str]:
    """The weights' products a compiled library calls (ATen's or oneDNN's; attention's bmm
    aside), from its C++ wrapper."""
    with zipfile.ZipFile(package) as zipped:
        wrapper = next(zipped.read(n).decode() for n in zipped.namelist() if n.endswith("wrapper.cpp"))
    return set(re.findall(r"aoti_torch_cpu_(\w*linear\w*|addmm\w*|mm\w*)\(", wrapper))


@pytest.mark.parametrize("kind", ["paper", "pre-LN"])
def test_teacher_forcing_through_the_step_gives_the_core_log_probabilities(kind):
    core = _model(**KINDS[kind]).double()
    tgt_in = torch.tensor([[2, 7, 8, 9], [2, 10, 11, 12], [2, 13, 3, 0]])
    expected = core(SOURCES, tgt_in).float().log_softmax(dim=-1)  # (batch, 4, vocab)
    got = StepSearch(fast.apply(copy.deepcopy(core))).forced_logp(SOURCES, tgt_in)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_the_step_returns_this_positions_keys_and_reads_the_earlier_ones():
    """Two steps fed by hand: the second's log-probabilities change with the first's keys
    (it reads them), and each step returns its own position's keys and values."""
    model = _model().double()
    step = DecoderStep.from_model(model)
    layers, heads, d = len(model.decoder), step.heads, step.d_k
    src = SOURCES[:1]
    memory = model.encode(src)
    cross = [layer.cross_attn.project_kv(memory) for layer in model.decoder]
    cross_k, cross_v = (torch.stack([kv[i] for kv in cross]) for i in (0, 1))
    mask = ~model.pad_mask(src)[:, None, None, :]
    position = model.tgt_positional.table[:2].to(torch.float64)
    empty = torch.zeros(0, layers, 1, heads, d, dtype=torch.float64)
    tokens = torch.tensor([model.config.bos_id])
    with torch.no_grad():
        logp, k, v = step(tokens, position[0], empty, empty, cross_k, cross_v, mask)
        assert logp.shape == (1, model.config.vocab_size) and logp.dtype == torch.float32
        assert k.shape == v.shape == (layers, 1, heads, d)
        second = step(torch.tensor([7]), position[1], k[None], v[None], cross_k, cross_v, mask)[0]
        other = step(torch.tensor([7]), position[1], k[None] + 1, v[None], cross_k, cross_v, mask)[0]
    assert not torch.equal(second, other)


def test_models_the_step_does_not_compute_keep_the_other_searches(monkeypatch):
    assert not supports(_model(attention_window=2))
    with pytest.raises(ValueError, match="window"):
        DecoderStep(_model(attention_window=2))
    for eight_bits_exact in (True, False):  # oneDNN's sums 32-bit (VNNI, AMX), or 16-bit
        monkeypatch.setattr(int8_module, "onednn_sums_exact", lambda exact=eight_bits_exact: exact)
        for seven in (True, False):  # the inputs' bits, as `seven_bits_more_exact` measured
            monkeypatch.setattr(int8_module, "seven_bits_more_exact", lambda seven=seven: seven)
            int8 = quantize_int8(fast.apply(_model()))
            # 7-bit inputs' sums are exact on every CPU; 8-bit ones only with 32-bit sums
            assert supports(int8) and can_compile(int8) == (seven or eight_bits_exact)
            assert can_compile(_model())  # float32 products are not concerned
    int8_search = fast.for_inference(_model(), int8=True, compile="always").search
    assert isinstance(int8_search, FastSearch)  # 8-bit inputs, 16-bit sums: the eager search
    assert not can_compile(_model().double())  # float32 only
    for model, kind in ((_model(attention_window=2), FastSearch), (_model(), FastSearch)):
        search = fast.for_inference(model, compile="never").search
        assert isinstance(search, kind)
    with pytest.raises(ValueError, match="compile must be one of"):
        fast.for_inference(_model(), compile="sometimes")


def test_the_artifact_is_keyed_by_the_weights_and_the_config(tmp_path):
    model = _model()
    path = artifact_path(model, tmp_path)
    assert path.parent == tmp_path / "steps"
    assert artifact_path(copy.deepcopy(model), tmp_path) == path
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.decoder[0].ffn.w_1.bias[0] += 1e-3
    assert artifact_path(changed, tmp_path) != path
    assert artifact_path(_model(ln_eps=1e-5), tmp_path) != path  # same weights, other config


def test_the_wide_library_serves_from_the_crossover_that_loses_least():
    assert wide_from({1: (1.0, 2.0), 4: (2.0, 1.5), 16: (3.0, 1.0)}) == 4
    assert wide_from({1: (0.5, 1.0), 4: (1.0, 2.0)}) is None
    assert wide_from({1: (2.0, 1.0), 4: (2.0, 1.0)}) == 1
    assert wide_from({1: (1.0, 1.0), 4: (2.0, 2.0)}) is None  # ties: the later crossover
    # a loss of a quarter between two wins by half: one crossover, at the first win
    assert wide_from({1: (1.0, 0.5), 4: (2.0, 2.5), 16: (3.0, 1.5)}) == 1
    # a win by a third at 256 rows, then a loss of 3% at 512 (a small network's int8 step,
    # measured): the wide library serves from 32 rows, not at no width at all
    int8 = {16: (0.475, 0.5233), 32: (0.8886, 0.7374), 64: (1.8982, 1.1963),
            128: (3.7428, 2.4081), 256: (7.8001, 4.8282), 512: (15.8304, 16.377)}  # fmt: skip
    assert wide_from(int8) == 32


def test_calls_go_to_the_library_for_their_row_count():
    calls = []
    by_rows = ByRows(lambda *x: calls.append("narrow"), lambda *x: calls.append("wide"), 8,
                     rows=lambda tokens: tokens.size(0))  # fmt: skip
    for rows in (1, 7, 8, 30):
        by_rows(torch.zeros(rows))
    assert calls == ["narrow", "narrow", "wide", "wide"]
    never = ByRows(lambda *x: "narrow", lambda *x: "wide", None, rows=lambda tokens: tokens.size(0))
    assert never(torch.zeros(1000)) == "narrow"


def test_a_library_that_no_call_takes_is_let_go():
    """`keep_used`: where the wide library serves from one row on the narrow one goes (and
    its copy of the weights with it), where the wide one never serves it goes; where each
    serves some rows both stay."""
    narrow, wide = (lambda *x: "narrow"), (lambda *x: "wide")
    for wide_from, kept in ((1, (wide, wide)), (None, (narrow, narrow)), (8, (narrow, wide))):
        by_rows = ByRows(narrow, wide, wide_from, rows=lambda tokens: tokens.size(0))
        by_rows.keep_used()
        assert (by_rows.narrow, by_rows.wide) == kept


def test_crossover_times_both_libraries_at_each_width():
    narrow = lambda x: time.sleep(1e-3 * x.size(0))  # noqa: E731
    wide = lambda x: time.sleep(2e-3 + 1e-4 * x.size(0))  # noqa: E731
    found = crossover(narrow, wide, [(rows, (torch.zeros(rows),)) for rows in (1, 4, 16)])
    assert found["wide_from"] == 4
    assert found["ms"][1][0] < found["ms"][1][1] and found["ms"][16][0] > found["ms"][16][1]


def test_the_step_is_timed_at_the_rows_of_a_batched_translation(monkeypatch):
    """`_step_examples` reach the rows of a 4096-token batch of 32-token sentences at beam 4
    (512): a wide library that wins only past 128 rows (as the small benchmark network's
    did: level at 128 rows, a quarter faster at 512) serves those batches, not the narrow one."""
    monkeypatch.setattr(compiled_module, "_seconds", lambda function, inputs: function(*inputs))

    def narrow(tokens, *rest):  # "seconds" by rows: the narrow library wins up to 128 rows
        return tokens.size(0) * 1.0

    def wide(tokens, *rest):
        rows = tokens.size(0)
        return rows * 2.0 if rows <= 128 else 128 + (rows - 128) * 0.5

    examples = list(compiled_module._step_examples(_model()))
    assert examples[-1][0] >= 4 * 4096 // 32
    assert crossover(narrow, wide, examples)["wide_from"] == 256


def test_the_search_step_is_timed_on_its_own_calls_and_an_older_rows_file_again(tmp_path, monkeypatch):
    """The search step's two libraries get a crossover of their own, timed on search-step
    calls of sentences of beam 4 (inputs the eager `SearchStep` runs), not the step's: here
    its wide library wins from the fewest rows while the step's never does. A rows file
    measured before the search step was timed apart (no "search_step") is measured again; a
    complete one is read as it is."""
    model = _model()
    monkeypatch.setattr(compiled_module, "_seconds", lambda function, inputs: function(*inputs))
    eager = SearchStep(model)

    def costing(ms: float):  # a library that runs the call, and "takes" ms
        def run(*inputs):
            eager(*inputs)
            return ms / 1e3
        return run

    step = ByRows(lambda *x: 1e-3, lambda *x: 2e-3, None, compiled_module._step_rows)
    search_step = ByRows(costing(2.0), costing(1.0), None, compiled_module._search_step_rows)
    measure = lambda: compiled_module._crossovers(tmp_path, model, step, search_step, lambda src: src)  # noqa: E731
    found = measure()
    assert found["step"]["wide_from"] is None and found["search_step"]["wide_from"] == 4
    assert [int(rows) for rows in found["search_step"]["ms"]] == list(SEARCH_STEP_ROWS) == [4, 8, 16, 32, 64, 128, 256, 512]
    assert set(found["search_step"]["ms"][4]) == {1.0, 2.0}
    file = rows_file(tmp_path)
    assert json.loads(file.read_text()) == json.loads(json.dumps(found))
    file.write_text(json.dumps({"step": found["step"]}))  # as an older aiayn wrote it
    assert "search_step" in measure() and "search_step" in json.loads(file.read_text())
    monkeypatch.setattr(compiled_module, "crossover", lambda *args: pytest.fail("timed again"))
    assert measure() == json.loads(file.read_text())


def test_without_a_cached_step_nothing_is_built_unless_asked(tmp_path, monkeypatch):
    def refuse(model, path):
        raise AssertionError("built")

    monkeypatch.setattr(compiled_module, "_build", refuse)
    model = _model()
    assert load_compiled(model, cache=tmp_path) is None
    path = artifact_path(model, tmp_path)
    path.mkdir(parents=True)
    (path / "step.pt2").write_bytes(b"not a package")  # e.g. a damaged file
    assert load_compiled(model, cache=tmp_path) is None


def test_a_build_that_fails_warns_and_decoding_goes_on_without_it(tmp_path, monkeypatch):
    def fail(model, path):
        raise RuntimeError("no C++ compiler found\ndetails")

    monkeypatch.setattr(compiled_module, "_build", fail)
    with pytest.warns(UserWarning, match="could not be compiled .RuntimeError: no C.. compiler"):
        assert load_compiled(_model(), build=True, cache=tmp_path) is None
    monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inference = fast.for_inference(_model(), compile="always")
    assert isinstance(inference.search, FastSearch)


@pytest.mark.slow
def test_the_compiled_step_translates_as_the_core_and_is_built_once(tmp_path, monkeypatch):
    """One build (tens of seconds): the compiled search finds the core's hypotheses in
    float32 over a batch and one sentence at a time, through either library, at every beam
    config, up to a beam wider than a row's chunks (a vocabulary searched by chunks:
    `block_topk` under export); and a second model with the same weights loads the stored
    library instead of building. Its source's wide library is built frozen (oneDNN's packed
    float32 products) and its step's not (ATen's), as `wide_products` would choose where
    oneDNN won the one and lost the other: both kinds of float32 wide library are tested.
    (The source, not the step, is the frozen one: its unfrozen twin is the cheapest to
    build, and the search step's would be the costliest.)"""
    core = _model(seed=1, vocab_size=LARGE_VOCAB)
    monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path))
    chosen = {"step": {"frozen": False, "ms": {"16": [1.0, 2.0]}},
              "source": {"frozen": True, "ms": {"16": [2.0, 1.0]}}}  # fmt: skip
    monkeypatch.setattr(wide_products, "measure", lambda *args: chosen)
    builders, build, keep_used = [], compiled_module._build, ByRows.keep_used
    timed = []

    def frozen_faster(libraries, examples):  # the frozen source library timed the faster
        widths = [rows for rows, _ in examples]
        timed.append(([library.file.name for library in libraries], widths))
        return {rows: [3.0, 2.0, 1.0] for rows in widths}  # [narrow, unfrozen, frozen] ms

    def build_timing_libraries_so(*args):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(compiled_module, "in_turns", frozen_faster)
            builders.extend(build(*args))

    monkeypatch.setattr(compiled_module, "_build", build_timing_libraries_so)
    monkeypatch.setattr(ByRows, "keep_used", lambda self: None)  # both libraries, to route to below
    model, search = fast.for_inference(copy.deepcopy(core), compile="always")
    # the six libraries, and the frozen source's unfrozen twin, built each in a process of
    # its own, side by side on several CPUs; the source's narrow library and its two wide
    # ones timed in turns at every example width
    assert len(builders) == 7 and len(set(builders)) == 7 and os.getpid() not in builders
    widths = [n * 16 for n in SOURCE_SENTENCES]  # tokens: sentences of 16
    assert timed == [(["source.pt2", "source-wide-unfrozen.pt2", "source-wide.pt2"], widths)]
    assert isinstance(search, StepSearch) and search.step is not search.shape
    assert search.kind == "compiled decoder step" and StepSearch(model).kind == "decoder step"
    rows_here = rows_file(artifact_path(model))  # the crossovers at this thread count
    built = [PRODUCTS_FILE, rows_here.name, "search_step-wide.pt2", "search_step.pt2",
             "source-wide.pt2", "source.pt2", "step-wide.pt2", "step.pt2"]  # fmt: skip
    assert sorted(p.name for p in artifact_path(model).iterdir()) == built
    libraries = {str(rows): [3.0, 2.0, 1.0] for rows in widths}  # [narrow, unfrozen, frozen] ms
    assert json.loads((artifact_path(model) / PRODUCTS_FILE).read_text()) == {
        "step": chosen["step"], "source": {**chosen["source"], "libraries": libraries}}
    for name, frozen in (("step", False), ("search_step", False), ("source", True)):
        products = _products(artifact_path(model) / f"{name}-wide.pt2")
        assert products and all(p.startswith("_linear_pointwise") == frozen for p in products), products
    rows = json.loads(rows_here.read_text())
    for name, timed_at in (("step", STEP_ROWS), ("search_step", SEARCH_STEP_ROWS), ("source", widths)):
        assert [int(w) for w in rows[name]["ms"]] == list(timed_at)  # both timed at each width
        assert all(t > 0 for pair in rows[name]["ms"].values() for t in pair)
        assert getattr(search, name).wide_from == rows[name]["wide_from"]
    assert isinstance(search.search_step, ByRows)  # the compiled one, narrow and wide
    assert [p.name for p in artifact_path(model).parent.iterdir()] == [artifact_path(model).name]
    config = DecodeConfig(beam=4, nbest=2, max_len_offset=6)
    _same(search(SOURCES, config), core_search(core, SOURCES, config))
    for row in SOURCES:
        one = row[row.ne(0)][None]
        _same(search(one, config), core_search(core, one, config))
    greedy = DecodeConfig(beam=1, max_len_offset=6)
    _same(search(SOURCES, greedy), core_search(core, SOURCES, greedy))
    for wide_from in (1, None):  # every call through the wide libraries, then the narrow ones
        search.step.wide_from = search.source.wide_from = search.search_step.wide_from = wide_from
        _same(search(SOURCES, config), core_search(core, SOURCES, config))
        wider = DecodeConfig(beam=CHUNKED_FROM + 3, nbest=3, max_len_offset=3)
        for other in (*BEAMS.values(), wider):  # other beams, n-bests and limits: the same libraries
            _same(search(SOURCES, other), core_search(core, SOURCES, other))

    def refuse(model, path):
        raise AssertionError("built again")

    monkeypatch.setattr(compiled_module, "_build", refuse)
    measured = []
    monkeypatch.setattr(compiled_module, "crossover", lambda *args: measured.append(1) or
                        {"wide_from": 8, "ms": {}})  # fmt: skip
    again = fast.for_inference(copy.deepcopy(core)).search  # "auto": from the cache
    assert isinstance(again, StepSearch) and not measured  # its crossovers read, not timed
    _same(again(SOURCES, config), core_search(core, SOURCES, config))
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)  # another thread count: timed once, and kept
    try:
        other = fast.for_inference(copy.deepcopy(core)).search
        assert len(measured) == 3  # the step, the search step and the source
        assert other.step.wide_from == other.search_step.wide_from == other.source.wide_from == 8
        assert rows_file(artifact_path(model)).exists() and rows_here.exists()
        fast.for_inference(copy.deepcopy(core))
        assert len(measured) == 3
        # where the wide libraries serve from one row on, the narrow ones are let go
        monkeypatch.setattr(ByRows, "keep_used", keep_used)
        monkeypatch.setattr(compiled_module, "crossover", lambda *args: {"wide_from": 1, "ms": {}})
        torch.set_num_threads(threads + 2)
        wide = fast.for_inference(copy.deepcopy(core)).search
        assert all(f.narrow is f.wide for f in (wide.step, wide.source, wide.search_step))
        _same(wide(SOURCES, config), core_search(core, SOURCES, config))
        # and, those crossovers stored, a later load never reads the narrow libraries
        read, load = [], torch._inductor.aoti_load_package
        monkeypatch.setattr(torch._inductor, "aoti_load_package",
                            lambda file: read.append(Path(file).name) or load(file))  # fmt: skip
        fast.for_inference(copy.deepcopy(core))
        assert sorted(read) == ["search_step-wide.pt2", "source-wide.pt2", "step-wide.pt2"]
    finally:
        torch.set_num_threads(threads)


# {rows: [narrow, unfrozen, frozen]} ms a call. "narrow serves 16": the frozen library loses
# to its twin at 16 rows, where the narrow one beats both, and wins at every wider width:
# kept. "twin serves wide": the frozen one wins at 16 rows only, where the narrow one beats
# both, and loses wider: dropped.
KEEP_TIMINGS = {
    "narrow serves 16": ({1: [0.1, 0.5, 0.6], 16: [1.0, 2.0, 3.0], 64: [6.0, 3.0, 2.0],
                          512: [60.0, 30.0, 20.0]}, True),
    "twin serves wide": ({1: [0.1, 0.5, 0.6], 16: [1.0, 3.0, 2.0], 64: [6.0, 2.0, 3.0],
                          512: [60.0, 20.0, 30.0]}, False),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(KEEP_TIMINGS))
def test_a_frozen_wide_library_stays_only_where_the_search_is_faster_with_it(tmp_path, case):
    """`_keep_faster_wide`: the step's narrow library and its two wide ones, timed at every
    example width; the frozen one stays where the libraries the crossovers would serve are
    the faster with it. The rule before (faster than its twin at 16 rows and at the widest)
    dropped it in both cases. The winner's kind serves the step
    and the search step, the other is deleted, and the choice and the timings are written
    to the products file. A source built frozen with no twin is left as it is."""
    model, (ms, frozen_wins) = _model(), KEEP_TIMINGS[case]
    names = ("step", "search_step")
    for name in names:
        (tmp_path / f"{name}.pt2").write_text(f"{name} narrow")
        (tmp_path / f"{name}-wide.pt2").write_text(f"{name} frozen")
        (tmp_path / f"{name}{compiled_module.TWIN}").write_text(f"{name} unfrozen")
    (tmp_path / "source-wide.pt2").write_text("source frozen")
    chosen = {f: {"frozen": True, "ms": {"16": [2.0, 1.0]}} for f in ("step", "source")}
    (tmp_path / PRODUCTS_FILE).write_text(json.dumps(chosen))
    timed = []

    def timings(libraries, examples):
        timed.append((libraries, [rows for rows, _ in examples]))
        return ms

    compiled_module._keep_faster_wide(tmp_path, model, timings, load=lambda file: file.read_text())
    assert timed == [(["step narrow", "step unfrozen", "step frozen"], list(STEP_ROWS))]
    kind = "frozen" if frozen_wins else "unfrozen"
    for name in names:
        assert (tmp_path / f"{name}-wide.pt2").read_text() == f"{name} {kind}"
    assert (tmp_path / "source-wide.pt2").read_text() == "source frozen"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        PRODUCTS_FILE, "search_step-wide.pt2", "search_step.pt2", "source-wide.pt2",
        "step-wide.pt2", "step.pt2"]  # fmt: skip
    products = json.loads((tmp_path / PRODUCTS_FILE).read_text())
    assert products["step"]["frozen"] is frozen_wins and products["source"] == chosen["source"]
    assert products["step"]["libraries"] == {str(rows): times for rows, times in ms.items()}


def test_libraries_are_timed_in_turns_on_examples_made_one_at_a_time():
    """`in_turns` (the crossovers' and `_keep_faster_wide`'s timing): every function runs on
    each example before the next is made, and each gets its own time a call, in ms."""
    calls = []

    def examples():
        for rows in (1, 4):
            calls.append(f"made {rows}")
            yield rows, (rows,)

    def fast(rows):
        calls.append(f"fast {rows}")

    def slow(rows):
        calls.append(f"slow {rows}")
        time.sleep(0.002)

    ms = compiled_module.in_turns([fast, slow], examples())
    assert list(ms) == [1, 4] and all(f < 1.0 < s for f, s in ms.values())
    assert calls.index("made 4") > calls.index("slow 1") and calls[-1] == "slow 4"


def test_a_build_with_no_twin_is_left_as_it_is(tmp_path):
    """An int8 build (frozen wide libraries, no products file) or a float32 one that froze
    nothing: `_keep_faster_wide` times, reads and writes nothing."""
    (tmp_path / "step-wide.pt2").write_text("step")
    compiled_module._keep_faster_wide(tmp_path, _model(), lambda *args: 1 / 0, load=lambda f: 1 / 0)
    assert [p.name for p in tmp_path.iterdir()] == ["step-wide.pt2"]


def test_a_float32_build_that_freezes_both_functions_builds_each_a_twin(tmp_path, monkeypatch):
    """`_jobs` where the products chose oneDNN for the step and the source: each function's
    wide library frozen over padded rows and its unfrozen twin over the model's own rows,
    both exported at a wide call's sizes (Inductor's hints), the narrow ones at a few rows.
    (The programs are stand-ins naming what each would export: `_jobs`' wiring is under
    test, not export.)"""
    model = _model()
    chosen = {f: {"frozen": True, "ms": {}} for f in ("step", "source")}
    monkeypatch.setattr(compiled_module, "_products_file", lambda *args: chosen)

    def stand_in(name):
        def program(of, transposed=False, sizes=compiled_module.NARROW):
            padded = any(isinstance(m, BucketedLinear) for m in of.modules())
            assert padded or of is model  # the padded copy, or the model itself
            return (name, "padded" if padded else "own", transposed, sizes)
        return program

    for name in ("step", "source", "search_step"):
        monkeypatch.setattr(compiled_module, f"_{name}_program", stand_in(name))
    exported = {}
    monkeypatch.setattr(torch.export, "save", lambda program, file: exported.setdefault(
        Path(file).name, []).append(program))  # fmt: skip
    jobs = {Path(package).name: (exported[Path(program).name], frozen)
            for program, package, _, frozen in compiled_module._jobs(model, tmp_path)}  # fmt: skip
    wide, narrow = compiled_module.WIDE, compiled_module.NARROW
    for name in ("step", "search_step", "source"):
        assert jobs[f"{name}-wide.pt2"] == ([(name, "padded", False, wide)], True)
        assert jobs[f"{name}{compiled_module.TWIN}"] == ([(name, "own", False, wide)], False)
    assert jobs["source.pt2"] == ([("source", "own", False, narrow)], False)
    for name in ("step", "search_step"):  # the narrow decoder reads its weights as (in, out)
        assert jobs[f"{name}.pt2"] == ([(name, "own", True, narrow)], False)
    assert len(exported) == 9 and all(len(each) == 1 for each in exported.values())


def test_the_libraries_compile_side_by_side_on_the_cpus_this_process_may_use(monkeypatch):
    """`compile_all` runs as many compiling processes at once as there are CPUs, and no more."""
    running, most, order = [0], [0], []

    def compile_apart(program, package, options, frozen, threads):
        running[0] += 1
        most[0] = max(most[0], running[0])
        time.sleep(0.2)
        running[0] -= 1
        order.append(package)
        return len(order)

    monkeypatch.setattr(compiled_module, "compile_apart", compile_apart)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    jobs = [(f"p{i}", f"k{i}", {}, False) for i in range(5)]
    assert sorted(compiled_module.compile_all(jobs)) == [1, 2, 3, 4, 5]
    assert most[0] == 2 and sorted(order) == [f"k{i}" for i in range(5)]


def test_the_exported_steps_write_attention_out_and_compute_what_the_eager_step_does():
    """`written_out_attention`: the decoder step's program holds no scaled dot-product
    attention (nor the CPU's flash kernel), only products and softmax, and gives the eager
    step's log-probabilities and keys."""
    model = _model()
    program = compiled_module._step_program(model)
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert "aten.bmm.default" in targets and not [t for t in targets if "scaled_dot_product" in t]
    inputs = _random_step_inputs(model, seed=1)
    with torch.no_grad():
        expected = DecoderStep.from_model(model)(*inputs)
        got = program.module()(*inputs)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_each_program_is_exported_at_its_librarys_sizes_and_computes_the_same_at_any():
    """The example sizes are Inductor's hints (`compiled_step.Sizes`): the wide libraries'
    programs carry a wide call's (rows, sentences, source tokens), the narrow ones' a few
    rows; the dimensions stay dynamic, so a program exported wide gives the eager step's
    log-probabilities and keys on a narrow call."""
    model = _model()

    def hints(program) -> list[int]:
        first = next(n for n in program.graph.nodes if n.op == "placeholder"
                     and n.name in program.graph_signature.user_inputs)  # fmt: skip
        return [int(d.node.hint) for d in first.meta["val"].shape]

    for sizes in (compiled_module.NARROW, compiled_module.WIDE):
        rows = sizes.sentences * sizes.beam
        assert hints(compiled_module._step_program(model, sizes=sizes)) == [rows]
        assert hints(compiled_module._search_step_program(model, sizes=sizes)) == [sizes.sentences, sizes.beam]
        assert hints(compiled_module._source_program(model, sizes=sizes)) == [sizes.sentences, sizes.src_len]
    assert compiled_module.WIDE.sentences * compiled_module.WIDE.beam >= 256
    inputs = _random_step_inputs(model, seed=1)  # 6 rows
    with torch.no_grad():
        expected = DecoderStep.from_model(model)(*inputs)
        got = compiled_module._step_program(model, sizes=compiled_module.WIDE).module()(*inputs)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_a_frozen_wide_librarys_programs_pad_every_product_to_bucket_rows_and_compute_the_same():
    """`compiled_step.bucketed`: a copy over the model's own parameters whose every linear
    map pads its rows to `bucket_rows` (so that oneDNN meets few row counts); its exported
    step and source keys give the model's (float64), and the model is left as it was."""
    model = _model().double()
    padded = compiled_module.bucketed(model)
    assert {id(p) for p in padded.parameters()} == {id(p) for p in model.parameters()}
    linears = [m for m in padded.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(isinstance(m, BucketedLinear) for m in linears)
    assert not any(isinstance(m, BucketedLinear) for m in model.modules())
    inputs = _random_step_inputs(model, seed=1)  # 6 rows: each product padded to 8
    program = compiled_module._step_program(padded)
    with torch.no_grad():
        expected = DecoderStep.from_model(model)(*inputs)
        with _ProductRows() as products:
            got = program.module()(*inputs)
        assert products.rows == {8}  # every weight's product, over the 6 rows and 2 of zeros
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(compiled_module._source_program(padded).module()(SOURCES)[:2],
                                   SourceKeys(model)(SOURCES)[:2], rtol=1e-12, atol=1e-12)  # fmt: skip


def test_the_narrow_librarys_step_multiplies_by_weights_held_in_by_out_and_computes_the_same():
    """`DecoderStep(model, transposed=True)`, exported as the narrow library's is: every
    product of the decoder multiplies by one of its (in, out) buffers, the model's weight
    transposed and laid out row by row, and the step gives the plain program's
    log-probabilities and keys (float64)."""
    model = _model().double()
    plain = compiled_module._step_program(model)
    turned = compiled_module._step_program(model, transposed=True)
    linears = [model.get_submodule(path) for path in _step_linears(model)]
    buffers = turned.graph_signature.inputs_to_buffers
    aten = torch.ops.aten
    products = [n for n in turned.graph.nodes if n.target in (aten.mm.default, aten.addmm.default)]
    assert len(products) == len(linears) == 6 * len(model.decoder) + 1
    for product, linear in zip(products, linears, strict=True):  # in the step's order
        weight = product.args[1] if product.target is aten.mm.default else product.args[2]
        assert weight.op == "placeholder" and buffers[weight.name].startswith("transposed_")
        assert weight.meta["val"].shape == linear.weight.t().shape and weight.meta["val"].is_contiguous()
    inputs = _random_step_inputs(model, seed=2)
    with torch.no_grad():
        expected, got = plain.module()(*inputs), turned.module()(*inputs)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-12)


def test_an_int8_models_narrow_step_computes_its_int8_arithmetic_in_float32():
    """An int8 model's narrow library (`DecoderStep(model, transposed=True)`, built without
    freezing): every product multiplies the input's int8 levels (one quantization each) by
    an (in, out) buffer of the weights' int8 values, and the step gives the eager int8
    step's log-probabilities and keys (oneDNN's or fbgemm's int8 products) to float32's
    rounding of the scaling: whole-number sums are exact in float32. Only where int8 models
    compile (`can_compile`): not for 8-bit inputs where oneDNN's sums are 16-bit."""
    model = quantize_int8(_model())
    if not can_compile(model):
        pytest.skip("8-bit inputs where oneDNN is capped below VNNI: int8 models are not compiled")
    turned = compiled_module._step_program(model, transposed=True)
    linears = [model.get_submodule(path) for path in _step_linears(model)]
    buffers, values = turned.graph_signature.inputs_to_buffers, dict(turned.named_buffers())
    aten, nodes = torch.ops.aten, list(turned.graph.nodes)
    products = [n for n in nodes if n.target in (aten.mm.default, aten.addmm.default)]
    quantized = [n for n in nodes if n.target is torch.ops.quantized_decomposed.quantize_per_tensor.tensor]
    assert len(products) == len(quantized) == len(linears) == 6 * len(model.decoder) + 1
    for product, linear in zip(products, linears, strict=True):  # in the step's order
        weight = values[buffers[product.args[-1].name]]
        assert torch.equal(weight, linear.weight_int8.float().t()) and weight.is_contiguous()
    inputs = _random_step_inputs(model, seed=2)
    with torch.no_grad():
        expected, got = DecoderStep.from_model(model)(*inputs), turned.module()(*inputs)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


class _ProductRows(TorchDispatchMode):
    """The row counts of the matrix products by weights that ran (`mm`, `addmm`)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default or func is torch.ops.aten.addmm.default:
            self.rows.add(args[-2 if func is torch.ops.aten.mm.default else 1].shape[0])
        return func(*args, **(kwargs or {}))


def _random_step_inputs(model, seed: int) -> tuple:
    """A step's inputs for 6 rows of 2 sentences after 3 positions: random tokens, keys and
    values."""
    torch.manual_seed(seed)
    tokens, position, self_k, self_v, cross_k, cross_v, mask = compiled_module._step_inputs(
        model, rows=6, sentences=2, earlier=3, src_len=5)  # fmt: skip
    return (torch.randint(4, model.config.vocab_size, tokens.shape), position, torch.randn_like(self_k),
            torch.randn_like(self_v), torch.randn_like(cross_k), torch.randn_like(cross_v), mask)  # fmt: skip
