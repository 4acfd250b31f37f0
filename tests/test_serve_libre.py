"""LibreTranslate's API as its real clients call it: `libretranslatepy` and
`libretranslate-aio` (sync and async) against a real `aiayn serve` on loopback, with and
without an API key; the model's languages read from its checkpoint."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import urllib.error
import urllib.parse
import urllib.request

import libretranslate_aio as lta
import pytest
from libretranslatepy import LibreTranslateAPI

from aiayn.checkpoint import read_config
from aiayn.errors import ConfigError
from aiayn.serve.keys import Access, read_api_keys
from aiayn.serve.service import ApiError, ServeConfig, model_languages
from aiayn.translate import Translator
from serve_helpers import (DOCUMENT, PAGE, PARAGRAPHS, alone, request, running, tag_tree,
                           text_words)
from tiny_checkpoint import WORDS, save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

SENTENCES = [" ".join(WORDS[i : i + 2 + i % 3]) for i in range(6)]
KEYS = "team-a  # no limit of its own\nteam-b 2\n"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    meta = {"languages": {"source": "en", "target": "de"}}
    return save_tiny_checkpoint(tmp_path_factory.mktemp("libre") / "ckpt", meta=meta)


@pytest.fixture(scope="module")
def lone(ckpt):
    """Each sentence translated alone with the checkpoint's decoding: LibreTranslate's."""
    return alone(ckpt, SENTENCES + sum(PARAGRAPHS, []))


@pytest.fixture(scope="module")
def url(ckpt, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(KEYS, encoding="utf-8")
    config = ServeConfig(str(ckpt), api_keys=str(keys), max_beam=4, max_sentences=9, threads=1)
    with running(config) as (url, _):
        yield url


LANGUAGES = [{"code": "en", "name": "English", "targets": ["de"]},
             {"code": "de", "name": "German", "targets": []}]  # fmt: skip


@pytest.mark.parametrize("key", [None, "team-a"])
def test_libretranslatepy_languages_detect_translate(url, lone, key):
    """Its form-encoded calls, as the client makes them (a GET with a form body too)."""
    client = LibreTranslateAPI(url, api_key=key)
    assert client.languages() == LANGUAGES
    assert client.detect(SENTENCES[0]) == [{"confidence": 0.0, "language": "en"}]
    for s in SENTENCES[:3]:
        assert client.translate(s, "en", "de") == lone[s]


def test_libretranslatepy_sees_a_bad_key_and_a_pair_the_model_lacks(url):
    with pytest.raises(urllib.error.HTTPError) as bad_key:
        LibreTranslateAPI(url, api_key="stolen").translate("the cat", "en", "de")
    assert bad_key.value.code == 403
    assert json.loads(bad_key.value.read()) == {"error": "Invalid API key"}
    v1 = request(f"{url}/v1/translate", {"text": "the cat", "api_key": "stolen"})
    assert v1.status == 403 and v1.body == {"error": "Invalid API key"}  # the same keys
    with pytest.raises(urllib.error.HTTPError) as bad_pair:
        LibreTranslateAPI(url).translate("the cat", "fr", "es")
    assert bad_pair.value.code == 400
    message = json.loads(bad_pair.value.read())["error"]
    assert "fr -> es is not a pair this model translates" in message and "en -> de" in message


@pytest.mark.parametrize("key", [None, "team-a"])
def test_libretranslate_aio_sync_client(url, lone, key):
    with lta.LibreTranslate(url, api_key=key) as client:
        assert client.health()
        assert [(x.code, x.name, x.targets) for x in client.languages()] == [
            (x["code"], x["name"], x["targets"]) for x in LANGUAGES]  # fmt: skip
        assert client.detect(SENTENCES[1]) == [lta.Detection(confidence=0.0, language="en")]
        one = client.translate(SENTENCES[1], "en", "de")
        assert one.translated_text == lone[SENTENCES[1]] and one.detected_language is None
        many = client.translate(SENTENCES[:4], "auto", "de", alternatives=2)
        assert many.translated_text == [lone[s] for s in SENTENCES[:4]]
        assert many.detected_language == [lta.DetectedLanguage(0.0, "en")] * 4
        for best, others in zip(many.translated_text, many.alternatives):
            assert len(others) <= 2 and best not in others and len(set(others)) == len(others)
        settings = client.frontend_settings()
        assert settings.api_keys and not settings.key_required
        assert (settings.language.source.code, settings.language.target.code) == ("en", "de")
        assert settings.supported_files_format == [".txt", ".html"]


def test_libretranslate_aio_async_client_and_its_errors(url, lone):
    async def calls() -> None:
        async with lta.AsyncLibreTranslate(url, api_key="team-a") as client:
            got = await client.translate(SENTENCES[2], "en", "de")
            assert got.translated_text == lone[SENTENCES[2]]
            assert (await client.detect(SENTENCES[2]))[0].language == "en"
            assert [x.code for x in await client.languages()] == ["en", "de"]
        async with lta.AsyncLibreTranslate(url, api_key="stolen") as client:
            with pytest.raises(lta.ForbiddenError, match="Invalid API key"):
                await client.translate("the cat", "en", "de")
        async with lta.AsyncLibreTranslate(url) as client:
            with pytest.raises(lta.BadRequestError, match="en -> fr is not a pair"):
                await client.translate("the cat", "en", "fr")
            with pytest.raises(lta.BadRequestError, match="alternatives parameter must be <= 3"):
                await client.translate("the cat", "en", "de", alternatives=4)
            with pytest.raises(lta.ForbiddenError, match="Suggestions are disabled"):
                await client.suggest("the cat", "die Katze", "en", "de")

    asyncio.run(calls())


def test_a_keys_own_limit_gives_429_with_retry_after(url):
    with lta.LibreTranslate(url, api_key="team-b") as client:
        client.detect("the cat")
        client.translate("the cat", "en", "de")
        with pytest.raises(lta.RateLimitError, match="Slowdown: 2 per 1 minute"):
            client.translate("the cat", "en", "de")
    form = urllib.parse.urlencode({"q": "the cat", "api_key": "team-b"}).encode()
    with pytest.raises(urllib.error.HTTPError) as limited:
        urllib.request.urlopen(urllib.request.Request(f"{url}/detect", data=form))
    assert limited.value.code == 429 and 1 <= int(limited.value.headers["Retry-After"]) <= 60


def test_json_and_form_bodies_are_the_same_request(url, lone):
    s = SENTENCES[3]
    body = {"q": s, "source": "en", "target": "de"}
    as_json = request(f"{url}/translate", body)
    form = urllib.parse.urlencode(body).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{url}/translate", data=form)) as reply:
        as_form = json.loads(reply.read())
    assert as_json.status == 200 and as_json.body == as_form == {"translatedText": lone[s]}
    listed = urllib.parse.urlencode([("q", s), ("q", SENTENCES[0]), ("source", "en"),
                                     ("target", "de")]).encode()  # fmt: skip
    with urllib.request.urlopen(urllib.request.Request(f"{url}/translate", data=listed)) as reply:
        assert json.loads(reply.read()) == {"translatedText": [lone[s], lone[SENTENCES[0]]]}


@pytest.mark.parametrize(
    ("body", "message"),
    [({"source": "en", "target": "de"}, "missing q parameter"),
     ({"q": "a", "target": "de"}, "missing source parameter"),
     ({"q": {}, "source": "en", "target": "de"}, "q must be a string or a list of strings"),
     ({"q": "a", "source": "en", "target": "de", "format": "pdf"}, "'pdf' format"),
     ({"q": "a", "source": "en", "target": "de", "alternatives": -1}, "must be >= 0"),
     ({"q": ["a"] * 10, "source": "en", "target": "de"}, "--max-sentences 9"),
     ({"q": "A cat. " * 10, "source": "en", "target": "de"}, "too many sentences: 10"),
     ({"q": "a", "source": "en", "target": "de", "api_key": 7}, '"api_key" must be a string')],
)  # fmt: skip
def test_bad_requests_are_400_in_libretranslates_shape(url, body, message):
    """What /v1/translate answers 413 or 422 is LibreTranslate's 400 on its routes."""
    reply = request(f"{url}/translate", body)
    assert reply.status == 400 and message in reply.body["error"], reply.body
    assert set(reply.body) == {"error"}


