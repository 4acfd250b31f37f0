"""A real `aiayn serve` app on loopback for the service's tests, a small HTTP client, and
the texts both APIs' tests send: paragraphs of sentences, an HTML page."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import torch

from aiayn.serve.service import ServeConfig, Service
from aiayn.translate import Translator

PARAGRAPHS = [["The cat sat on a mat.", "Der Hund sitzt!", "Die Katze sitzt?"],
              ["A cat sat.", "The mat sat on a cat.", "Einer Hund sitzt."],
              ["The Hund.", "Die Matte sitzt.", "A mat."]]  # fmt: skip
DOCUMENT = "\n\n".join(" ".join(paragraph) for paragraph in PARAGRAPHS)
PAGE = "<p>The <b>cat</b> sat. A <i>dog <u>sleeps</u></i>.</p>\n<ul><li>Der Hund</li></ul>"


def tag_tree(page: str) -> list[tuple[str, str]]:
    """The page's tags in order, ("start" | "end", name): equal lists, equal trees."""
    found: list[tuple[str, str]] = []
    parser = HTMLParser()
    parser.handle_starttag = lambda tag, attrs: found.append(("start", tag))
    parser.handle_endtag = lambda tag: found.append(("end", tag))
    parser.feed(page)
    return found


def text_words(page: str) -> list[str]:
    """The words of the page's text, its tags removed."""
    texts: list[str] = []
    parser = HTMLParser()
    parser.handle_data = texts.append
    parser.feed(page)
    return "".join(texts).split()


def alone(checkpoint, sentences: list[str], **decode) -> dict[str, str]:
    """Each sentence translated by itself, with the checkpoint's decoding but `decode`;
    on one torch thread (a module's fixture runs before the `one_thread` fixture)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        translator = Translator.from_checkpoint(checkpoint, **decode)
        return {s: translator.translate([s])[0] for s in sentences}
    finally:
        torch.set_num_threads(threads)


@dataclass
class Reply:
    status: int
    body: dict
    headers: dict


def request(url: str, data: object = None, raw: bytes | None = None, timeout: float = 60) -> Reply:
    """GET `url`, or POST `data` as JSON (or `raw` bytes); the reply whatever its status."""
    body = raw if raw is not None else None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            return Reply(reply.status, json.loads(reply.read()), dict(reply.headers))
    except urllib.error.HTTPError as err:
        return Reply(err.code, json.loads(err.read()), dict(err.headers))


def wait_ready(url: str, seconds: float = 240) -> None:
    """Until `url`/ready answers 200. Each model loads in a process of its own, several at
    once: on two busy cores a server of three models has taken more than a minute."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if request(f"{url}/ready", timeout=5).status == 200:
                return
        except OSError:  # not listening yet
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} not ready in {seconds} s")


@dataclass
class Served:
    url: str
    service: Service
    server: object  # the uvicorn.Server: `server.should_exit = True` shuts it down


@contextmanager
def serving(config: ServeConfig, ready: bool = True) -> Iterator[Served]:
    """The app of `config` served by uvicorn in a thread on a free loopback port."""
    import uvicorn

    from aiayn.serve.app import create_app, listening_socket, server_config

    if config.threads is None:  # the model's process decodes with the test's threads
        config = dataclasses.replace(config, threads=torch.get_num_threads())
    if config.compile == "auto":  # no compiled step per test model (tens of seconds each)
        config = dataclasses.replace(config, compile="never")
    service = Service(config)
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(server_config(create_app(service)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        if ready:
            wait_ready(url)
        yield Served(url, service, server)
    finally:
        server.should_exit = True
        thread.join(30)


@contextmanager
def running(config: ServeConfig, ready: bool = True) -> Iterator[tuple[str, Service]]:
    """`serving`, as (url, service)."""
    with serving(config, ready) as served:
        yield served.url, served.service


def write_head_report(checkpoint, path: Path) -> Path:
    """`aiayn heads --json path` for `checkpoint` on two sentences with references (so each
    head has its importance): the file `aiayn serve --heads` takes."""
    from aiayn.analysis.heads_output import run_heads

    src, ref = path.with_suffix(".src"), path.with_suffix(".ref")
    src.write_text("die Katze sitzt auf einer Matte\nder Hund\n", encoding="utf-8")
    ref.write_text("the cat sits on a mat\nthe dog\n", encoding="utf-8")
    run_heads(Translator.from_checkpoint(checkpoint), src, ref, json_out=path)
    return path
