"""The web pages in a real headless Chromium: the service's page against a real `aiayn serve`
process, and the page `aiayn attention` writes. `make test` installs Chromium and curl where it may
(tests/system_programs.py); where it may not, these tests skip with the one line that says
how to get them, except under CI, where they fail."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import torch

from aiayn.cli import main
from serve_browser import PHONE, chromium, new_page, served, show_lines, translate_on_page
from serve_helpers import DOCUMENT, PARAGRAPHS, alone, request, write_head_report
from system_programs import require
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

SENTENCE = "die Katze sitzt auf einer Matte"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("browser") / "ckpt")


@pytest.fixture(scope="module")
def url(ckpt, tmp_path_factory):
    """A real `aiayn serve` process (one for the module: it takes seconds to start), with
    the `aiayn heads` report of its model."""
    heads = write_head_report(ckpt, tmp_path_factory.mktemp("report") / "heads.json")
    with served(ckpt, "--max-sentences", "3", "--heads", str(heads)) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    require("chromium")
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def page(browser):
    return new_page(browser)


@pytest.fixture(scope="module")
def phone(browser):
    return new_page(browser, PHONE)


def api(url: str, texts: list[str]) -> list[dict]:
    """/v1/translate's translations of `texts`, as the page asks for them."""
    body = {"text": texts, "attention": True, "alignment": True}
    return request(f"{url}/v1/translate", body).body["translations"]


def words(labels: list[str]) -> str:
    """The text the page's piece labels spell: "-er" continues the word before it, as
    punctuation does, "␣" is a word's start alone, ⟨start⟩ and ⟨end⟩ the decoder's start
    and the end."""
    text = " ".join(l for l in labels if l not in ("⟨start⟩", "⟨end⟩", "␣"))
    return re.sub(r" ([.,;:!?])", r"\1", text.replace(" -", ""))


def shown_pieces(page, side: str) -> list[str]:
    return page.locator(f'svg.lines text.tok[data-side="{side}"]').all_text_contents()


