"""The API as `/openapi.json` describes it, fuzzed by a tool no one here wrote: schemathesis
runs against a real `aiayn serve` on loopback, on every operation of its schema."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from aiayn.serve.service import ServeConfig
from serve_helpers import request, running, write_head_report
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

# All of schemathesis's checks but one, with the statuses this API documents: a request the
# schema forbids is refused with 4xx (413 among them: too large); no 5xx but 503 and 504.
# Left out: positive_data_acceptance, that every request the schema allows succeeds; JSON
# Schema cannot say that nbest is at most the beam, that a file is UTF-8 or how many
# tokens a sentence makes, so some allowed requests are rightly refused.
CONFIG = """
[checks]
enabled = true
[checks.positive_data_acceptance]
enabled = false
[checks.negative_data_rejection]
expected-statuses = [400, 403, 404, 405, 413, 415, 422, 429]
[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", 503, 504]
"""


def pair(source: str, target: str) -> dict:
    return {"languages": {"source": source, "target": target}}


@pytest.fixture(scope="module", params=["one model", "three models"])
def url(request, tmp_path_factory):
    """A server of one model (with its head report), and one of three (en -> de, de -> en,
    en -> fr: de -> fr through English, /detect over two languages, /heads a 404)."""
    root = tmp_path_factory.mktemp("schema")
    ckpt = save_tiny_checkpoint(root / "ckpt", meta=pair("en", "de"))
    limits = dict(max_sentences=4, max_beam=3, max_sentence_tokens=64, max_body_bytes=20_000,
                  max_wait_ms=0, threads=1)  # fmt: skip
    if request.param == "one model":
        heads = write_head_report(ckpt, tmp_path_factory.mktemp("report") / "heads.json")
        config = ServeConfig(str(ckpt), heads=str(heads), **limits)
    else:
        others = [save_tiny_checkpoint(root / f"{s}-{t}", meta=pair(s, t), seed=seed)
                  for s, t, seed in (("de", "en", 1), ("en", "fr", 2))]  # fmt: skip
        config = ServeConfig([str(ckpt), *map(str, others)], **limits)
    with running(config) as (url, _):
        yield url


def test_the_schema_documents_every_route_body_and_error(url):
    spec = request(f"{url}/openapi.json").body
    operations = {(path, method): op for path, item in spec["paths"].items()
                  for method, op in item.items()}  # fmt: skip
    assert set(operations) == {
        ("/v1/translate", "post"), ("/health", "get"), ("/ready", "get"), ("/info", "get"),
        ("/heads", "get"), ("/", "get"), ("/languages", "get"), ("/translate", "post"),
        ("/detect", "post"), ("/translate_file", "post"), ("/download_file/{name}", "get"),
        ("/frontend/settings", "get"), ("/suggest", "post"),
    }  # fmt: skip
    for (path, method), op in operations.items():
        if method == "post" and path != "/suggest":
            assert op["requestBody"]["content"], path
        for status, response in op["responses"].items():
            if status[0] in "45":
                schema = response["content"]["application/json"]["schema"]
                assert schema["required"] == ["error"], (path, status)
    v1 = operations[("/v1/translate", "post")]
    fields = v1["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert fields["beam"]["maximum"] == 3 and fields["text"]["anyOf"][1]["maxItems"] == 4
    assert set(v1["responses"]) == {"200", "403", "413", "422", "429", "503", "504"}
    libre = operations[("/translate", "post")]["requestBody"]["content"]
    assert set(libre) == {"application/json", "application/x-www-form-urlencoded"}


def test_schemathesis_finds_no_fault_in_any_operation(url, tmp_path):
    """A bounded run (5 examples an operation, a fixed seed): every response is documented
    and matches its schema, no 5xx but 503 and 504, every invalid request refused."""
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG, encoding="utf-8")
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color",
               "run", f"{url}/openapi.json", "--max-examples", "5", "--seed", "1",
               "--phases", "coverage,fuzzing", "--generation-database", "none", "--workers", "1",
               "--request-timeout", "30"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert re.search(r"Selected: 13/13\s+Tested: 13", done.stdout), done.stdout[-3000:]
    assert re.search(r"(\d+) generated, \1 passed", done.stdout), done.stdout[-3000:]
