"""Several models in one `aiayn serve`: routing by pair, `/languages` with the pairs reached
through English, language identification (`/detect`, `"source": "auto"`), pivoting, and
the real LibreTranslate clients against it.

The three models are en -> de, de -> en and en -> fr: an English-centred set, as
LibreTranslate's pivoting needs (source -> en, en -> target), so that de -> fr has no model
of its own and goes through English. Most tests use tiny checkpoints with different random
weights (another seed each): what is tested is which model translated, and each model's
output is told apart by being compared with that model's own translation, sentence by
sentence. The real clients' test trains en -> de on the demo corpus and de -> en on it
reversed, in seconds; the demo corpus has no French, so en -> fr stays a random stand-in.
The demo corpus gives the English and German sentences `/detect` is scored on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import time
from pathlib import Path

import libretranslate_aio as lta
import pytest
from libretranslatepy import LibreTranslateAPI

from aiayn.cli import main
from aiayn.data.demo_corpus import DemoSplits, demo_splits, write_splits
from aiayn.data.prepare import prepare
from aiayn.data.prepare_options import PrepareOptions
from aiayn.errors import ConfigError
from aiayn.serve.batcher import Batcher, Job, Turns
from aiayn.serve.models import checkpoint_paths
from aiayn.serve.pivot import compose
from aiayn.serve.service import ServeConfig, Service, batch_slots
from aiayn.text.language import LanguageIdentifier
from aiayn.train.trainer import train
from aiayn.translate import Translator
from serve_helpers import PAGE, alone, request, running, tag_tree
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread, tiny_config  # noqa: F401 (autouse fixture)

PAIRS = {"en-de": 1, "de-en": 2, "en-fr": 3}  # each model's seed
ENGLISH = ["The cat sat on a mat.", "A man reads the book.", "the cat"]
GERMAN = ["Die Katze sitzt auf einer Matte.", "Der Hund schläft im Garten.", "der Hund"]


def pair_meta(name: str) -> dict:
    source, target = name.split("-")
    return {"languages": {"source": source, "target": target}}


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi")
    return {name: save_tiny_checkpoint(root / name, meta=pair_meta(name), seed=seed)
            for name, seed in PAIRS.items()}  # fmt: skip


@pytest.fixture(scope="module")
def lone(ckpts):
    """Each model's own translation of each sentence, and en -> fr of de -> en's."""
    out = {"en-de": alone(ckpts["en-de"], ENGLISH), "de-en": alone(ckpts["de-en"], GERMAN),
           "en-fr": alone(ckpts["en-fr"], ENGLISH)}  # fmt: skip
    out["de-en-fr"] = {s: alone(ckpts["en-fr"], [e])[e] for s, e in out["de-en"].items()}
    return out


@pytest.fixture(scope="module")
def url(ckpts):
    config = ServeConfig([str(p) for p in ckpts.values()], max_beam=4, threads=1)
    with running(config) as (url, _):
        yield url


LANGUAGES = [{"code": "en", "name": "English", "targets": ["de", "fr"]},
             {"code": "de", "name": "German", "targets": ["en", "fr"]},
             {"code": "fr", "name": "French", "targets": []}]  # fmt: skip


def test_the_models_translate_differently(lone):
    """The test can tell the models apart: their translations of the same text differ."""
    assert lone["en-de"] != lone["en-fr"]
    assert any(lone["de-en-fr"][s] != lone["de-en"][s] for s in GERMAN)


def test_languages_info_and_routing_by_pair(url, lone):
    assert request(f"{url}/languages").body == LANGUAGES
    info = request(f"{url}/info").body
    assert [m["name"] for m in info["models"]] == list(PAIRS)
    assert [m["languages"] for m in info["models"]] == [pair_meta(n)["languages"] for n in PAIRS]
    assert all(m["ready"] and m["model"]["parameters"] > 0 for m in info["models"])
    for name in ("en-de", "en-fr", "de-en"):
        source, target = name.split("-")
        texts = ENGLISH if source == "en" else GERMAN
        got = request(f"{url}/v1/translate", {"text": texts, "source": source, "target": target})
        assert got.status == 200, got.body
        assert [t["text"] for t in got.body["translations"]] == [lone[name][s] for s in texts]
        assert all(t["models"] == [name] for t in got.body["translations"])


def test_a_pair_without_a_model_goes_through_english_and_says_so(url, lone):
    body = {"text": GERMAN, "source": "de", "target": "fr", "alignment": True}
    got = request(f"{url}/v1/translate", body).body["translations"]
    assert [t["text"] for t in got] == [lone["de-en-fr"][s] for s in GERMAN]
    assert all(t["models"] == ["de-en", "en-fr"] for t in got)
    for t, s in zip(got, GERMAN):
        (sentence,) = t["sentences"]
        assert sentence["pivot"]["model"] == "de-en"
        assert sentence["pivot"]["text"] == lone["de-en"][s]
    libre = request(f"{url}/translate", {"q": GERMAN[0], "source": "de", "target": "fr"}).body
    assert libre == {"translatedText": lone["de-en-fr"][GERMAN[0]], "models": ["de-en", "en-fr"]}


def test_alignments_through_english_compose_both_legs(url):
    """A pivoted sentence's links are those of de -> en composed with those of en -> fr."""
    sentence = GERMAN[0]
    ask = {"alignment": True, "split": False}
    via = request(f"{url}/v1/translate", {"text": sentence, "source": "de", "target": "fr", **ask})
    (got,) = via.body["translations"]
    first = request(f"{url}/v1/translate", {"text": sentence, "source": "de", "target": "en",
                                            **ask}).body["translations"][0]  # fmt: skip
    second = request(f"{url}/v1/translate", {"text": first["text"], "source": "en",
                                             "target": "fr", **ask}).body["translations"][0]
    expected = compose([tuple(x) for x in first["alignment"]],
                       [tuple(x) for x in second["alignment"]])  # fmt: skip
    assert [tuple(x) for x in got["alignment"]] == expected


