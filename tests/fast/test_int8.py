"""Int8 CPU inference (`aiayn.fast.int8`, `Translator(int8=True)`, `--int8`)."""

from __future__ import annotations

import pytest
import torch
import torch.ao.quantization as tq
import torch.nn.functional as F
from torch import nn

from aiayn.cli import main
from aiayn.errors import ConfigError
from aiayn.fast import int8 as int8_module
from aiayn.fast import linear as linear_module
from aiayn.fast.linear import OneDnnLinear as Linear
from aiayn.fast.linear import bucket_rows
from aiayn.fast.int8 import Int8Linear, int8_engine, onednn_sums_exact, seven_bits_more_exact
from aiayn.fast.kv_cache import SharedKVCache
from aiayn.translate import Translator
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

LINES = ["the cat sat on a mat", "", "der Hund", "die Katze sitzt auf einer Matte", "a"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("int8") / "ckpt")


def test_int8_translation_gives_one_output_per_input(ckpt):
    translator = Translator.from_checkpoint(ckpt, int8=True)
    out = translator.translate(LINES)
    assert len(out) == len(LINES) and out[1] == ""
    nbest = Translator.from_checkpoint(ckpt, int8=True, beam=3, nbest=3).translate_nbest(LINES)
    assert [len(h) for h in nbest] == [3, 1, 3, 3, 3]


def test_every_linear_map_is_int8_including_the_tied_projection(ckpt):
    model = Translator.from_checkpoint(ckpt, int8=True).model
    assert not any(isinstance(m, nn.Linear) for m in model.modules())  # all replaced
    hidden = torch.randn(3, model.config.d_model)
    float_logits = hidden @ model.tgt_embed.weight.t()  # the float tied projection
    int8_logits = model.project(hidden)  # (3, vocab)
    assert int8_logits.shape == float_logits.shape
    assert not torch.equal(int8_logits, float_logits)  # a different (int8) product of ...
    scale = float_logits.abs().max().item()
    assert torch.allclose(int8_logits, float_logits, atol=0.05 * scale)  # ... the same matrix


def on_engine(engine: str, fn):
    """fn() with the quantized engine set to `engine`; the setting is put back."""
    previous, torch.backends.quantized.engine = torch.backends.quantized.engine, engine
    try:
        return fn()
    finally:
        torch.backends.quantized.engine = previous


