"""`aiayn serve --worker process`: each model decodes in a child process of its own, talking
plain JSON frames; it gives the thread worker's results, and a child that fails says why."""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest

import aiayn.serve.runner as runner_module
from aiayn.cli import main
from aiayn.errors import ConfigError
from aiayn.serve.runner import Load, Options, Wants, load_runner
from aiayn.serve.service import ServeConfig
from aiayn.serve.worker import (HEADER, ProcessRunner, WorkerError, WorkerExited, read_frame,
                                write_frame)
from serve_helpers import request, running
from tiny_checkpoint import WORDS, save_tiny_checkpoint
from tiny_run import one_thread  # noqa: F401 (autouse fixture)

SENTENCES = [" ".join(WORDS[i : i + 2 + i % 4]) for i in range(6)] + [""]
OPTIONS = Options(beam=3, alpha=0.6, nbest=2)
ALL = Wants(attention=True, alignment=True, log_probs=True)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    meta = {"languages": {"source": "en", "target": "de"}}
    return save_tiny_checkpoint(tmp_path_factory.mktemp("worker") / "ckpt", meta=meta)


@pytest.fixture(scope="module")
def child(ckpt):
    runner = ProcessRunner(Load(str(ckpt), threads=1, compile="never"))
    runner.start()
    yield runner
    runner.close()


def sources_of(runner_in_process) -> list[list[int]]:
    return runner_in_process.translator.encode(SENTENCES)


