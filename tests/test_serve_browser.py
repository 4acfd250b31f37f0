"""The web pages in a real headless Chromium: the service's page against a real `aiayn serve`
process, and the page `aiayn attention` writes. Never skipped: `.ci/run` installs Chromium."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch

from aiayn.cli import main
from serve_browser import browser_page, served, show_lines, translate_on_page
from serve_helpers import request
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

SENTENCE = "die Katze sitzt auf einer Matte"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("browser") / "ckpt")


@pytest.fixture(scope="module")
def url(ckpt):
    """A real `aiayn serve` process (one for the module: it takes seconds to start)."""
    with served(ckpt, "--max-sentences", "2") as url:
        yield url


@pytest.fixture(scope="module")
def page():
    with browser_page() as page:
        yield page


def test_the_page_translates_and_draws_the_attention_of_a_clicked_piece(url, page, tmp_path):
    shown = translate_on_page(page, url, SENTENCE)
    api = request(f"{url}/v1/translate", {"text": SENTENCE, "attention": True}).body
    (reply,) = api["translations"]
    assert shown == [reply["text"]]
    a = reply["attention"]
    # decoder self-attention, layer 2, head 1, query piece 2: the pieces up to it
    drawn = show_lines(page, "decoder", 1, "0", "left", 2)
    assert drawn == [w for w in a["decoder"][1][0][2] if w > 0] and len(drawn) == 3
    # encoder-decoder attention, every head, source piece 1: from each target piece
    drawn = show_lines(page, "cross", 0, "all", "right", 1)
    heads = a["cross"][0]
    assert drawn == [w for head in heads for row in head for w in row[1:2] if w > 0]
    assert len(drawn) == len(heads) * len(a["target"])
    assert page.locator("svg.heat").count() == len(a["cross"]) * len(heads)
    page.screenshot(path=str(tmp_path / "serve.png"), full_page=True)
    assert (tmp_path / "serve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_page_shows_an_error_line_and_the_server_goes_on(url, page):
    with pytest.raises(RuntimeError, match="413: too many sentences: 3"):
        translate_on_page(page, url, "a\nb\nc")
    assert translate_on_page(page, url, "a")  # the same page, afterwards


def test_the_attention_html_holds_the_json_data_and_draws_it_offline(ckpt, page, tmp_path):
    html, bertviz = tmp_path / "a.html", tmp_path / "a.json"
    for path, fmt in ((html, "html"), (bertviz, "json")):
        assert main(["attention", "--checkpoint", str(ckpt), "--format", fmt, "-o", str(path),
                     "--target", "the cat", SENTENCE]) == 0  # fmt: skip
    viz = json.loads(bertviz.read_text())
    cross = viz["attention"][2]
    for layer in cross["attn"]:
        for head in layer:
            assert all(abs(sum(row) - 1) < 1e-5 for row in head)
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(html.as_uri())
    data = page.evaluate("DATA")
    assert data["source"] == cross["right_text"] and data["target"] == cross["left_text"]
    torch.testing.assert_close(torch.tensor(data["cross"]), torch.tensor(cross["attn"]),
                               atol=1e-5, rtol=0)  # fmt: skip
    decoder = torch.tensor(viz["attention"][1]["attn"])  # (layers, heads, tgt_len, tgt_len)
    n = decoder.size(-1)
    assert decoder[..., torch.ones(n, n, dtype=torch.bool).triu(1)].eq(0).all()
    drawn = show_lines(page, "decoder", 1, "all", "left", 1)
    expected = decoder[1, :, 1]  # (heads, tgt_len): layer 2's weights of query piece 1
    assert len(drawn) == int(expected.gt(0).sum()) == decoder.size(1) * 2
    torch.testing.assert_close(torch.tensor(drawn), expected[expected.gt(0)], atol=1e-5, rtol=0)
    assert requests == [html.as_uri()]  # nothing loaded from elsewhere


def test_the_png_and_bad_options(ckpt, tmp_path, capsys):
    png = tmp_path / "a.png"
    assert main(["attention", "--checkpoint", str(ckpt), "--format", "png", "--layer", "2",
                 "-o", str(png), SENTENCE]) == 0  # fmt: skip
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png.write_bytes(b"kept")
    assert main(["attention", "--checkpoint", str(ckpt), "--format", "png", "--layer", "3",
                 "-o", str(png), SENTENCE]) == 2  # fmt: skip
    assert "--layer 3 is outside the model's layers 1..2" in capsys.readouterr().err
    assert png.read_bytes() == b"kept"  # a failed run leaves the old file
    assert main(["attention", "--checkpoint", str(ckpt), "-o", str(png), "  "]) == 2
    assert "empty" in capsys.readouterr().err
    assert not list(Path(tmp_path).glob(".*.tmp"))


def test_the_readmes_serve_and_curl_commands_run(url):
    """The README's `bash` block: `aiayn serve` (as the module's server runs it, on this
    test's checkpoint and a free port) and each curl command against it, verbatim but for
    the address."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    lines = [l for l in re.search(r"```bash\n(.*?)```", readme, re.S).group(1).splitlines() if l]
    serve_line, *curls = lines
    args = shlex.split(serve_line)
    assert args[:4] == [".venv/bin/aiayn", "serve", "--checkpoint", "runs/mine/avg5"]
    assert args[4:] == ["--port", "8000"] and len(curls) == 2
    for line in curls:
        line = line.replace("localhost:8000", url.removeprefix("http://"))
        done = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
        assert "translations" in reply or "translatedText" in reply, reply
