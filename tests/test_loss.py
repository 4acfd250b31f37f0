"""Label smoothing (sec. 5.4): eps / (V - 1) on every non-target class, padding ignored."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn.loss import label_smoothed_loss


def test_equals_a_hand_computed_value() -> None:
    # V = 3, one position, target 0, log p = log(0.5, 0.25, 0.25), eps = 0.1:
    # q = (0.9, 0.05, 0.05); H(q, p) = 0.9 log 2 + 2 * 0.05 * log 4 = 1.1 log 2.
    lprobs = torch.tensor([[math.log(0.5), math.log(0.25), math.log(0.25)]])
    smoothed, nll = label_smoothed_loss(lprobs, torch.tensor([0]), 0.1)
    assert smoothed.item() == pytest.approx(1.1 * math.log(2), rel=1e-6)
    assert nll.item() == pytest.approx(math.log(2), rel=1e-6)


def test_equals_cross_entropy_against_the_smoothed_distribution() -> None:
    logits, target, eps = torch.randn(5, 7), torch.tensor([1, 2, 0, 6, 3]), 0.2
    q = torch.full((5, 7), eps / 6).scatter(1, target[:, None], 1 - eps)
    expected = -(q * logits.log_softmax(-1)).sum()
    smoothed, _ = label_smoothed_loss(logits, target, eps)
    torch.testing.assert_close(smoothed, expected)


def test_eps_zero_is_plain_nll() -> None:
    logits, target = torch.randn(2, 4, 9), torch.randint(1, 9, (2, 4))
    smoothed, nll = label_smoothed_loss(logits, target, 0.0, pad_id=0)
    expected = torch.nn.functional.cross_entropy(logits.view(-1, 9), target.view(-1), reduction="sum")
    torch.testing.assert_close(smoothed, expected)
    torch.testing.assert_close(nll, expected)


def test_padding_changes_nothing() -> None:
    logits, target = torch.randn(3, 9), torch.tensor([4, 5, 6])
    padded_logits = torch.cat([logits, torch.randn(4, 9) * 100])  # arbitrary scores on padding
    padded_target = torch.cat([target, torch.zeros(4, dtype=torch.long)])
    clean = label_smoothed_loss(logits, target, 0.1, pad_id=0)
    padded = label_smoothed_loss(padded_logits, padded_target, 0.1, pad_id=0)
    for a, b in zip(clean, padded):
        torch.testing.assert_close(a, b)


def test_half_precision_scores_are_computed_in_float32() -> None:
    logits, target = torch.randn(4, 11), torch.tensor([1, 2, 3, 4])
    smoothed, _ = label_smoothed_loss(logits.bfloat16(), target, 0.1)
    assert smoothed.dtype == torch.float32
    torch.testing.assert_close(smoothed, label_smoothed_loss(logits.bfloat16().float(), target, 0.1)[0])