def test_compose_links_through_the_shared_word():
    assert compose([(0, 0), (1, 2), (2, 1)], [(0, 1), (2, 0), (2, 3)]) == [(0, 1), (1, 0), (1, 3)]
    assert compose([(0, 5)], [(0, 0)]) == []  # nothing links the English word onwards


def test_html_through_english_keeps_its_tags(url):
    body = {"q": PAGE, "source": "de", "target": "fr", "format": "html"}
    got = request(f"{url}/translate", body)
    assert got.status == 200, got.body
    assert tag_tree(got.body["translatedText"]) == tag_tree(PAGE)
    assert got.body["models"] == ["de-en", "en-fr"]


def test_auto_detects_the_source_and_routes_by_it(url, lone):
    german = request(f"{url}/translate", {"q": GERMAN[1], "source": "auto", "target": "en"}).body
    assert german["translatedText"] == lone["de-en"][GERMAN[1]]
    assert german["detectedLanguage"]["language"] == "de"
    assert german["detectedLanguage"]["confidence"] > 50
    english = request(f"{url}/v1/translate", {"text": ENGLISH[1], "target": "fr"}).body
    assert english["translations"][0]["text"] == lone["en-fr"][ENGLISH[1]]
    detected = request(f"{url}/detect", {"q": ENGLISH[1]}).body
    assert [d["language"] for d in detected] == ["en", "de"]  # the languages read, ranked
    assert detected[0]["confidence"] > detected[1]["confidence"]


# The share of held-out sentences /detect must name right (issue #54's bar). Measured: 200 of
# 200 English and 200 of 200 German (demo test split, seed 11), and 200 of 200 of each on
# Multi30k's test_2016_flickr, on an AMD EPYC Zen 3 (AVX2). py3langid is a naive Bayes model
# (NumPy sums over n-gram counts, no torch, no training): no seed or torch kernel setting
# moves it; the test also passes with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2.
DETECT_ACCURACY_FLOOR = 0.95


def test_detect_is_right_on_held_out_sentences_of_each_language(url):
    """200 sentences of five words or more per language the server reads (the demo
    corpus's test split: English and its German): at least 95% detected right."""
    pairs = demo_splits(n_train=0, n_valid=0, n_test=600, seed=11).test
    long = [(en, de) for en, de in pairs if len(en.split()) >= 5 and len(de.split()) >= 5][:200]
    assert len(long) == 200
    for index, language in ((0, "en"), (1, "de")):
        right = sum(request(f"{url}/detect", {"q": pair[index]}).body[0]["language"] == language
                    for pair in long)  # fmt: skip
        assert right / len(long) >= DETECT_ACCURACY_FLOOR, (language, right)


