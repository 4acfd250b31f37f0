"""Drive the service's web page in a real headless Chromium (Debian's, through Playwright).

The browser test uses these functions; so does the README's screenshot:

    python tests/serve_browser.py runs/demo/checkpoint docs/serve.png "A small dog sees the cat."

`aiayn serve` runs as a real subprocess on a free loopback port.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from serve_helpers import wait_ready
from system_programs import chromium_path

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


@contextmanager
def served(checkpoint: Path, *options: str) -> Iterator[str]:
    """`aiayn serve --checkpoint checkpoint --port 0` as a subprocess; yields its URL once
    it is ready, and stops it afterwards."""
    command = [sys.executable, "-m", "aiayn", "serve", "--checkpoint", str(checkpoint),
               "--port", "0", "--threads", "1", "--compile", "never", *options]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # "aiayn serve: listening on http://127.0.0.1:N/ ..."
        if "listening on " not in line:
            raise RuntimeError(f"aiayn serve did not start: {line!r}")
        url = line.split("listening on ", 1)[1].split()[0].rstrip("/")
        wait_ready(url)
        yield url
    finally:
        process.terminate()
        process.wait(30)


PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 3,
         "is_mobile": True, "has_touch": True}  # a phone: it honours the viewport tag
DESKTOP = {"viewport": {"width": 1000, "height": 900}}


@contextmanager
def chromium() -> Iterator:
    """Debian's Chromium (or Playwright's own: `system_programs.chromium_path`), headless,
    driven by Playwright; pages come from `new_page`."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    if path is None:
        raise RuntimeError("no Chromium: run `python tests/system_programs.py install`")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(path), headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser, device: dict = DESKTOP):
    """A page in a fresh context (its own profile: no cookies or cache) as `device`."""
    return browser.new_context(**device).new_page()


def translate_on_page(page, url: str, text: str, keys: bool = False) -> list[str]:
    """Open the page, type `text`, press Translate (`keys`: Ctrl+Enter in the text box);
    -> the translated sentences it shows, in order. The page's error line as RuntimeError."""
    page.goto(url + "/")
    page.fill("#source", text)
    if keys:
        page.press("#source", "Control+Enter")
    else:
        page.click("#translate")
    page.wait_for_selector("body[data-state=done], body[data-state=error]")
    if page.get_attribute("body", "data-state") == "error":
        raise RuntimeError(page.text_content("#status"))
    page.wait_for_selector("svg.lines line.attn-line", state="attached")
    return page.locator("#results .translation").all_text_contents()


def show_lines(page, kind: str, layer: int | None, head: str, side: str, index: int) -> list[float]:
    """Pick kind, layer (0-based; None: the one the page opens on) and head ("all" or "0",
    "1", ...), click a piece on `side` ("left": queries, "right": keys); -> the weights of
    the lines drawn, in drawing order."""
    # by position: Playwright also matches a value against the labels ("1" is layer 0's)
    page.select_option("select[name=kind]", value=kind)
    if layer is not None:
        page.select_option("select[name=layer]", index=layer)
    page.select_option("select[name=head]", index=0 if head == "all" else int(head) + 1)
    chosen = page.evaluate("[...document.querySelectorAll('.controls select')].map(s => s.value)")
    assert chosen[0] == kind and chosen[2] == head, chosen
    assert layer is None or chosen[1] == str(layer), chosen
    page.click(f'svg.lines text.tok[data-side="{side}"][data-index="{index}"]')
    lines = page.locator("svg.lines line.attn-line")
    return [float(w) for w in lines.evaluate_all("ls => ls.map(l => l.dataset.weight)")]


def screenshot(checkpoint: Path, out: Path, text: str) -> None:
    """The README's picture: the page with `text` translated, its second word clicked (the
    source words aligned with it marked), and a target piece clicked."""
    with served(checkpoint) as url, chromium() as browser:
        page = new_page(browser)
        translate_on_page(page, url, text)
        page.click('#chosen-target .word[data-index="1"]')
        show_lines(page, "cross", None, "all", "left", 2)  # on the most readable layer
        page.screenshot(path=str(out), full_page=True)


if __name__ == "__main__":
    screenshot(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
