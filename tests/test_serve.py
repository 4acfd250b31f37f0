"""`aiayn serve`: the API on a real uvicorn server on loopback, its limits and its batching."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import shutil
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from aiayn.cli import main
from aiayn.decode.strategy import length_penalty
from aiayn.errors import ConfigError
from aiayn.serve.runner import Options
from aiayn.serve.service import ApiError, ServeConfig, Service
from aiayn.translate import Translator
from serve_helpers import (DOCUMENT, PAGE, PARAGRAPHS, alone, request, running, serving, tag_tree,
                           text_words, wait_ready)
from tiny_checkpoint import WORDS, save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

SENTENCES = [" ".join(WORDS[i : i + 1 + i % 5]) for i in range(12)]

LANGUAGES = {"languages": {"source": "en", "target": "de"}}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("serve") / "ckpt", meta=LANGUAGES)

@pytest.fixture(scope="module")
def lone(ckpt):
    """What the model gives each sentence translated alone, at beam 2."""
    return alone(ckpt, SENTENCES + sum(PARAGRAPHS, []), beam=2)

@pytest.fixture(scope="module")
def server(ckpt):
    config = ServeConfig(str(ckpt), max_sentences=10, max_sentence_tokens=24, max_queue=20,
                         max_body_bytes=250_000, max_beam=5)  # fmt: skip
    with running(config) as (url, service):
        yield url

def test_translations_come_back_in_order_and_blank_texts_stay_blank(server, lone):
    """Blank texts are not sent to the model: as sentences they keep their whitespace, and
    unsplit they give "", as a Translator does."""
    texts = [SENTENCES[3], "", SENTENCES[0], "  "]
    for split, blank in [(True, "  "), (False, "")]:
        reply = request(f"{server}/v1/translate", {"text": texts, "beam": 2, "split": split})
        assert reply.status == 200
        got = [t["text"] for t in reply.body["translations"]]
        assert got == [lone[SENTENCES[3]], "", lone[SENTENCES[0]], blank]
        assert [len(t["sentences"]) for t in reply.body["translations"]] == [1, 0, 1, 0]
    one = request(f"{server}/v1/translate", {"text": SENTENCES[5], "beam": 2, "nbest": 2}).body
    (only,) = one["translations"]
    assert only["text"] == lone[SENTENCES[5]] and len(only["nbest"]) == 2
    assert only["nbest"][0] == {"text": only["text"], "score": only["score"]}
    assert only["nbest"][0]["score"] >= only["nbest"][1]["score"]

CASES = [
    ({"text": SENTENCES[:11]}, 413, "too many sentences: 11 texts, a sentence each at least"),
    ({"text": "The cat sat. " * 11}, 413, "too many sentences: 11; the limit is --max-sentences"),
    ({"text": "the cat " * 12, "split": False}, 413, "--max-sentence-tokens 24"),
    ({"text": ["the cat " * 30]}, 413, "--max-sentence-tokens 24"),
    ({"text": "x" * 300_000}, 413, "--max-body-bytes 250000"),
    (b'{"text": "the cat"', 422, "invalid JSON"),
    (b"\xff\xfe", 422, "invalid JSON"),
    (b"[" * 1000 + b"]" * 1000, 422, "nested too deeply"),  # was a RecursionError: 500
    (b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 422, "nested too deeply"),
    (b'{"text": "\\ud800"}', 422, "lone surrogate"),
    ({"text": "a", "beam": 0}, 422, '"beam" must be in 1..5'),
    ({"text": "a", "beam": 6}, 422, "--max-beam"),
    ({"text": "a", "beam": 2, "nbest": 3}, 422, '"nbest" must be in 1..2'),
    ({"text": "a", "alpha": -1}, 422, '"alpha"'),
    ({"text": "a", "alpha": 175}, 422, '"alpha" must be a number in 0..10'),  # overflowed: 500
    ({"text": "a", "attention": "yes"}, 422, '"attention"'),
    ({"text": 7}, 422, '"text" must be a string or a list of strings'),
    ({"txt": "a"}, 422, "unknown field(s) txt"),
    ([1, 2], 422, "JSON object"),
]

def test_deep_json_is_refused_whatever_the_recursion_limit():
    """Hypothesis raises the process's recursion limit while it runs (schemathesis's tests
    run the same server code): a deep body is refused by its depth, not by chance."""
    import sys

    from aiayn.serve.body import MAX_DEPTH, parse_json

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        with pytest.raises(ApiError, match="nested too deeply"):
            parse_json(b"[" * 1000 + b"]" * 1000)
    finally:
        sys.setrecursionlimit(limit)
    value, levels = parse_json(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)), 1
    while value:  # the deepest allowed: lists MAX_DEPTH + 1 deep, parsed
        value, levels = value[0], levels + 1
    assert value == [] and levels == MAX_DEPTH + 1
    with pytest.raises(ApiError, match=f"over {MAX_DEPTH} levels"):
        parse_json(b"[" * (MAX_DEPTH + 2) + b"]" * (MAX_DEPTH + 2))


@pytest.mark.parametrize(("body", "status", "message"), CASES)
def test_each_bad_request_gets_its_status_and_names_the_limit(server, body, status, message):
    raw = body if isinstance(body, bytes) else None
    reply = request(f"{server}/v1/translate", None if raw else body, raw=raw)
    assert reply.status == status and message in reply.body["error"], reply.body
    assert request(f"{server}/health").body == {"status": "ok"}
    after = request(f"{server}/v1/translate", {"text": "the cat"})
    assert after.status == 200 and len(after.body["translations"]) == 1

def test_a_full_queue_is_503_with_retry_after(ckpt):
    with running(ServeConfig(str(ckpt), max_queue=2)) as (url, _):
        full = request(f"{url}/v1/translate", {"text": ["a", "b", "c"]})
        assert full.status == 503 and "--max-queue 2" in full.body["error"]
        assert int(full.headers["retry-after"]) >= 1
        assert request(f"{url}/v1/translate", {"text": ["a", "b"]}).status == 200

def test_a_request_past_the_timeout_is_504_and_the_server_goes_on(ckpt):
    # The oldest request waits 300 ms for company: more than the 50 ms allowed.
    with running(ServeConfig(str(ckpt), timeout_s=0.05, max_wait_ms=300)) as (url, service):
        late = request(f"{url}/v1/translate", {"text": "the cat"})
        assert late.status == 504 and "--timeout 0.05 s" in late.body["error"]
        service.config.timeout_s = 30.0
        assert request(f"{url}/v1/translate", {"text": "the cat"}).status == 200

def test_not_ready_until_loaded_and_warmed_up(ckpt, monkeypatch):
    gate = threading.Event()
    load = Service._load
    monkeypatch.setattr(Service, "_load", lambda self, model: gate.wait(30) and load(self, model))
    with running(ServeConfig(str(ckpt)), ready=False) as (url, service):
        wait_for_listening = request(f"{url}/health")
        assert wait_for_listening.body == {"status": "ok"}
        not_yet = request(f"{url}/ready")
        assert not_yet.status == 503 and "loading" in not_yet.body["error"]
        assert "retry-after" in {k.lower() for k in not_yet.headers}
        assert request(f"{url}/v1/translate", {"text": "a"}).status == 503
        assert request(f"{url}/info").body["ready"] is False
        gate.set()
        wait_ready(url)
        assert request(f"{url}/info").body["ready"] is True

def test_concurrent_requests_share_model_calls_and_translate_as_alone(ckpt, lone):
    config = ServeConfig(str(ckpt), max_wait_ms=250)
    with running(config) as (url, service):
        before = service.batcher.stats.batches
        texts = [SENTENCES[i % len(SENTENCES)] for i in range(32)]
        barrier = threading.Barrier(32)

        def send(text):
            barrier.wait()
            return request(f"{url}/v1/translate", {"text": text, "beam": 2})

        with ThreadPoolExecutor(32) as pool:
            replies = list(pool.map(send, texts))
        assert all(r.status == 200 for r in replies)
        assert [r.body["translations"][0]["text"] for r in replies] == [lone[t] for t in texts]
        calls = service.batcher.stats.batches - before
        assert calls < 32, calls
        assert request(f"{url}/info").body["stats"]["sentences"] >= 32

def test_once_ready_no_batch_size_makes_onednn_build_a_new_kernel(ckpt, monkeypatch, onednn_shapes):
    """oneDNN keeps a kernel for each product shape it meets, for the life of the process,
    and a server meets batches of every size: met one by one, new shapes made its memory
    creep up over a run. The service builds every shape while it loads
    (`fast.linear.warm_up`), so that once it is ready its memory stays flat: requests of 1 to
    64 sentences at beams 1 to 9 (more than MAX_ROWS hypotheses) ask for none it lacks."""
    import aiayn.fast.linear as linear_module

    monkeypatch.setattr(linear_module, "onednn_faster_here", lambda: True)
    # every shape on oneDNN, whatever `ProductChoice` would measure on this machine
    monkeypatch.setattr(linear_module.ProductChoice, "use_onednn", lambda self, *shape: True)
    shapes = onednn_shapes
    # the model in this process (`--worker thread`), where its kernels can be counted
    with running(ServeConfig(str(ckpt), max_beam=9, worker="thread")) as (url, service):
        built = len(shapes)
        for n, beam in [(1, 1), (7, 3), (23, 4), (64, 9)]:
            texts = [SENTENCES[i % len(SENTENCES)] for i in range(n)]
            assert request(f"{url}/v1/translate", {"text": texts, "beam": beam}).status == 200
        assert len(shapes) > built and set(shapes[built:]) <= set(shapes[:built])

def test_one_at_a_time_settings_make_one_call_per_request(ckpt):
    config = ServeConfig(str(ckpt), max_wait_ms=0, max_batch_tokens=1)
    with running(config) as (url, service):
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda t: request(f"{url}/v1/translate", {"text": t}),
                                    SENTENCES[:8]))  # fmt: skip
        assert all(r.status == 200 for r in replies)
        assert service.batcher.stats.batches == 8

def test_attention_in_the_api(server):
    reply = request(f"{server}/v1/translate", {"text": "the cat sat", "attention": True})
    attention = reply.body["translations"][0]["attention"]
    n_src, n_tgt = len(attention["source"]), len(attention["target"])
    cross = torch.tensor(attention["cross"])  # (layers, heads, tgt_len, src_len)
    assert cross.shape[2:] == (n_tgt, n_src)
    torch.testing.assert_close(cross.sum(-1), torch.ones(cross.shape[:3]), atol=1e-3, rtol=0)
    decoder = torch.tensor(attention["decoder"])
    assert decoder[..., torch.ones(n_tgt, n_tgt, dtype=torch.bool).triu(1)].eq(0).all()
    plain = request(f"{server}/v1/translate", {"text": "the cat sat"})
    assert "attention" not in plain.body["translations"][0]

def test_info_and_the_page(server):
    info = request(f"{server}/info").body
    assert info["languages"] == {"source": "en", "target": "de"}
    assert info["limits"]["max_sentences"] == 10 and info["model"]["d_model"] == 16
    assert info["model"]["search"] == "fast path"  # the tests' servers: --compile never
    with urllib.request.urlopen(f"{server}/") as reply:
        html = reply.read().decode()
    assert "AttentionView.mount" in html and "{{" not in html
    # nothing from elsewhere: no src= or href= at all, and no URL but SVG's namespace name
    assert "src=" not in html and "href=" not in html
    assert html.count("http") == html.count("http://www.w3.org/2000/svg")

def test_the_cli_names_a_checkpoint_or_keys_file_it_cannot_load(tmp_path, ckpt, capsys):
    assert main(["serve", "--checkpoint", str(tmp_path / "none"), "--port", "0"]) == 2
    assert "no such checkpoint directory" in capsys.readouterr().err
    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    assert main(["serve", "--checkpoint", str(broken), "--port", "0"]) == 2
    assert "could not be loaded" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--max-queue must be at least 1"):
        dataclasses.replace(ServeConfig(str(ckpt)), max_queue=0)
    keys = ["--api-keys", str(tmp_path / "no-keys.txt")]
    assert main(["serve", "--checkpoint", str(ckpt), "--port", "0", *keys]) == 2
    assert f"--api-keys {keys[1]}: cannot read it" in capsys.readouterr().err

def read_reply(sock: socket.socket) -> tuple[int, dict]:
    """The status and JSON body of the HTTP/1.1 reply on `sock` (sent with Connection: close)."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    head, body = reply.split(b"\r\n\r\n", 1)
    return int(head.split()[1]), json.loads(body)