def fake_cpu(monkeypatch, amx: bool, vnni: bool) -> None:
    """Make `int8_engine` see a CPU with or without AMX tiles and AVX-512 VNNI, oneDNN
    uncapped."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_vnni_supported", lambda: vnni, raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)


@pytest.mark.parametrize(("amx", "vnni"), [(True, True), (False, True), (True, False), (False, False)])
def test_int8_engine_is_onednn_with_amx_or_vnni_and_the_setting_is_put_back(
    ckpt, monkeypatch, amx, vnni
):
    fake_cpu(monkeypatch, amx, vnni)
    default = torch.backends.quantized.engine
    onednn = "onednn" in torch.backends.quantized.supported_engines
    expected = "onednn" if (amx or vnni) and onednn else default
    assert int8_engine() == expected
    packed_with, pack = [], Int8Linear.pack

    def spy(*args, **kwargs):  # records the engine each matrix is packed for
        packed_with.append(torch.backends.quantized.engine)
        return pack(*args, **kwargs)

    monkeypatch.setattr(Int8Linear, "pack", spy)
    model = Translator.from_checkpoint(ckpt, int8=True).model
    assert packed_with and set(packed_with) == {expected}
    assert torch.backends.quantized.engine == default
    # 7- or 8-bit inputs, whichever the kernels of the engine packed for make more exact.
    linears = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert linears and {m.reduce_range for m in linears} == {on_engine(expected, seven_bits_more_exact)}
    assert isinstance(model.out_proj, Int8Linear)  # the tied pre-softmax projection too


@pytest.mark.parametrize(
    ("variable", "cap", "onednn"),
    [("ONEDNN_MAX_CPU_ISA", "AVX2", False), ("ONEDNN_MAX_CPU_ISA", "avx512_core", False),
     ("DNNL_MAX_CPU_ISA", "SSE41", False), ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI", True),
     ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX", True), ("ONEDNN_MAX_CPU_ISA", "ALL", True)],
)  # fmt: skip
def test_int8_engine_keeps_the_default_where_onednn_is_capped_below_vnni(monkeypatch, variable, cap, onednn):
    """On an AMX CPU run with AVX2's kernels (`ONEDNN_MAX_CPU_ISA=AVX2`), oneDNN's u8 x s8
    products add in 16 bits: the 8-bit inputs that an uncapped AMX CPU may keep would
    saturate, so the engine is the default, as on a CPU without VNNI."""
    fake_cpu(monkeypatch, amx=True, vnni=True)
    monkeypatch.setenv(variable, cap)
    if "onednn" not in torch.backends.quantized.supported_engines:
        pytest.skip("this PyTorch has no oneDNN quantized engine")
    assert int8_engine() == ("onednn" if onednn else torch.backends.quantized.engine)


@pytest.mark.parametrize("native", [True, False], ids=["bf16-products", "no-bf16"])
@torch.no_grad()
def test_int8_cache_keeps_encoder_decoder_keys_in_bfloat16_where_the_cpu_multiplies_it(
    ckpt, monkeypatch, native
):
    """Where the CPU has bfloat16 products the int8 model's cache keeps the encoder-decoder
    keys and values in bfloat16, elsewhere in float32; decoding through it stays as close
    to float32 as int8's tolerance (`test_int8_log_probs_are_close_to_float32`). Measured
    on this tiny model over 3 draws: at most 0.065-0.099 from float32 with bfloat16 stores,
    0.067-0.086 with float32 ones (mean 0.012-0.014 both); bfloat16 stores alone, on the
    float32 model, 0.007-0.012."""
    for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):  # `native_bf16`'s
        monkeypatch.setattr(torch.cpu, check, lambda: native, raising=False)
    int8 = Translator.from_checkpoint(ckpt, int8=True)
    exact = Translator.from_checkpoint(ckpt)
    assert int8.search.cross_dtype == (torch.bfloat16 if native else None)
    assert exact.search.cross_dtype is None  # float32 models keep float32 stores
    gen = torch.Generator().manual_seed(2)
    vocab = exact.model.config.vocab_size
    src = torch.randint(4, vocab, (3, 7), generator=gen)  # (batch, src_len)
    tgt_in = torch.randint(4, vocab, (3, 6), generator=gen)  # (batch, tgt_len)

    def cached(translator):  # -> (batch, tgt_len, vocab) log P, a step at a time, and the cache
        model = translator.model
        src_pad = model.pad_mask(src)
        memory = model.encode(src, src_pad)
        search = translator.search  # the search's own cache
        cache = SharedKVCache(len(model.decoder), src_pad, cross_dtype=search.cross_dtype)
        steps = [model.decode(tgt_in[:, t : t + 1], memory, src_pad, cache) for t in range(6)]
        return model.project(torch.cat(steps, dim=1)).log_softmax(-1), cache

    got, cache = cached(int8)
    assert cache.layers[0].cross_k.dtype == (torch.bfloat16 if native else torch.float32)
    diff = (got - cached(exact)[0]).abs()
    assert diff.max() < 0.3 and diff.mean() < 0.05


@pytest.mark.filterwarnings("ignore:.*deprecated:DeprecationWarning")
def test_int8_inputs_keep_8_bits_only_where_they_are_the_more_exact(ckpt):
    """Relative error of one product against float32, on the engine `int8_engine` picks
    here: with 32-bit sums (AMX, AVX-512 VNNI) 8-bit inputs ~1.1%, 7-bit ~2.1%; without,
    8-bit inputs overflow the 16-bit sums (~8%). The model packs the more exact one, which
    `seven_bits_more_exact` measures on a product of its own (other weights and inputs)."""
    gen = torch.Generator().manual_seed(0)
    linear = nn.Linear(512, 1024)
    x = torch.randn(128, 512, generator=gen)  # (tokens, d_model)
    with torch.no_grad():
        exact = linear(x)  # (tokens, 1024)
        previous, engine = torch.backends.quantized.engine, int8_engine()
        torch.backends.quantized.engine = engine
        try:
            errors = {
                seven: ((Int8Linear.pack(linear.weight, linear.bias, seven)(x) - exact).norm()
                        / exact.norm()).item()
                for seven in (False, True)
            }  # fmt: skip
        finally:
            torch.backends.quantized.engine = previous
    model = Translator.from_checkpoint(ckpt, int8=True).model
    chosen = {m.reduce_range for m in model.modules() if isinstance(m, Int8Linear)}
    assert chosen == {min(errors, key=errors.get)} and errors[chosen.pop()] < 0.025
    if engine == "onednn":
        assert errors[False] < 0.015 < errors[True]


@pytest.mark.filterwarnings("ignore:.*deprecated:DeprecationWarning")
@pytest.mark.parametrize("cls", [nn.Linear, Linear])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_weights_are_pytorchs_dynamic_quantization(cls, bias):
    """`Int8Linear.pack` quantizes as `quantize_dynamic` with the per-channel qconfig does
    (the same int8 weights, scales and outputs), also for aiayn's `Linear`, which
    `quantize_dynamic` itself would leave in float."""
    gen = torch.Generator().manual_seed(0)
    linear = cls(64, 48, bias=bias)
    x = torch.randn(5, 7, 64, generator=gen)  # (batch, len, in)
    plain = nn.Linear(64, 48, bias=bias)
    plain.load_state_dict(linear.state_dict())
    qconfig = {nn.Linear: tq.per_channel_dynamic_qconfig}
    reference = tq.quantize_dynamic(nn.Sequential(plain), qconfig)[0]
    ours = Int8Linear.pack(linear.weight, linear.bias, reduce_range=True)
    with torch.no_grad():
        assert torch.equal(ours(x), reference(x))
        assert not torch.equal(ours(x), linear(x))  # int8, not the float product


@pytest.mark.parametrize("tied", [True, False])
def test_int8_log_probs_are_close_to_float32(tmp_path, tied):
    """Teacher-forced log P over the whole vocabulary, float32 against int8, with the int8
    kernels this CPU runs (`int8_engine`: oneDNN on AMX or AVX-512 VNNI, else PyTorch's
    default engine; 7- or 8-bit inputs as measured more exact). The choice of engine is
    tested above, without running kernels: a CPU without exact 32-bit sums that ran
    oneDNN's u8 x s8 products with 8-bit inputs would saturate their 16-bit pair sums (max
    error 1.4-2.2 here), which no CPU does.

    8-bit weights (a scale per row) and 7- or 8-bit inputs (a scale per call) put an error
    of about 1-2% on each product; at this tiny size (d_model 16) that measured at most
    ~0.17 and on average ~0.02 in log-probability. Tolerance: max 0.3, mean 0.05.
    Quantizing with a wrong matrix (another layer's, a transposed one) moves them by about
    their spread, ~1.
    """
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt", tie_embeddings=tied)
    exact = Translator.from_checkpoint(ckpt).model
    int8 = Translator.from_checkpoint(ckpt, int8=True).model
    seven_bits = on_engine(int8_engine(), seven_bits_more_exact)
    assert {m.reduce_range for m in int8.modules() if isinstance(m, Int8Linear)} == {seven_bits}
    gen = torch.Generator().manual_seed(1)
    vocab = exact.config.vocab_size
    src = torch.randint(4, vocab, (4, 12), generator=gen)  # (batch, src_len)
    tgt_in = torch.randint(4, vocab, (4, 10), generator=gen)  # (batch, tgt_len)
    with torch.no_grad():
        a = exact(src, tgt_in).log_softmax(dim=-1)  # (batch, tgt_len, vocab)
        b = int8(src, tgt_in).log_softmax(dim=-1)
    diff = (a - b).abs()
    assert diff.max() < 0.3 and diff.mean() < 0.05
    assert diff.max() > 0  # it did quantize


def test_cli_int8_translates_and_evaluates_with_an_int8_model(ckpt, tmp_path, monkeypatch, capsys):
    import aiayn.fast

    calls = []
    quantize = aiayn.fast.quantize_int8
    monkeypatch.setattr(aiayn.fast, "quantize_int8", lambda m: calls.append(1) or quantize(m))
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["--checkpoint", str(ckpt), "--int8"]
    assert main(["translate", *args, "-i", str(src), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8").count("\n") == len(LINES)
    ref = tmp_path / "ref.de"
    ref.write_text("".join(f"{line}\n" for line in LINES if line), encoding="utf-8")
    assert main(["evaluate", *args, "--src", str(ref), "--ref", str(ref), "--json"]) == 0
    assert '"sacrebleu"' in capsys.readouterr().out
    assert len(calls) == 2  # each command quantized its model


def test_int8_is_refused_on_cuda_and_for_half_precision(ckpt, capsys):
    with pytest.raises(ConfigError, match="CPU only"):
        Translator.from_checkpoint(ckpt, device="cuda", int8=True)
    with pytest.raises(ConfigError, match="float32"):
        Translator.from_checkpoint(ckpt, dtype="bfloat16", int8=True)
    assert main(["translate", "--checkpoint", str(ckpt), "--int8", "--device", "cuda"]) == 2
    assert "int8 quantization runs on the CPU only" in capsys.readouterr().err


def test_quantizing_prints_no_deprecation_warnings(ckpt):
    """torch.ao's quantized-tensor functions warn that they are deprecated; a user of
    `--int8` has nothing to do about it, so `quantize_int8` keeps them quiet."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Translator.from_checkpoint(ckpt, int8=True)
    assert not [w for w in caught if "deprecated" in str(w.message)]


@pytest.mark.parametrize("seven", [False, True], ids=["8-bit inputs", "7-bit inputs"])
@pytest.mark.parametrize("cap", [None, "AVX2"], ids=["no cap", "oneDNN capped to AVX2"])
def test_the_traced_form_computes_the_packed_product(seven, cap, monkeypatch):
    """`Int8Linear.graph_form` (what a compiler traces) gives `linear_dynamic`'s product: the
    same int8 weights and scales, the input quantized per tensor to the same levels."""
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    if cap:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    else:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    torch.manual_seed(0)
    linear = nn.Linear(48, 24)
    int8 = Int8Linear.pack(linear.weight, linear.bias, seven)
    x = torch.randn(2, 5, 48)  # (batch, tokens, in): one input scale over all of it
    assert int8.input_max == (127 if seven else 255)  # the eager products' levels
    assert int8.sums_exact_in_onednn == (seven or onednn_sums_exact())
    packed = torch.ops.quantized.linear_dynamic(x, int8.packed, reduce_range=seven)
    if seven or not seven_bits_more_exact():  # the engine's sums exact for these bits
        torch.testing.assert_close(int8.graph_form(x), packed, atol=1e-5, rtol=0)
    assert int8.weight_int8.dtype == torch.int8
    weight, _ = torch.ops.quantized.linear_unpack(int8.packed)
    assert torch.equal(int8.weight_int8, weight.int_repr())


def test_the_traced_form_multiplies_bucketed_row_counts_only(monkeypatch):
    """oneDNN keeps a kernel per row count it meets, so the traced form pads its rows to
    `bucket_rows` sizes before the product (as eager oneDNN products do) and cuts the
    padding off after: any number of rows gives one of a bounded set of shapes, and the
    same values as without the padding."""
    torch.manual_seed(0)
    int8 = Int8Linear.pack(torch.randn(24, 48), torch.randn(24), False)
    seen, linear = [], F.linear

    def spy(x, weight, bias=None):
        seen.append(x.size(0))
        return linear(x, weight, bias)

    for rows in (1, 7, 9, 64, 65, 130, 300):
        x = torch.randn(rows, 48)
        with monkeypatch.context() as unpadded:
            unpadded.setattr(linear_module, "bucket_rows", lambda n: n)
            expected = int8.graph_form(x)
        with monkeypatch.context() as spied:
            spied.setattr(int8_module.F, "linear", spy)
            got = int8.graph_form(x)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert seen == [8, 8, 16, 64, 72, 144, 320]