def test_translate_file_and_download_it(url, lone):
    text = f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n"
    with lta.LibreTranslate(url) as client:
        upload = io.BytesIO(text.encode())
        upload.name = "Straße.txt"
        link = client.translate_file(upload, "en", "de").translated_file_url
    assert link.startswith(f"{url}/download_file/") and link.endswith(".Stra_e.txt")
    with urllib.request.urlopen(link) as got:
        assert got.headers["content-disposition"] == (
            "attachment; filename=\"Stra_e.txt\"; filename*=UTF-8''Stra%C3%9Fe.txt")
        assert got.read().decode() == f"{lone[SENTENCES[0]]}\n\n{lone[SENTENCES[1]]}\n"
    missing = request(f"{url}/download_file/nothing.txt")
    assert missing.status == 404 and "no such file" in missing.body["error"]
    with lta.LibreTranslate(url) as client, pytest.raises(lta.BadRequestError,
                                                          match="file format not supported"):
        upload = io.BytesIO(b"\x89PNG")
        upload.name = "picture.png"
        client.translate_file(upload, "en", "de")


def test_the_languages_come_from_the_checkpoint_whatever_the_directory(ckpt, tmp_path,
                                                                       monkeypatch):  # fmt: skip
    """From another directory the training data is not there: the checkpoint names them.
    Without them it falls back to the data's manifest, then to --src-lang / --tgt-lang; a
    flag that contradicts the checkpoint is an error."""
    monkeypatch.chdir(tmp_path)
    config = ServeConfig(str(ckpt))
    model = read_config(ckpt)
    assert model_languages(config, model) == ("en", "de")
    with pytest.raises(ConfigError, match="--tgt-lang fr, but .* was trained on de"):
        model_languages(dataclasses.replace(config, tgt_lang="fr"), model)
    bare = save_tiny_checkpoint(tmp_path / "bare")
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text('{"src_lang": "fr", "tgt_lang": "es"}')
    with_data = dataclasses.replace(model, data=dataclasses.replace(model.data, dir=str(data)))
    assert model_languages(ServeConfig(str(bare)), with_data) == ("fr", "es")
    elsewhere = dataclasses.replace(model, data=dataclasses.replace(model.data, dir="gone"))
    flags = ServeConfig(str(bare), src_lang="it", tgt_lang="pt")
    assert model_languages(flags, elsewhere) == ("it", "pt")
    assert model_languages(ServeConfig(str(bare)), elsewhere) == (None, None)


