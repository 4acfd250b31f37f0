"""`aiayn serve --heads FILE`: the report of `aiayn heads --json` checked against the served
model when the server starts, served as GET /heads (404 without it) for the page's grid."""

from __future__ import annotations

import json

import pytest

from aiayn.analysis.heads_output import HEADS as REPORT_SCHEMA
from aiayn.analysis.heads_output import behaviour, read_report
from aiayn.cli import main
from aiayn.errors import ConfigError
from aiayn.json_schema import fits
from aiayn.serve.service import ServeConfig, Service
from serve_helpers import request, running, write_head_report
from tiny_checkpoint import save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

LAYERS, HEADS = 2, 4  # the tiny checkpoint's


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("heads") / "ckpt")


@pytest.fixture(scope="module")
def report_file(ckpt, tmp_path_factory):
    return write_head_report(ckpt, tmp_path_factory.mktemp("report") / "heads.json")


def written(tmp_path, data) -> str:
    path = tmp_path / "heads.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_a_report_is_read_back_with_each_heads_behaviour(report_file):
    data = read_report(report_file, LAYERS, HEADS)
    assert len(data["rows"]) == 3 * LAYERS * HEADS
    assert all(r["behaviour"] == behaviour(r) for r in data["rows"])
    assert all(isinstance(r["importance"], float) for r in data["rows"])
    assert fits(data, REPORT_SCHEMA)  # what GET /heads serves is what its schema says


@pytest.mark.parametrize("change, error", [
    (lambda d: d.update(layers=6), "describes 6 layers of 4 heads; the model has 2 of 4"),
    (lambda d: d.pop("rows"), "no rows"),
    (lambda d: d["rows"].pop(), "23 heads; the model has 24"),
    (lambda d: d["rows"].__setitem__(1, d["rows"][0]), "or is there twice"),
    (lambda d: d["rows"][0].update(kind="sideways"), "is not a head of this model"),
    (lambda d: d["rows"][0].update(layer=3), "is not a head of this model"),
    (lambda d: d["rows"][0].update(entropy="low"), "is not a head of this model"),
    (lambda d: d["rows"][0].update(importance=None), "some heads have an importance and some none"),
    (lambda d: d["rows"][0].update(previous=True), "is not a head of this model"),
    (lambda d: d.pop("sentences"), "its sentences"),
    (lambda d: d.update(bleu="31.2"), "its sentences"),
])  # fmt: skip
def test_a_report_that_does_not_fit_the_model_is_named(report_file, tmp_path, change, error):
    data = json.loads(report_file.read_text(encoding="utf-8"))
    change(data)
    with pytest.raises(ConfigError, match=error.replace("(", r"\(")):
        read_report(written(tmp_path, data), LAYERS, HEADS)


def test_a_file_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "heads.json"
    path.write_text("kind layer head\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="heads.json: unreadable or not valid JSON"):
        read_report(path, LAYERS, HEADS)


def test_get_heads_serves_the_report_and_404_without_one(ckpt, report_file):
    config = ServeConfig(str(ckpt), threads=1, max_wait_ms=0, heads=str(report_file))
    with running(config) as (url, _):
        reply = request(f"{url}/heads")
    assert reply.status == 200
    assert reply.body["rows"] == read_report(report_file, LAYERS, HEADS)["rows"]
    with running(ServeConfig(str(ckpt), threads=1, max_wait_ms=0)) as (url, _):
        reply = request(f"{url}/heads")
    assert reply.status == 404 and "start aiayn serve with --heads FILE" in reply.body["error"]


def test_a_report_of_another_model_stops_the_server_before_it_listens(ckpt, tmp_path, capsys):
    data = {"layers": 6, "heads": 8, "rows": []}
    with pytest.raises(ConfigError, match="describes 6 layers of 8 heads"):
        Service(ServeConfig(str(ckpt), heads=written(tmp_path, data)))
    args = ["serve", "--checkpoint", str(ckpt), "--port", "0", "--heads", written(tmp_path, data)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "describes 6 layers of 8 heads; the model has 2 of 4" in err
    assert "listening" not in err