def wait_until(condition, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)

def post_head(path: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip

def test_a_client_that_leaves_mid_body_or_while_queued_costs_nothing(ckpt, caplog):
    """Mid-body: no traceback, nothing queued. While queued: its sentences leave the queue
    unrun (the worker waits 1.5 s for company, so they are still there when it goes)."""
    with running(ServeConfig(str(ckpt), max_wait_ms=1500)) as (url, service):
        stats = service.batcher.stats
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(post_head("/v1/translate", 100) + b'{"text": "the')
        body = json.dumps({"text": SENTENCES[:3]}).encode()
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(post_head("/v1/translate", len(body)) + body)
            wait_until(lambda: stats.requests == 1, 10)  # queued
        after = request(f"{url}/v1/translate", {"text": SENTENCES[4]})
        assert after.status == 200 and stats.sentences == 1 and stats.batches == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.records

def test_a_slow_client_holds_up_no_one(ckpt, lone):
    """A client sends its body a few bytes at a time, then stalls: meanwhile the others are
    answered; once its body is whole, so is it."""
    with running(ServeConfig(str(ckpt), max_wait_ms=0)) as (url, _):
        body = json.dumps({"text": SENTENCES[1], "beam": 2}).encode()
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(post_head("/v1/translate", len(body)))
            for i in range(0, 12, 3):
                sock.sendall(body[i : i + 3])
                time.sleep(0.05)
            others = [request(f"{url}/v1/translate", {"text": s, "beam": 2}) for s in SENTENCES[:4]]
            assert [r.body["translations"][0]["text"] for r in others] == [
                lone[s] for s in SENTENCES[:4]]  # fmt: skip
            sock.sendall(body[12:])
            status, answer = read_reply(sock)
        assert status == 200 and answer["translations"][0]["text"] == lone[SENTENCES[1]]

def test_concurrent_requests_with_mixed_options_get_each_their_own(ckpt):
    """Eight requests at once, of four decoding options and with or without attention:
    each answer equals the same request's answer sent alone."""
    bodies = [{"text": SENTENCES[i : i + 1 + i % 3], "beam": 1 + i % 4,
               "nbest": 1 + (i % 4 > 1), "attention": i % 3 == 0} for i in range(8)]  # fmt: skip
    with running(ServeConfig(str(ckpt), max_wait_ms=300)) as (url, service):
        alone = [request(f"{url}/v1/translate", b).body for b in bodies]
        before = service.batcher.stats.batches
        barrier = threading.Barrier(len(bodies))

        def send(body):
            barrier.wait()
            return request(f"{url}/v1/translate", body)

        with ThreadPoolExecutor(len(bodies)) as pool:
            together = list(pool.map(send, bodies))
        assert service.batcher.stats.batches - before < len(bodies)
    for body, single, reply in zip(bodies, alone, together):
        assert reply.status == 200
        for one, other in zip(single["translations"], reply.body["translations"], strict=True):
            assert [h["text"] for h in one["nbest"]] == [h["text"] for h in other["nbest"]]
            assert len(other["nbest"]) == body["nbest"]
            assert other["score"] == pytest.approx(one["score"], abs=1e-4)
            assert ("attention" in other) == body["attention"]

def test_shutdown_answers_the_requests_already_queued(ckpt, lone):
    """Shut down while four requests wait in the queue: each is answered, then the server
    stops, and a new connection is refused."""
    with serving(ServeConfig(str(ckpt), max_wait_ms=1000)) as served:
        stats = served.service.batcher.stats
        with ThreadPoolExecutor(4) as pool:
            sent = [pool.submit(request, f"{served.url}/v1/translate", {"text": s, "beam": 2})
                    for s in SENTENCES[:4]]  # fmt: skip
            wait_until(lambda: stats.requests == 4, 10)
            assert stats.batches == 0  # all four still queued
            served.server.should_exit = True
            replies = [f.result() for f in sent]
        assert [r.body["translations"][0]["text"] for r in replies] == [
            lone[s] for s in SENTENCES[:4]]  # fmt: skip
        with pytest.raises(OSError):  # the listening socket closed when shutdown began
            request(f"{served.url}/health", timeout=5)

def test_sentences_still_queued_when_the_worker_stops_get_503(ckpt):
    """The worker's last batch is run; a job of other options, queued behind it, fails
    with 503 rather than waiting for ever."""
    service = Service(ServeConfig(str(ckpt), max_wait_ms=10_000, compile="never"))
    service.start()
    wait_until(lambda: service.batcher.ready, 60)

    async def stop_while_queued() -> tuple:
        first = asyncio.ensure_future(service.translate(["the cat"], Options(2, 0.6, 1)))
        second = asyncio.ensure_future(service.translate(["a mat"], Options(3, 0.6, 1)))
        await asyncio.to_thread(wait_until, lambda: service.batcher.stats.requests == 2, 10)
        await asyncio.to_thread(service.stop)
        return await asyncio.gather(first, second, return_exceptions=True)

    first, second = asyncio.run(stop_while_queued())
    assert len(first) == 1 and first[0].nbest
    assert isinstance(second, ApiError) and second.status == 503
    assert "the server is shutting down" in second.message

def test_every_error_has_one_shape_404_405_and_500_too(server, monkeypatch):
    missing = request(f"{server}/v2/translate", {"text": "a"})
    assert missing.status == 404 and missing.body == {"error": "no such route: /v2/translate"}
    wrong = request(f"{server}/info", {"text": "a"})  # a POST
    assert wrong.status == 405 and "POST is not allowed on /info" in wrong.body["error"]
    assert "GET" in wrong.headers["allow"]
    monkeypatch.setattr(Service, "info", lambda self: 1 / 0)
    broken = request(f"{server}/info")
    assert broken.status == 500
    assert broken.body == {"error": "internal error: ZeroDivisionError: division by zero"}

def test_three_paragraphs_of_nine_sentences_come_back_as_such(server, lone):
    """Each sentence translated as it is alone; the paragraphs and spacing kept."""
    reply = request(f"{server}/v1/translate", {"text": DOCUMENT, "beam": 2})
    (text,) = reply.body["translations"]
    assert [s["source"] for s in text["sentences"]] == sum(PARAGRAPHS, [])
    assert [s["text"] for s in text["sentences"]] == [lone[s] for s in sum(PARAGRAPHS, [])]
    assert text["text"] == "\n\n".join(" ".join(lone[s] for s in p) for p in PARAGRAPHS)
    assert text["score"] == pytest.approx(sum(s["score"] for s in text["sentences"]))
    assert "attention" not in text  # a text's attention is its sentences'

def test_the_length_limits_are_each_sentences(server, ckpt):
    """Three sentences of under --max-sentence-tokens 24 each, of more together."""
    text = "The cat sat on a mat. Der Hund sitzt! A cat sat."
    assert len(Translator.from_checkpoint(ckpt).src_vocab.encode(text)) > 24
    assert request(f"{server}/v1/translate", {"text": text}).status == 200
    whole = request(f"{server}/v1/translate", {"text": text, "split": False})
    assert whole.status == 413 and "--max-sentence-tokens 24" in whole.body["error"]

def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_short_texts_are_split_and_encoded_in_the_loop_long_ones_in_a_thread(ckpt, monkeypatch):
    """A short request's sentence splitting and encoding run in the event loop (a thread hop
    costs more than they do); past `INLINE_CHARS` characters, in a thread, so that a large
    body never holds up the loop. Either way the translations are the same."""
    import aiayn.serve.service as service_module

    where: list[tuple[str, bool]] = []

    def recorded(name, function):
        def run(*args):
            where.append((name, _in_event_loop()))
            return function(*args)
        return run

    monkeypatch.setattr(service_module, "segment", recorded("segment", service_module.segment))
    with running(ServeConfig(str(ckpt), worker="thread")) as (url, service):
        model = service.models.first
        model.encode = recorded("encode", model.encode)
        text = SENTENCES[3]
        short = request(f"{url}/v1/translate", {"text": text})
        assert where == [("segment", True), ("encode", True)]
        where.clear()
        monkeypatch.setattr(service_module, "INLINE_CHARS", len(text) - 1)
        long = request(f"{url}/v1/translate", {"text": text})
        assert where == [("segment", False), ("encode", False)]
    assert short.status == long.status == 200 and short.body == long.body


def test_alignments_and_per_token_log_probabilities_on_request(server):
    body = {"text": " ".join(PARAGRAPHS[0]), "beam": 3, "nbest": 2, "alpha": 0.6}
    plain = request(f"{server}/v1/translate", body).body["translations"][0]
    assert "alignment" not in plain and "tokens" not in plain["sentences"][0]["nbest"][0]
    reply = request(f"{server}/v1/translate", {**body, "alignment": True, "log_probs": True})
    (text,) = reply.body["translations"]
    shifted, n_src, n_tgt = [], 0, 0
    for sentence in text["sentences"]:
        words, translated = len(sentence["source"].split()), len(sentence["text"].split())
        links = sentence["alignment"]  # the union of both directions: each word linked
        assert {j for _, j in links} == set(range(translated))
        assert {i for i, _ in links} == set(range(words))
        assert [tuple(link) for link in links] == sorted(set(map(tuple, links)))
        shifted += [[i + n_src, j + n_tgt] for i, j in links]
        n_src, n_tgt = n_src + words, n_tgt + translated
        for hypothesis in sentence["nbest"]:
            tokens, log_probs = hypothesis["tokens"], hypothesis["log_probs"]
            assert tokens[-1] == "</s>" and len(tokens) == len(log_probs)
            assert all(p <= 0 for p in log_probs)
            normalized = sum(log_probs) / length_penalty(len(log_probs), 0.6)
            assert normalized == pytest.approx(hypothesis["score"], abs=1e-3)  # the search's
    assert text["alignment"] == shifted  # over the whole text's words
    one = request(f"{server}/v1/translate", {**body, "text": PARAGRAPHS[0][0], "log_probs": True})
    top = one.body["translations"][0]
    assert top["nbest"][1]["log_probs"] == top["sentences"][0]["nbest"][1]["log_probs"]

def test_html_keeps_its_tag_tree_and_translates_every_text_node(server, ckpt):
    reply = request(f"{server}/v1/translate", {"text": PAGE, "format": "html", "beam": 2})
    (page,) = reply.body["translations"]
    assert tag_tree(page["text"]) == tag_tree(PAGE)
    sources = [s["source"] for s in page["sentences"]]
    assert sources == ["The cat sat.", "A dog sleeps.", "Der Hund"]
    translator = Translator.from_checkpoint(ckpt, beam=2)
    translated = translator.translate(sources)
    assert [s["text"] for s in page["sentences"]] == translated
    assert text_words(page["text"]) == " ".join(translated).split()  # no source word left


def test_the_server_parses_http_with_httptools_on_uvloops_loop():
    """`aiayn serve`'s uvicorn settings take the serve extra's C parser and libuv loop, not
    h11's and asyncio's Python ones: a short request's server-side Python is what the
    server's CPU time goes to with a small model (serve_load.py)."""
    from fastapi import FastAPI

    from aiayn.serve.app import server_config

    config = server_config(FastAPI())
    config.load()
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"
    loop = config.get_loop_factory()()
    try:
        assert type(loop).__module__.split(".")[0] == "uvloop"
    finally:
        loop.close()


def test_connections_send_without_waiting_for_acknowledgements():
    """The server's connections have TCP_NODELAY (inherited from its listening socket): a
    reply in two writes does not wait on a kept-alive client's delayed ACK (measured: 76 ms
    a short request on a kept-alive connection without it, 29-37 ms with it)."""
    from aiayn.serve.app import listening_socket

    with listening_socket("127.0.0.1", 0) as sock:
        with socket.create_connection(sock.getsockname()[:2]) as client:
            accepted, _ = sock.accept()
            with accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert client.fileno() == -1  # closed