def test_keys_file_and_the_moving_window(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# ours\nk1 1\nk2\n")
    assert read_api_keys(keys) == {"k1": 1, "k2": None}
    keys.write_text("k1 many\n")
    with pytest.raises(ConfigError, match="keys:1: expected 'KEY' or 'KEY REQUESTS_PER_MINUTE'"):
        read_api_keys(keys)
    now = [0.0]
    access = Access({"k1": 1, "k2": None}, default_limit=2, clock=lambda: now[0])
    access.check("k1", "10.0.0.1")
    with pytest.raises(ApiError) as limited:
        access.check("k1", "10.0.0.2")
    assert limited.value.status == 429 and limited.value.headers == {"Retry-After": "60"}
    now[0] = 59.5
    for _ in range(5):
        access.check("k2", "10.0.0.1")  # a key without a limit of its own has none
    access.check(None, "10.0.0.1")  # keyless: --req-limit, counted per address
    access.check(None, "10.0.0.1")
    with pytest.raises(ApiError, match="Slowdown: 2 per 1 minute"):
        access.check(None, "10.0.0.1")
    access.check(None, "10.0.0.2")
    now[0] = 60.0  # k1's request is a minute old
    access.check("k1", "10.0.0.3")
    with pytest.raises(ApiError) as forbidden:
        access.check("k3", "10.0.0.1")
    assert forbidden.value.status == 403
    keyed_only = Access({"k1": None}, default_limit=0)
    keyed_only.check("k1", "10.0.0.1")
    with pytest.raises(ApiError, match="api_key only"):
        keyed_only.check(None, "10.0.0.1")
    open_door = Access(None, default_limit=None)
    open_door.check("anything", "10.0.0.1")  # without --api-keys a key means nothing


def test_paragraphs_and_html_through_the_clients(url, lone, ckpt):
    """Three paragraphs of nine sentences come back as such, each sentence as it is
    translated alone; an HTML page keeps its tag tree, its text translated."""
    expected = "\n\n".join(" ".join(lone[s] for s in p) for p in PARAGRAPHS)
    assert LibreTranslateAPI(url).translate(DOCUMENT, "en", "de") == expected
    with lta.LibreTranslate(url) as client:
        assert client.translate(DOCUMENT, "en", "de").translated_text == expected
        page = client.translate(PAGE, "en", "de", format="html", alternatives=1)
        assert page.alternatives == []  # none for HTML, as LibreTranslate
        upload = io.BytesIO(PAGE.encode())
        upload.name = "page.html"
        link = client.translate_file(upload, "en", "de").translated_file_url
    assert tag_tree(page.translated_text) == tag_tree(PAGE)
    translated = Translator.from_checkpoint(ckpt).translate(["The cat sat.", "A dog sleeps.",
                                                              "Der Hund"])  # fmt: skip
    assert text_words(page.translated_text) == " ".join(translated).split()
    with urllib.request.urlopen(link) as got:
        assert got.headers["content-type"] == "text/html; charset=utf-8"
        assert got.read().decode() == page.translated_text