def test_a_pair_the_models_do_not_reach_is_refused_naming_what_they_do(url):
    libre = request(f"{url}/translate", {"q": "x", "source": "fr", "target": "de"})
    assert libre.status == 400
    assert "fr -> de is not a pair this server translates" in libre.body["error"]
    assert "en -> de, de -> en, en -> fr" in libre.body["error"]
    v1 = request(f"{url}/v1/translate", {"text": "x", "source": "de", "target": "de"})
    assert v1.status == 422 and "de -> de" in v1.body["error"]
    no_target = request(f"{url}/v1/translate", {"text": "x", "source": "en"})
    assert no_target.status == 422 and '"target" is required' in no_target.body["error"]


def trained(root: Path, source: str, target: str) -> Path:
    """A d_model-16 model trained 20 updates (a second or two) on 300 demo-corpus pairs,
    English -> German, or the same pairs reversed; it records the prepared data's pair."""
    splits = demo_splits(n_train=300, n_valid=40, n_test=1, seed=7)
    if source != "en":
        splits = DemoSplits(*([(b, a) for a, b in part] for part in dataclasses.astuple(splits)))
    raw = write_splits(splits, root / "raw", src=source, tgt=target)
    options = PrepareOptions(vocab_size=400, workers=1, quiet=True, src=source, tgt=target)
    prepare(train=raw["train"], valid=raw["valid"], out=root / "prepared", options=options)
    config = tiny_config(root / "prepared", root / "run", "decode.max_len_offset=4")
    return train(config).final_checkpoint


@pytest.fixture(scope="module")
def clients_url(ckpts, tmp_path_factory):
    """en -> de and de -> en trained (the demo corpus and its reverse), and the random
    en -> fr: the demo corpus has no French, so the third pair is a stand-in model."""
    root = tmp_path_factory.mktemp("trained")
    paths = [trained(root / "ende", "en", "de"), trained(root / "deen", "de", "en"),
             ckpts["en-fr"]]  # fmt: skip
    with running(ServeConfig([str(p) for p in paths], threads=1)) as (url, _):
        own = {name: Translator.from_checkpoint(path) for name, path in zip(PAIRS, paths)}
        yield url, own


@pytest.mark.slow  # two models trained: seconds each
def test_the_real_clients_see_every_pair_detect_and_pivot(clients_url):
    """libretranslatepy and libretranslate-aio (sync and async) against trained models:
    the pairs listed with those through English, "auto" detected and routed, de -> fr
    through English, and the answer saying which models translated."""
    url, own = clients_url

    def by(name: str, sentences: list[str]) -> dict[str, str]:
        return {s: own[name].translate([s])[0] for s in sentences}

    lone = {"en-de": by("en-de", ENGLISH), "de-en": by("de-en", GERMAN)}
    lone["de-en-fr"] = {s: own["en-fr"].translate([e])[0] for s, e in lone["de-en"].items()}
    client = LibreTranslateAPI(url)
    assert client.languages() == LANGUAGES
    assert client.translate(GERMAN[0], "auto", "en") == lone["de-en"][GERMAN[0]]
    assert client.translate(GERMAN[0], "de", "fr") == lone["de-en-fr"][GERMAN[0]]
    assert client.detect(GERMAN[1])[0]["language"] == "de"
    with lta.LibreTranslate(url) as sync:
        assert [(x.code, x.targets) for x in sync.languages()] == [
            (x["code"], x["targets"]) for x in LANGUAGES]  # fmt: skip
        many = sync.translate(ENGLISH[:2], "auto", "de")
        assert many.translated_text == [lone["en-de"][s] for s in ENGLISH[:2]]
        assert [d.language for d in many.detected_language] == ["en", "en"]

    async def pivot() -> str:
        async with lta.AsyncLibreTranslate(url) as client:
            return (await client.translate(GERMAN[2], "de", "fr")).translated_text

    assert asyncio.run(pivot()) == lone["de-en-fr"][GERMAN[2]]
    said = request(f"{url}/translate", {"q": GERMAN[2], "source": "auto", "target": "fr"}).body
    assert said["models"] == ["de-en", "en-fr"] and said["detectedLanguage"]["language"] == "de"


