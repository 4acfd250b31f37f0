"""The misaligned filter's judge (`data/lexical.py`): IBM Model 1 learns a dictionary from
parallel text alone, the judge finds sentences beside another pair's translation and keeps
real translations, and what it cannot judge (short sides, unknown words) it keeps."""

from __future__ import annotations

import random

from aiayn.data.clean import MIN_ALIGNMENT_SAMPLE, PairFilter
from aiayn.data.demo_corpus import demo_splits
from aiayn.data.lexical import MisalignmentJudge, Model1, reservoir, words
from aiayn.data.prepare_options import CLEANING, CleanOptions

ONLY = CleanOptions(skip=tuple(f for f in CLEANING if f != "misaligned"))


def test_model1_learns_a_dictionary_from_sentences_in_any_word_order():
    """Word-for-word translations, shuffled in each sentence: EM finds each word's own
    translation as its likeliest one, with no other hint."""
    rng = random.Random(0)
    lexicon = {f"e{i}": f"f{i}" for i in range(30)}
    src, tgt = [], []
    for _ in range(600):
        sentence = rng.sample(sorted(lexicon), rng.randint(3, 8))
        src.append(sentence)
        tgt.append(rng.sample([lexicon[w] for w in sentence], len(sentence)))
    model = Model1.learn(src, tgt)
    n_tgt, by_id = len(model.tgt_ids), {i: w for w, i in model.tgt_ids.items()}
    for e, f in lexicon.items():
        rows = model.keys // n_tgt == model.src_ids[e]
        best = model.keys[rows][model.probs[rows].argmax()] % n_tgt
        assert by_id[int(best)] == f
        assert model.probs[rows].max() > 0.5


def test_the_judge_finds_misaligned_pairs_and_keeps_translations():
    """A corpus with 5% of its pairs misaligned (a source beside another pair's target):
    learned from the corpus itself, the judge removes at least 90% of those and under 3%
    of the translations."""
    rng = random.Random(1)
    good = demo_splits(n_train=2000, n_valid=0, n_test=0, seed=7).train
    bad = [(good[i][0], good[rng.randrange(len(good))][1]) for i in rng.sample(range(2000), 100)]
    judge = MisalignmentJudge.learn(good + bad, mads=2.5, min_words=3)
    judged_good = [p for p in good if judge.score(*p) is not None]
    judged_bad = [p for p in bad if judge.score(*p) is not None]
    assert len(judged_bad) >= 90 and len(judged_good) >= 1500
    assert sum(judge.is_misaligned(*p) for p in judged_bad) >= 0.9 * len(judged_bad)
    assert sum(judge.is_misaligned(*p) for p in judged_good) < 0.03 * len(judged_good)
    assert judge.pairs == 2100


def test_what_the_judge_cannot_judge_is_kept():
    good = demo_splits(n_train=500, n_valid=0, n_test=0, seed=7).train
    judge = MisalignmentJudge.learn(good, mads=2.5, min_words=3)
    assert judge.score("Yes.", "Nein.") is None  # a side of under 3 words
    assert judge.score("Zorro Quixote Pinocchio", "Xanadu Ypsilon Zebulon") is None  # no known word
    assert not judge.is_misaligned("Zorro Quixote Pinocchio", "Xanadu Ypsilon Zebulon")
    # a rare name beside known words does not sink a translation: it is left out of the mean
    src, tgt = good[0]
    assert judge.score(src + " Zorro", tgt + " Zorro") is not None
    assert not judge.is_misaligned(src + " Zorro", tgt + " Zorro")
    assert words("Er wurde 1956 in Ulm geboren.") == ["er", "wurde", "1956", "in", "ulm", "geboren"]


def test_reservoir_is_a_uniform_sample_of_a_stream_and_holds_only_it():
    assert reservoir(iter([("a", "b"), ("c", "d")]), 5, seed=1) == [("a", "b"), ("c", "d")]
    stream = [(str(i), str(i)) for i in range(1000)]
    sample = reservoir(iter(stream), 100, seed=1)
    assert len(sample) == len(set(sample)) == 100 and set(sample) <= set(stream)
    assert sample == reservoir(iter(stream), 100, seed=1) != reservoir(iter(stream), 100, seed=2)
    firsts = sum(int(s) < 500 for s, _ in sample)
    assert 30 < firsts < 70  # both halves of the stream, not its start only
    counts = [0] * 10  # each item is as likely to be kept
    for seed in range(300):
        for s, _ in reservoir(iter(stream[:10]), 3, seed):
            counts[int(s)] += 1
    assert all(60 < c < 120 for c in counts), counts  # 90 expected each


def test_the_pair_filter_learns_from_the_pairs_the_others_keep_and_says_so():
    good = demo_splits(n_train=600, n_valid=0, n_test=0, seed=7).train
    noise = [("<p>A man.</p>", "<p>Ein Mann.</p>")] * 50  # the markup filter's, not learned from
    pair_filter = PairFilter(CleanOptions(), "en", "de")
    pair_filter.learn_alignment(iter(good + noise))
    assert pair_filter.misaligned is not None and pair_filter.misaligned.pairs == 600
    (note,) = [n for n in pair_filter.notes if n.startswith("misaligned:")]
    assert "learned from 600 pairs" in note and f"{pair_filter.misaligned.threshold:.3f}" in note
    misaligned = [(good[i][0], good[i + 1][1]) for i in range(40)]
    reasons = [pair_filter.reason(*p) for p in misaligned]
    assert reasons.count("misaligned") >= 30  # the others: kept, or caught by char_ratio
    assert [pair_filter.reason(*p) for p in good[:40]].count(None) >= 39

    skipped = PairFilter(CleanOptions(skip=("misaligned",)), "en", "de")
    skipped.learn_alignment(iter(good))
    assert skipped.misaligned is None and not skipped.notes
    few = PairFilter(ONLY, "en", "de")
    few.learn_alignment(iter(good[: MIN_ALIGNMENT_SAMPLE - 1]))
    assert few.misaligned is None and "not run, 199 pairs to learn from" in few.notes[0]
    dense = PairFilter(ONLY, "en", "zh")
    dense.learn_alignment(iter(good))
    assert dense.misaligned is None and "written without spaces" in dense.notes[-1]
