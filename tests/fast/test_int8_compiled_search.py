"""An int8 model's compiled search (`fast/compiled_step.py` over `fast/int8.py`'s products),
against its eager int8 search. In a file of its own, apart from `test_static_step.py`'s
float32 build: each builds its model's libraries (minutes on two cores), and the suite's
workers take a file each (`--dist loadfile`), so the two builds run side by side."""

from __future__ import annotations

import json

import pytest

from aiayn import fast
from aiayn.fast.compiled_step import ByRows, artifact_path, can_compile, rows_file
from aiayn.fast.int8 import quantize_int8
from aiayn.fast.search_step import SearchStep
from aiayn.fast.static_search import StepSearch
from test_static_step import BEAMS, SOURCES, _model, _products, _same


@pytest.mark.slow
def test_an_int8_models_compiled_search_multiplies_in_int8_and_finds_the_eager_ones_hypotheses(
        tmp_path, monkeypatch):  # fmt: skip
    """`for_inference(int8=True)` builds the int8 model's step (in processes of their own,
    `compiled_step._build`): its wide libraries, frozen, call oneDNN's int8 products with no
    float product left; its narrow step and search step (not frozen) multiply in float32
    (`DecoderStep._linear`), and its source is wide only; the crossovers are timed for the
    step and the search step; and the compiled search finds the eager int8 `SearchStep`'s hypotheses
    (`linear_dynamic`'s products) for every beam config, through either library. Only where
    oneDNN adds the model's int8 products exactly (7-bit inputs, or 32-bit sums): elsewhere
    int8 models keep the eager search (`can_compile`, tested in `test_static_step.py`)."""
    if not can_compile(quantize_int8(_model(vocab_size=40))):
        pytest.skip("8-bit inputs where oneDNN is capped below VNNI: int8 models are not compiled")
    monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ByRows, "keep_used", lambda self: None)  # both libraries, to route to below
    model, search = fast.for_inference(_model(vocab_size=40), int8=True, compile="always")
    assert isinstance(search, StepSearch) and search.kind == "compiled decoder step"
    path = artifact_path(model)
    assert isinstance(search.search_step, ByRows) and not isinstance(search.source, ByRows)
    assert list(json.loads(rows_file(path).read_text())) == ["step", "search_step"]
    assert not (path / "source.pt2").exists()

    for name in ("step", "source", "search_step"):
        wide = _products(path / f"{name}-wide.pt2")
        assert wide and all(p.startswith("_qlinear_pointwise") for p in wide), wide
    for name in ("step", "search_step"):  # ATen's float products, or Inductor's own at these sizes
        assert not any("qlinear" in p for p in _products(path / f"{name}.pt2"))
    eager = StepSearch(model, search_step=SearchStep(model))
    for wide_from in (None, 1):  # every call through the narrow libraries, then the wide ones
        search.step.wide_from = search.search_step.wide_from = wide_from
        for config in BEAMS.values():
            _same(search(SOURCES, config), eager(SOURCES, config))