def test_two_models_of_one_pair_fail_at_start_naming_both(ckpts, tmp_path, capsys):
    twin = save_tiny_checkpoint(tmp_path / "twin", meta=pair_meta("en-de"), seed=9)
    with pytest.raises(ConfigError, match=f"two models for en -> de: {ckpts['en-de']} and {twin}"):
        Service(ServeConfig([str(ckpts["en-de"]), str(twin)]))
    bare = save_tiny_checkpoint(tmp_path / "bare")
    with pytest.raises(ConfigError, match=f"{bare} records no languages"):
        Service(ServeConfig([str(ckpts["en-de"]), str(bare)]))
    with pytest.raises(ConfigError, match="--heads are for one --checkpoint"):
        Service(ServeConfig([str(ckpts["en-de"]), str(ckpts["de-en"])], src_lang="en"))
    flags = ["serve", "--checkpoint", str(ckpts["en-de"]), "--checkpoint", str(twin), "--port", "0"]
    assert main(flags) == 2
    assert f"two models for en -> de: {ckpts['en-de']} and {twin}" in capsys.readouterr().err


def test_checkpoints_given_as_a_directory_or_a_list_file(ckpts, tmp_path):
    root = ckpts["en-de"].parent
    assert checkpoint_paths(str(root)) == sorted(str(p) for p in ckpts.values())
    listing = tmp_path / "models.txt"
    listing.write_text(f"# the two directions\n{ckpts['en-de']}\n\n{ckpts['de-en']}  # back\n")
    assert checkpoint_paths(str(listing)) == [str(ckpts["en-de"]), str(ckpts["de-en"])]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="nor a directory of checkpoints"):
        checkpoint_paths(str(tmp_path / "empty"))


def test_one_model_keeps_its_defaults_and_pivot_free_answers(ckpts):
    """A one-model server: no `models` in its answers, /v1's source and target optional."""
    with running(ServeConfig(str(ckpts["en-de"]), threads=1)) as (url, _):
        got = request(f"{url}/v1/translate", {"text": ENGLISH[0]}).body["translations"][0]
        assert got["text"] == Translator.from_checkpoint(ckpts["en-de"]).translate(
            [ENGLISH[0]])[0] and "models" not in got  # fmt: skip
        assert request(f"{url}/v1/translate", {"text": "a", "target": "de"}).status == 200
        assert request(f"{url}/v1/translate", {"text": "a", "target": "fr"}).status == 422
        detected = request(f"{url}/detect", {"q": GERMAN[0]}).body
        assert detected == [{"confidence": 0.0, "language": "en"}]  # assumed, not detected
        assert json.dumps(request(f"{url}/translate", {"q": "a", "source": "en",
                                                       "target": "de"}).body).count("models") == 0


class Sleepy:
    """A runner that takes `seconds` a batch and notes how many batches run at once."""

    running, most = 0, 0

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def run(self, sources, options, extras):
        Sleepy.running += 1
        Sleepy.most = max(Sleepy.most, Sleepy.running)
        time.sleep(self.seconds)
        Sleepy.running -= 1
        return list(sources)

    def close(self):
        pass


def test_models_take_turns_and_none_waits_behind_a_queue_of_another():
    """A light model's request, sent behind 15 batches of a heavy one (0.2 s each), runs
    after at most one of them: batches of different models alternate, one at a time."""
    turns = Turns()
    heavy, light = (Batcher(lambda s=s: Sleepy(s), 1, 0, 1000, turns) for s in (0.2, 0.01))
    for batcher in (heavy, light):
        batcher.start()
    try:
        wait_until(lambda: heavy.ready and light.ready, 10)
        backlog = [heavy.submit(Job([i], [1], "o", [None])) for i in range(15)]
        time.sleep(0.05)  # the heavy model is running its first batch
        start = time.monotonic()
        assert light.submit(Job(["x"], [1], "o", [None])).result(5) == ["x"]
        waited = time.monotonic() - start
        assert waited < 0.5, waited  # one heavy batch (and scheduling slack), not 15
        assert sum(f.done() for f in backlog) <= 3  # the heavy queue was not drained first
        assert [f.result(10) for f in backlog] == [[i] for i in range(15)]
        assert Sleepy.most == 1  # never two batches at once
    finally:
        heavy.stop()
        light.stop()