def workers() -> set[int]:
    """The process ids of this process's children that are model workers."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
            if ppid == os.getpid() and b"aiayn.serve.worker" in command:
                out.add(int(stat.parent.name))
        except (OSError, ValueError):
            continue  # a process that ended while we looked
    return out


def test_frames_carry_json_and_end_as_none():
    stream = io.BytesIO()
    write_frame(stream, {"sources": [[5, 6, 2]], "text": "Grüße"})
    write_frame(stream, [1.5, None])
    whole = stream.getvalue()
    stream.seek(0)
    assert read_frame(stream) == {"sources": [[5, 6, 2]], "text": "Grüße"}
    assert read_frame(stream) == [1.5, None]
    assert read_frame(stream) is None  # the other side has gone
    assert read_frame(io.BytesIO(whole[: HEADER.size + 3])) is None  # cut off mid-frame


def test_a_child_process_gives_the_thread_workers_results(ckpt, child):
    here = load_runner(Load(str(ckpt), threads=1, compile="never"))
    sources = sources_of(here)
    wants = [ALL, Wants(), Wants(log_probs=True), ALL, Wants(alignment=True), ALL, ALL]
    expected = here.run(sources, OPTIONS, wants)
    got = child.run(sources, OPTIONS, wants)
    assert len(got) == len(expected) == len(SENTENCES)
    for g, e in zip(got, expected):
        assert [text for text, _ in g.nbest] == [text for text, _ in e.nbest]
        assert [s for _, s in g.nbest] == pytest.approx([s for _, s in e.nbest], abs=1e-4)
        assert g.alignment == e.alignment and g.tokens == e.tokens
        if e.log_probs is None:
            assert g.log_probs is None
        else:
            for a, b in zip(g.log_probs, e.log_probs):
                assert a == pytest.approx(b, abs=1e-4)
        assert (g.attention is None) == (e.attention is None)
        if e.attention is not None:
            assert g.attention.keys() == e.attention.keys()
            assert g.attention["source"] == e.attention["source"]


def test_a_batch_that_asks_for_nothing_more_runs_no_teacher_forced_pass(ckpt, monkeypatch):
    """Alignments and per-token log-probabilities are each a pass of the model over the
    hypotheses found: run only for the sentences that ask, and not at all where none does."""
    runner = load_runner(Load(str(ckpt), threads=1, compile="never"))
    sources = sources_of(runner)
    passes = []
    for name in ("word_alignments", "token_log_probs"):
        real = getattr(runner_module, name)
        monkeypatch.setattr(runner_module, name,
                            lambda *a, real=real, name=name: passes.append(name) or real(*a))  # fmt: skip
    runner.run(sources, OPTIONS, [Wants()] * len(sources))
    assert passes == []
    got = runner.run(sources, OPTIONS, [Wants(log_probs=True)] + [Wants()] * (len(sources) - 1))
    assert passes == ["token_log_probs"] and got[0].log_probs and got[1].log_probs is None


def test_a_failed_batch_says_why_and_the_child_goes_on(ckpt, child):
    with pytest.raises(WorkerError, match="IndexError"):
        child.run([[10**6, 2]], OPTIONS, [Wants()])  # an id past the vocabulary
    (result,) = child.run([[5, 6, 2]], OPTIONS, [Wants()])
    assert result.nbest and isinstance(result.nbest[0], tuple)


def test_a_child_that_dies_mid_batch_fails_it_and_the_next_batch_starts_another(ckpt,
                                                                               monkeypatch):
    runner = ProcessRunner(Load(str(ckpt), threads=1, compile="never"))
    runner.start()
    try:
        first = runner.process
        first.kill()
        first.wait()
        monkeypatch.setattr(first, "poll", lambda: None)  # as if it died after the batch went
        with pytest.raises(WorkerExited, match=r"exited \(code -9\) during a batch; it is "
                                               "started again for the next one"):  # fmt: skip
            runner.run([[5, 6, 2]], OPTIONS, [Wants()])
        (result,) = runner.run([[5, 6, 2]], OPTIONS, [Wants()])
        assert result.nbest and runner.process.pid != first.pid
        runner.process.kill()  # found dead before a batch: started again, the batch answered
        runner.process.wait()
        (again,) = runner.run([[5, 6, 2]], OPTIONS, [Wants()])
        assert again == result
    finally:
        runner.close()
    assert runner.process is None


def test_a_child_ignores_the_signals_meant_for_the_server(ckpt, child):
    """Ctrl-C and a service manager's SIGTERM reach the whole process group: the child goes
    on answering the queue, and ends when the server closes its input."""
    child.process.send_signal(signal.SIGINT)
    child.process.send_signal(signal.SIGTERM)
    (result,) = child.run([[5, 6, 2]], OPTIONS, [Wants()])
    assert result.nbest and child.process.poll() is None


def test_info_says_what_runs_each_models_search(ckpt, monkeypatch):
    """The child says, once loaded, what runs its search: /info shows it per model."""
    with running(ServeConfig(str(ckpt), threads=1)) as (url, _):
        assert request(url + "/info").body["model"]["search"] == "fast path"
    with running(ServeConfig(str(ckpt), threads=1, compile="never", worker="thread")) as (url, _):
        assert request(url + "/info").body["model"]["search"] == "fast path"
    assert ProcessRunner(Load(str(ckpt))).search_kind is None  # not yet loaded
    assert load_runner(Load(str(ckpt), threads=1, compile="never")).search_kind == "fast path"


def test_a_dead_model_process_is_a_503_to_retry(ckpt, monkeypatch):
    def died(self, sources, options, extras):
        raise WorkerExited("the model's worker process exited (code -9) during a batch")

    with running(ServeConfig(str(ckpt), threads=1)) as (url, service):
        monkeypatch.setattr(ProcessRunner, "run", died)
        reply = request(url + "/v1/translate", {"text": "the cat"})
    assert reply.status == 503 and "retry-after" in {k.lower() for k in reply.headers}
    assert reply.body["error"].startswith("not translated: the model's worker process exited")


def test_a_model_that_cannot_load_fails_start_with_the_reason(tmp_path):
    bad = tmp_path / "not-a-checkpoint"
    bad.mkdir()
    with pytest.raises(WorkerError, match="not-a-checkpoint: not an aiayn checkpoint, "
                                          "checkpoint.json is missing"):  # fmt: skip
        ProcessRunner(Load(str(bad))).start()


def test_a_server_whose_worker_cannot_load_says_why_once(tmp_path):
    """The batcher's "could not be loaded" and the child's reason, not the phrase twice."""
    ckpt = save_tiny_checkpoint(tmp_path / "ckpt")
    (ckpt / "model.safetensors").write_bytes(b"not weights")
    with running(ServeConfig(str(ckpt), worker="process"), ready=False) as (url, service):
        deadline = time.monotonic() + 120
        while service.error is None and time.monotonic() < deadline:
            time.sleep(0.1)
        reply = request(url + "/ready")
    assert reply.status == 503
    assert reply.body["error"].count("could not be loaded") == 1, reply.body["error"]


def test_the_server_decodes_in_a_child_that_ends_with_it(ckpt):
    before = workers()  # the module's other child
    config = ServeConfig(str(ckpt), threads=1, worker="process")
    with running(config) as (url, service):
        assert len(workers() - before) == 1
        reply = request(url + "/v1/translate", {"text": SENTENCES[:3]})
        assert reply.status == 200 and len(reply.body["translations"]) == 3
        service.stop()
    assert workers() == before


def test_worker_names_a_process_or_a_thread(ckpt, capsys):
    with pytest.raises(ConfigError, match="--worker fibre: choose one of process, thread"):
        ServeConfig(str(ckpt), worker="fibre")
    with pytest.raises(SystemExit):
        main(["serve", "--checkpoint", str(ckpt), "--worker", "fibre"])
    assert "invalid choice: 'fibre'" in capsys.readouterr().err


def test_a_model_process_builds_its_compiled_step_as_it_warms_up(ckpt, monkeypatch, tmp_path):
    """`--compile auto` (the default): a server's model builds the compiled decoder step
    before it answers (here a build that fails, so no test waits for a compiler: the model
    then decodes without it, and says why); `never` does not try."""
    import aiayn.fast.compiled_step as compiled

    from aiayn.fast.search import FastSearch

    built = []

    def fail(model, path):
        built.append(path)
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(compiled, "_build", fail)
    monkeypatch.setenv("AIAYN_CACHE_DIR", str(tmp_path))
    with pytest.warns(UserWarning, match="could not be compiled"):
        runner = load_runner(Load(str(ckpt), threads=1))
    assert [p.parent for p in built] == [tmp_path / "steps"]
    assert isinstance(runner.translator.search, FastSearch) and runner.search_kind == "fast path"
    load_runner(Load(str(ckpt), threads=1, compile="never"))
    assert len(built) == 1
    with pytest.raises(ConfigError, match="--compile sometimes: choose one of auto, always, never"):
        ServeConfig(str(ckpt), compile="sometimes")
