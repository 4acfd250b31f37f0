"""`benchmarks/recipe_search.py`: each variant changes one thing of the recipe and gets the
updates its CPU cost allows; `benchmarks/gpu_levers.py`'s kernel kinds."""

import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gpu_levers  # noqa: E402
import recipe_search as search  # noqa: E402


def flat(config) -> dict:
    return {f"{part}.{k}": v for part, values in asdict(config).items()
            if isinstance(values, dict) for k, v in values.items()}  # fmt: skip


@pytest.mark.parametrize("name", [n for n in search.VARIANTS if n != "base"])
def test_each_variant_changes_only_what_it_names(name, tmp_path):
    base = flat(search.variant_config("base", tmp_path, tmp_path, []))
    varied = flat(search.variant_config(name, tmp_path, tmp_path, []))
    changed = {k for k in base if base[k] != varied[k]}
    overrides, vocab = search.VARIANTS[name]
    assert changed == {o.split("=")[0] for o in overrides}
    assert (vocab != search.VARIANTS["base"][1]) == (not overrides)  # else: the vocabulary


def test_a_variant_twice_as_costly_gets_half_the_updates():
    cost = {"base": 0.6, "layers_6": 1.2, "dropout_0.3": 0.6}
    assert [search.update_budget(5100, cost, n) for n in cost] == [5100, 2550, 5100]


def test_seconds_per_update_skips_the_first_updates(tmp_path):
    log = tmp_path / "train_log.jsonl"
    events = [{"event": "start", "step": 0}] + [
        {"event": "train", "step": s, "elapsed_s": 10.0 + (0 if s <= 10 else 0.5 * (s - 10))}
        for s in (5, 10, 15, 20, 25)
    ]  # slow warm-up to step 10, then 0.5 s per update
    log.write_text("\n".join(json.dumps(e) for e in events))
    assert search.seconds_per_update(log, skip=10) == pytest.approx(0.5)


def test_the_averages_keep_enough_checkpoints():
    assert search.KEEP == 9  # 5 taken two apart reach back 9 saves


@pytest.mark.parametrize("kernel, kind", [
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel", "attention"),
    ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_splitK_NTT", "matrix_products"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32", "matrix_products"),
    ("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", "optimizer"),
    ("triton_per_fused__to_copy_add_native_dropout_native_layer_norm_9", "compiled_elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>", "other"),
])  # fmt: skip
def test_gpu_kernels_are_sorted_by_kind(kernel, kind):
    assert gpu_levers.kind_of(kernel) == kind
