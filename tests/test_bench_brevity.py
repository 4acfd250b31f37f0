"""`benchmarks/brevity.py`'s teacher-forced eos profile: the same figures as one sentence at
a time through the model's own forward pass (batching and padding change none of them)."""

import math
import sys
from pathlib import Path

import torch

from aiayn.translate import Translator
from tiny_checkpoint import save_tiny_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import brevity as bench  # noqa: E402


def test_eos_profile_is_the_models_eos_probability_sentence_by_sentence(tmp_path):
    checkpoint = save_tiny_checkpoint(tmp_path / "ckpt")
    src = ["the cat sat on a mat", "der Hund", "die Katze sitzt auf einer Matte the cat"]
    ref = ["der Hund sitzt", "the cat sat on a mat der Hund", "a"]
    profile = bench.eos_profile(str(checkpoint), src, ref, max_tokens=20)  # several batches

    translator = Translator.from_checkpoint(checkpoint, reference=True)
    model, eos, bos = translator.model, translator.tgt_vocab.eos_id, translator.tgt_vocab.bos_id
    at_end, before, first, stop = [], [], 0, []
    with torch.no_grad():
        for s, r in zip(src, ref):
            s_ids = translator.src_vocab.encode(s) + [eos]
            r_ids = translator.tgt_vocab.encode(r)
            logits = model(torch.tensor([s_ids]), torch.tensor([[bos] + r_ids]))[0]  # (len, V)
            p = logits.softmax(-1)[:, eos]  # (len,)
            at_end.append(float(p[-1]))
            before += p[:-1].tolist()
            first += int(logits[:-1].argmax(-1).eq(eos).sum())
            stop.append(1 - math.prod(1 - x for x in p[:-1].tolist()))
    assert math.isclose(profile["p_eos_at_reference_end"], sum(at_end) / 3, abs_tol=1e-5)
    assert math.isclose(profile["p_eos_before_end"], sum(before) / len(before), abs_tol=1e-5)
    assert profile["eos_first_choice_before_end"] == round(first / len(before), 5)
    assert math.isclose(profile["p_stop_early_sampling"], sum(stop) / 3, abs_tol=1e-5)
