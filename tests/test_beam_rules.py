"""`decode.length_penalty` and `decode.beam_rules`: the paper's length penalty and
tensor2tensor's beam rules by default, transformers' for imported models. Each rule on a
hand-set step of `BeamStrategy` (token ids: pad 0, unk 1, bos 2, eos 3, a 4, b 5); that the
rules together give transformers' translations is `tests/test_import.py`'s."""

from __future__ import annotations

import math

import pytest
import torch

from aiayn.decode.strategy import NEG_INF, BeamStrategy, length_penalty

PAD, EOS, A, B = 0, 3, 4, 5


def test_the_power_penalty_is_length_to_the_alpha_and_gnmt_stays_the_default():
    assert length_penalty(3, 0.6, "power") == pytest.approx(3**0.6)
    assert length_penalty(3, 0.6) == length_penalty(3, 0.6, "gnmt") == pytest.approx((8 / 6) ** 0.6)


def strategy(rules: str, beam: int = 2, max_len: int = 9, alpha: float = 1.0) -> BeamStrategy:
    """A strategy whose `beam` live hypotheses (log P 0, one token each) are about to step."""
    s = BeamStrategy(torch.full((1,), max_len), beam, 1, alpha, 0, EOS, PAD, penalty="power",
                     rules=rules)  # fmt: skip
    s.scores, s.tokens = torch.zeros(1, beam), torch.full((1, beam, 1), A)
    s.length = 1
    return s


def logp(*rows: dict[int, float]) -> torch.Tensor:
    """(1, rows, 6) log-probabilities, -20 where a row does not name a token."""
    out = torch.full((1, len(rows), 6), -20.0)
    for r, row in enumerate(rows):
        for token, value in row.items():
            out[0, r, token] = value
    return out


@pytest.mark.parametrize("rules, finished", [("t2t", True), ("transformers", False)])
def test_only_the_beam_best_candidates_finish_under_transformers_rules(rules, finished):
    """Candidates: row 0's a (-0.1) and b (-0.2), row 1's eos (-0.3), row 1's a (-0.4). The
    eos is third: within tensor2tensor's 2 * beam, beyond transformers' beam."""
    s = strategy(rules)
    rows, tokens, _ = s.step(logp({A: -0.1, B: -0.2, EOS: -5.0}, {EOS: -0.3, A: -0.4}))
    assert rows.tolist() == [0, 0] and tokens.tolist() == [A, B]  # live alike under both
    assert bool(s.fin_logp.gt(NEG_INF).any()) == finished
    if finished:
        assert s.fin_logp.max().item() == pytest.approx(-0.3)


def test_transformers_rules_stop_once_beam_have_finished_and_the_best_live_cannot_win_now():
    """Live best log P -2.5 at length 2: scored now, -1.25, it cannot beat the worst of the
    two finished (-1.2), and transformers stops; tensor2tensor's bound, -2.5 / 9, can."""
    done = {}
    for rules in ("transformers", "t2t"):
        s = strategy(rules)
        s.scores, s.length = torch.tensor([[-2.5, -3.0]]), 2
        kept = [-1.0, -1.2] if rules == "transformers" else [-1.0]  # beam, or nbest, kept
        s.fin_scores = torch.tensor([kept])
        done[rules] = bool(s._done().item())
    assert done == {"transformers": True, "t2t": False}
    s = strategy("transformers")  # one finished of the beam's two: it goes on
    s.scores, s.length = torch.tensor([[-2.5, -3.0]]), 2
    s.fin_scores = torch.tensor([[-1.0, NEG_INF]])
    assert not s._done().item()


@pytest.mark.parametrize("rules, eos_logp", [("t2t", -2.0), ("transformers", 0.0)])
def test_the_eos_forced_at_the_limit_is_certain_under_transformers_rules(rules, eos_logp):
    s = strategy(rules, max_len=2)  # the next token is the last: eos is forced
    s.scores = torch.tensor([[-1.0, -1.5]])
    s.step(logp({EOS: -2.0, A: -0.1}, {EOS: -3.0, A: -0.1}))
    assert s.fin_logp[0, 0].item() == pytest.approx(-1.0 + eos_logp)
    assert s.fin_scores[0, 0].item() == pytest.approx((-1.0 + eos_logp) / 2 ** 1.0)
    assert math.isinf(s.scores.max().item())  # nothing else was allowed