def test_the_page_shows_the_apis_translation_and_attention_as_words(url, page, tmp_path):
    shown = translate_on_page(page, url, SENTENCE)
    (reply,) = api(url, [SENTENCE])
    assert shown == [reply["text"]]
    assert page.text_content("#chosen-target") == " ".join(reply["text"].split())
    a = reply["sentences"][0]["attention"]
    # it opens on the cross attention's most readable layer, with a legend for its heads
    controls = page.evaluate("[...document.querySelectorAll('.controls select')].map(s => s.value)")
    assert controls == ["cross", str(a["readable_layer"]["cross"]), "all"]
    heads = len(a["cross"][0])
    assert page.locator(".legend .head-key").count() == heads
    assert "shifted right by one" in page.text_content(".legend .note")
    # pieces as words: no sentencepiece mark anywhere, and the source pieces spell the text
    assert any(p.startswith("\u2581") for p in a["source"])  # the JSON has them
    assert "\u2581" not in page.inner_text("body")
    assert words(shown_pieces(page, "right")) == SENTENCE
    assert shown_pieces(page, "left")[0] == "⟨start⟩"
    # decoder self-attention, layer 2, head 1, query piece 2: the pieces up to it
    drawn = show_lines(page, "decoder", 1, "0", "left", 2)
    assert drawn == [w for w in a["decoder"][1][0][2] if w > 0] and len(drawn) == 3
    # encoder-decoder attention, every head, source piece 1: from each target piece
    drawn = show_lines(page, "cross", 0, "all", "right", 1)
    assert drawn == [w for head in a["cross"][0] for row in head for w in row[1:2] if w > 0]
    assert len(drawn) == heads * len(a["target"])
    assert page.locator("svg.heat").count() == len(a["cross"]) * heads
    assert "\u2581" not in page.inner_text("body")
    page.screenshot(path=str(tmp_path / "serve.png"), full_page=True)
    assert (tmp_path / "serve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_clicked_heat_map_cell_shows_the_weight_of_the_json(url, page):
    translate_on_page(page, url, SENTENCE)
    (reply,) = api(url, [SENTENCE])
    cross = reply["sentences"][0]["attention"]["cross"]
    layer, head, query, key = 1, 2, 1, 3
    page.click(f'svg.heat[data-layer="{layer}"][data-head="{head}"] '
               f'rect[data-query="{query}"][data-key="{key}"]')  # fmt: skip
    cell = page.locator(f'table.weights tr.picked td[data-head="{head}"][data-index="{key}"]')
    assert float(cell.text_content()) == cross[layer][head][query][key]
    row = page.locator("table.weights tr.picked td").all_text_contents()
    assert row == [f"{cross[layer][head][query][key]:.4f}"]  # the picked head alone
    assert page.locator("svg.heat.picked").get_attribute("data-layer") == str(layer)
    for k in range(len(cross[layer][head][query])):  # the whole row, key by key
        shown = page.text_content(f'table.weights td[data-head="{head}"][data-index="{k}"]')
        assert float(shown) == cross[layer][head][query][k]


def test_paragraphs_are_shown_as_paragraphs_and_ctrl_enter_translates(url, page):
    paragraphs = ["Die Katze sitzt. Der Hund sitzt auf einer Matte.", "der Hund"]
    shown = translate_on_page(page, url, "\n\n".join(paragraphs), keys=True)
    replies = api(url, paragraphs)  # the server cuts each paragraph into sentences
    sentences = [s for reply in replies for s in reply["sentences"]]
    assert [len(reply["sentences"]) for reply in replies] == [2, 1]
    assert shown == [s["text"] for s in sentences]
    assert page.locator("#results p.paragraph").all_text_contents() == [r["text"] for r in replies]
    page.click('#results .translation[data-index="1"]')  # the second sentence's attention
    assert page.text_content("#chosen-source") == "Der Hund sitzt auf einer Matte."
    assert words(shown_pieces(page, "right")) == "Der Hund sitzt auf einer Matte."


def test_three_paragraphs_of_nine_sentences_come_back_as_such_on_the_page(ckpt, page):
    """Each sentence shown as it is translated alone; each paragraph as a paragraph (a
    server of its own: this module's allows 3 sentences a request)."""
    with served(ckpt) as url:
        shown = translate_on_page(page, url, DOCUMENT)
        paragraphs = page.locator("#results p.paragraph").all_text_contents()
        assert page.locator("#heads").is_hidden()  # no --heads: no grid (GET /heads is 404)
    lone = alone(ckpt, sum(PARAGRAPHS, []))
    assert shown == [lone[s] for s in sum(PARAGRAPHS, [])]
    assert paragraphs == [" ".join(lone[s] for s in p) for p in PARAGRAPHS]


def test_the_heads_grid_is_the_report_and_a_clicked_head_shows_its_attention(url, page):
    report = request(f"{url}/heads").body
    layers, heads = report["layers"], report["heads"]
    page.goto(url + "/")
    page.wait_for_selector("#heads:not([hidden]) table.head-grid td")
    for kind in ("encoder", "decoder", "cross"):
        assert page.locator(f'table.head-grid[data-kind="{kind}"] td').count() == layers * heads
    for row in report["rows"]:  # each cell: the BLEU lost and what the head mostly looks at
        cell = page.locator(f'table.head-grid[data-kind="{row["kind"]}"] '
                            f'td[data-layer="{row["layer"] - 1}"][data-head="{row["head"] - 1}"]')  # fmt: skip
        lost, label = cell.inner_text().split("\n")
        assert float(lost) == pytest.approx(row["importance"], abs=0.051) and label == row["behaviour"]
    decoder_2_1 = 'table.head-grid[data-kind="decoder"] td[data-layer="1"][data-head="0"]'
    page.click(decoder_2_1)  # nothing translated yet: the page says what to do
    assert "Translate a sentence" in page.text_content("#status")
    page.fill("#source", "Die Katze sitzt. Der Hund sitzt auf einer Matte.")
    page.click("#translate")
    page.wait_for_selector("body[data-state=done]")
    replies = api(url, ["Die Katze sitzt. Der Hund sitzt auf einer Matte."])
    for index, sentence in enumerate(replies[0]["sentences"]):  # the head stays picked
        page.click(f'#results .translation[data-index="{index}"]')
        controls = page.evaluate("[...document.querySelectorAll('.controls select')].map(s => s.value)")
        assert controls == ["decoder", "1", "0"]
        lines = page.locator("svg.lines line.attn-line")
        assert set(lines.evaluate_all("ls => ls.map(l => l.dataset.head)")) == {"0"}
        drawn = [float(w) for w in lines.evaluate_all("ls => ls.map(l => l.dataset.weight)")]
        weights = sentence["attention"]["decoder"][1][0]  # layer 2, head 1: [query][key]
        assert drawn == [w for row in weights for w in row if w > 0]
    assert page.locator("table.head-grid td.picked").count() == 1
    page.click('table.head-grid[data-kind="cross"] td[data-layer="0"][data-head="3"]')
    controls = page.evaluate("[...document.querySelectorAll('.controls select')].map(s => s.value)")
    assert controls == ["cross", "0", "3"]


def test_a_clicked_word_marks_the_words_aligned_with_it(url, page):
    translate_on_page(page, url, SENTENCE)
    (reply,) = api(url, [SENTENCE])
    links = reply["sentences"][0]["alignment"]  # [source word, target word]
    source, target = SENTENCE.split(), reply["text"].split()
    assert page.locator("#chosen-source .word").all_text_contents() == source
    assert page.locator("#chosen-target .word").all_text_contents() == target
    for j in range(len(target)):
        page.click(f'#chosen-target .word[data-index="{j}"]')
        marked = page.locator("#chosen-source .word.aligned").all_text_contents()
        assert marked == [source[i] for i in sorted({i for i, t in links if t == j})]
    i = links[0][0]
    page.click(f'#chosen-source .word[data-index="{i}"]')
    marked = page.locator("#chosen-target .word.aligned").all_text_contents()
    assert marked == [target[t] for t in sorted({t for s, t in links if s == i})] and marked


def test_busy_while_a_request_is_in_flight_and_an_error_replaces_the_results(url, page):
    assert translate_on_page(page, url, "der Hund")
    held = []
    page.route("**/v1/translate", lambda route: held.append(route))
    try:
        page.fill("#source", "die Katze")
        page.click("#translate")
        page.wait_for_selector("body[data-state=busy]")
        while not held:  # the request waits here, in flight, until continued
            page.wait_for_timeout(20)
        assert page.is_disabled("#translate")
        assert page.text_content("#status") == "Translating 1 paragraph…"
        held[0].continue_()
        page.wait_for_selector("body[data-state=done]")
    finally:
        page.unroute("**/v1/translate")
    assert page.locator("#results .translation").all_text_contents() == [
        api(url, ["die Katze"])[0]["text"]
    ]
    with pytest.raises(RuntimeError, match="413: too many sentences: 4"):
        translate_on_page(page, url, "a\n\nb\n\nc\n\nd")  # a sentence a paragraph
    assert page.get_attribute("#status", "role") == "alert"
    assert page.locator("#results .translation").count() == 0  # no old results under it
    assert page.is_hidden("#chosen") and page.locator("svg.lines").count() == 0
    assert translate_on_page(page, url, "a")  # the same page and server, afterwards


def test_on_a_phone_the_page_fits_the_screen(url, phone):
    shown = translate_on_page(phone, url, SENTENCE)
    assert shown == [api(url, [SENTENCE])[0]["text"]]
    assert phone.evaluate("window.innerWidth") == 390  # the viewport tag: not a 980 px page
    show_lines(phone, "cross", None, "all", "left", 1)  # the lines and the table of weights
    assert phone.locator("table.weights").count() == 1
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390  # no horizontal scrolling
    box = phone.locator("svg.lines").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert "\u2581" not in phone.inner_text("body")
    # the heads' grids of the big model (6 layers of 16 heads) fit too: each scrolls alone
    phone.evaluate("""() => {
      const rows = [];
      for (const kind of ["encoder", "decoder", "cross"])
        for (let l = 1; l <= 6; l++) for (let h = 1; h <= 16; h++)
          rows.push({kind, layer: l, head: h, distance: 1.5, entropy: 1, previous: 0.1,
                     same: 0.1, next: 0.1, eos: 0.1, punctuation: 0.1, importance: -0.25,
                     behaviour: "d 1.5"});
      showHeads({sentences: 9, layers: 6, heads: 16, bleu: 30, rows});
    }""")
    assert phone.locator("table.head-grid td").count() == 3 * 6 * 16
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    box = phone.locator('table.head-grid[data-kind="cross"]').bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390


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


def test_the_serve_pages_serve_and_curl_commands_run(url):
    """docs/serve.md's `bash` block: `aiayn serve` (as the module's server runs it, on this
    test's checkpoint and a free port) and each curl command against it, verbatim but for
    the address; the README's `bash` block is the same serve command."""
    require("curl")
    root = Path(__file__).resolve().parents[1]
    blocks = [re.search(r"```bash\n(.*?)```", (root / name).read_text(encoding="utf-8"), re.S)
              .group(1).splitlines() for name in ("docs/serve.md", "README.md")]  # fmt: skip
    serve_line, *curls = [l for l in blocks[0] if l]
    assert [l for l in blocks[1] if l] == [serve_line]
    args = shlex.split(serve_line)
    assert args[:4] == [".venv/bin/aiayn", "serve", "--checkpoint", "runs/mine/avg5"]
    assert args[4:] == ["--port", "8000"] and len(curls) == 2
    for line in curls:
        line = line.replace("localhost:8000", url.removeprefix("http://"))
        done = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
        assert "translations" in reply or "translatedText" in reply, reply


def test_the_page_picks_a_pair_and_shows_each_leg_of_a_pivot(browser, tmp_path):
    """A server of en -> de, de -> en and en -> fr: the page's selectors offer the languages
    read (and "detect") and those the chosen one reaches; de -> fr goes through English, and
    the page names both models and draws the attention of each leg."""
    names = {"en-de": 1, "de-en": 2, "en-fr": 3}
    paths = [save_tiny_checkpoint(tmp_path / name, seed=seed, meta={"languages": dict(
        zip(("source", "target"), name.split("-")))}) for name, seed in names.items()]
    more = [arg for path in paths[1:] for arg in ("--checkpoint", str(path))]
    with served(paths[0], *more) as url:
        page = new_page(browser)
        page.goto(url + "/")
        page.wait_for_selector("#pair:not([hidden])")
        values = "(s) => [...s.options].map((o) => o.value)"
        assert page.eval_on_selector("#from", values) == ["auto", "en", "de"]
        page.select_option("#from", "de")
        assert page.eval_on_selector("#to", values) == ["en", "fr"]
        page.select_option("#to", "fr")
        page.fill("#source", SENTENCE)
        page.click("#translate")
        page.wait_for_selector("body[data-state=done], body[data-state=error]")
        body = {"text": [SENTENCE], "source": "de", "target": "fr", "attention": True,
                "alignment": True}  # fmt: skip
        (reply,) = request(f"{url}/v1/translate", body).body["translations"]
        assert page.text_content("#status") == "Translated by de-en, then en-fr."
        assert page.locator("#results .translation").all_text_contents() == [reply["text"]]
        pivot = reply["sentences"][0]["pivot"]
        assert f'de-en, "{SENTENCE}" → "{pivot["text"]}"' in page.text_content("#first-leg")
        assert page.text_content("#second-leg").startswith(f'then en-fr, "{pivot["text"]}"')
        for view in ("#attention-pivot", "#attention"):  # each leg's attention drawn
            page.wait_for_selector(f"{view} svg.lines line.attn-line", state="attached")
