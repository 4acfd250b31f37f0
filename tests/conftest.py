"""Shared test helpers: tiny model configs and the location of the shared Multi30k data."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aiayn.config import ModelConfig

# ../shared beside the checkout; tests that need it skip cleanly when it is absent.
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def tiny_model_config(**overrides) -> ModelConfig:
    """d_model 16, 2+2 layers, 4 heads, vocab 23: fast, yet every part is exercised."""
    values = dict(vocab_size=23, d_model=16, n_heads=4, d_ff=32, n_layers=2, p_drop=0.0)
    values.update(overrides)
    return ModelConfig(**values)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)