def test_turns_are_taken_in_the_order_asked():
    turns, order = Turns(), []
    turns.__enter__()  # held: the others queue up behind it
    threads = []
    for name in "abc":
        def take(name=name):
            with turns:
                order.append(name)
        threads.append(threading.Thread(target=take))
        threads[-1].start()
        time.sleep(0.05)  # "a" asks first, then "b", then "c"
    turns.__exit__(None, None, None)
    for thread in threads:
        thread.join(5)
    assert order == ["a", "b", "c"]


def test_two_slots_run_two_batches_at_once_and_a_third_waits_its_turn():
    """`Turns(2)`: two holders at once, the third waits, and waiters enter in order."""
    turns, order, inside, most = Turns(2), [], [0], [0]
    lock, release = threading.Lock(), threading.Event()

    def take(name):
        with turns:
            with lock:
                order.append(name)
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            release.wait(5)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=take, args=(name,)) for name in "abcd"]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # asked in the order a, b, c, d
    assert order == ["a", "b"]  # two slots: c and d wait
    release.set()
    for thread in threads:
        thread.join(5)
    assert order == ["a", "b", "c", "d"] and most[0] == 2


def test_a_service_gives_a_batch_slot_per_share_of_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert batch_slots(ServeConfig("x", threads=1)) == 4
    assert batch_slots(ServeConfig("x", threads=2)) == 2
    assert batch_slots(ServeConfig("x", threads=8)) == 1
    assert batch_slots(ServeConfig("x", threads=1, device="cuda")) == 1


def wait_until(condition, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_an_imported_opus_mt_model_serves_its_pair_beside_the_others(ckpts, tmp_path):
    """`aiayn import` records the pair OPUS-MT's tokenizer_config.json names (en -> de
    here), and the imported model takes that pair in a server of several."""
    mm = pytest.importorskip("marian_models")  # needs transformers (the export extra)
    from aiayn.checkpoint import Checkpoint
    from aiayn.convert import import_model

    imported = import_model(mm.build_marian(tmp_path / "hf"), "huggingface", tmp_path / "ende")
    assert Checkpoint(imported).languages == ("en", "de")
    own = Translator.from_checkpoint(imported).translate([ENGLISH[1]])[0]
    config = ServeConfig([str(imported), str(ckpts["de-en"]), str(ckpts["en-fr"])], threads=1)
    with running(config) as (url, _):
        assert request(f"{url}/languages").body == LANGUAGES
        got = request(f"{url}/translate", {"q": ENGLISH[1], "source": "en", "target": "de"})
        assert got.body == {"translatedText": own, "models": ["en-de"]}


def test_the_identifier_tells_apart_only_the_languages_it_knows():
    identifier = LanguageIdentifier(["en", "xx", "de"])  # "xx": made up, not detectable
    assert identifier.known == ["en", "de"]
    ranked = identifier.rank(GERMAN[1])
    assert [code for code, _ in ranked] == ["de", "en"]
    assert sum(p for _, p in ranked) == pytest.approx(1.0)
    assert LanguageIdentifier(["en", "xx"]).rank("whatever") == [("en", 1.0)]


def test_a_list_is_detected_text_by_text_as_libretranslate_does(url, ckpts):
    """Each text of more than 40 characters by itself (a shorter one by the whole list),
    each translated from its own language: English directly, German through English."""
    english = "The man wants to read the book in the garden."
    german = "Der Mann will das Buch im Garten lesen, weil es regnet."
    got = request(f"{url}/translate", {"q": [english, german], "source": "auto",
                                       "target": "fr"}).body  # fmt: skip
    assert [d["language"] for d in got["detectedLanguage"]] == ["en", "de"]
    assert got["models"] == [["en-fr"], ["de-en", "en-fr"]]
    via = alone(ckpts["de-en"], [german])[german]
    assert got["translatedText"] == [alone(ckpts["en-fr"], [english])[english],
                                     alone(ckpts["en-fr"], [via])[via]]  # fmt: skip
