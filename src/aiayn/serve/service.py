"""The translation service without its HTTP layer: limits, the models' loading, requests.

`Service.translate` checks a request against the limits (`ServeConfig`), queues it for the
worker thread of its model's batcher (`batcher.Batcher`) and waits for it, at most
`timeout_s`. Each refusal is an `ApiError` with the HTTP status it maps to and a message
naming the limit. With several checkpoints (`models.py`), `route` / `pick` choose the
models of a request's pair (detecting its source for "auto": `text.language`), and
`translate_texts` sends its sentences through each in turn (`pivot.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import torch

from aiayn.analysis.heads_output import read_report
from aiayn.checkpoint import Checkpoint
from aiayn.data.vocab import cpu_threads
from aiayn.errors import ConfigError
from aiayn.config import COMPILE
from aiayn.model.transformer import parameter_count
from aiayn.serve.batcher import Batcher, Job, NotReady, QueueFull, Runner, Turns
from aiayn.serve.models import Model, Models, NoRoute, checkpoint_paths
from aiayn.serve.pivot import pivot_options, pivot_wants, through
from aiayn.serve.runner import Load, Options, Result, Wants, load_runner
from aiayn.serve.texts import TextResult, join, segment
from aiayn.serve.worker import ProcessRunner, WorkerExited
from aiayn.text.language import LanguageIdentifier
from aiayn.translate import source_ids


T = TypeVar("T")
WORKERS = ("process", "thread")  # where a model decodes: `worker.py` says why a process
# A request's texts of at most this many characters are split into sentences and encoded in
# the event loop itself: a short sentence takes microseconds each way, while handing it to a
# thread and back (`asyncio.to_thread`) costs tens of them, twice a request. Longer texts
# go to a thread, so that one large body never stalls the other requests.
INLINE_CHARS = 2000


@dataclass
class ServeConfig:
    """`aiayn serve`'s options: the models, where to listen, batching and the limits."""

    checkpoint: str | list[str]  # one checkpoint, or several (`models.checkpoint_paths`)
    host: str = "127.0.0.1"
    port: int = 8000
    device: str = "cpu"
    int8: bool = False
    compile: str = "auto"  # the compiled decoder step (`fast.for_inference`), built at warm-up
    threads: int | None = None  # torch's CPU threads (None: torch's default)
    max_batch_tokens: int = 4096  # padded source tokens of one batch
    # How long the oldest request waits for others to join it. 0 by default: the worker
    # takes what is queued when it is free, so a batch forms from what arrived while the
    # last one decoded, and a lone request is not held back (Triton's default too).
    max_wait_ms: float = 0.0
    max_queue: int = 1024  # sentences waiting; more -> 503
    max_sentences: int = 64  # per request; more -> 413
    max_sentence_tokens: int = 256  # source tokens of one sentence, eos included; more -> 413
    max_body_bytes: int = 1 << 20  # more -> 413
    max_beam: int = 16  # a larger beam -> 422
    timeout_s: float = 60.0  # a request not answered by then -> 504
    src_lang: str | None = None  # used where neither the checkpoint nor its data names them
    tgt_lang: str | None = None
    api_keys: str | None = None  # a file of API keys (`keys.read_api_keys`); others -> 403
    req_limit: int | None = None  # requests a minute per key or keyless client; more -> 429
    heads: str | None = None  # `aiayn heads --json`'s file for this model: the page's grid
    worker: str = "process"  # each model decodes in a child process (`worker.py`), or "thread"

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"--threads must be at least 1, got {self.threads}")
        for name in ("max_batch_tokens", "max_queue", "max_sentences", "max_sentence_tokens",
                     "max_body_bytes", "max_beam"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if self.req_limit is not None and self.req_limit < 0:
            raise ConfigError(f"--req-limit must be at least 0, got {self.req_limit}")
        if self.max_wait_ms < 0 or self.timeout_s <= 0:
            raise ConfigError("--max-wait-ms must be >= 0 and --timeout > 0")
        if self.worker not in WORKERS:
            raise ConfigError(f"--worker {self.worker}: choose one of {', '.join(WORKERS)}")
        if self.compile not in COMPILE:
            raise ConfigError(f"--compile {self.compile}: choose one of {', '.join(COMPILE)}")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"--port {self.port} is not a port number")


def batch_slots(config: ServeConfig) -> int:
    """How many batches (of different models) may run at once: on a CPU, one per `--threads`
    share of the cores this process may use (2 cores, --threads 1: two models decode side by
    side instead of one idling); one on a GPU, and where torch's threads take every core."""
    if torch.device(config.device).type != "cpu":
        return 1
    threads = config.threads or torch.get_num_threads()
    return max(1, cpu_threads() // threads)


async def off_loop(chars: int, function: Callable[..., T], *args) -> T:
    """`function(*args)`, which reads `chars` characters of a request: in the event loop
    where they are at most `INLINE_CHARS`, else in a thread (see `INLINE_CHARS`)."""
    if chars <= INLINE_CHARS:
        return function(*args)
    return await asyncio.to_thread(function, *args)


class ApiError(Exception):
    """A refused request: HTTP `status`, a message naming the problem, extra headers."""

    def __init__(self, status: int, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def model_languages(config: ServeConfig, ckpt: Checkpoint) -> tuple[str | None, str | None]:
    """(source, target) codes: recorded with the model, else `--src-lang` / `--tgt-lang`;
    a flag that contradicts what the model records is an error, not silently ignored."""
    recorded = ckpt.languages
    languages = []
    for flag, given, found in zip(("--src-lang", "--tgt-lang"), (config.src_lang, config.tgt_lang),
                                  recorded):  # fmt: skip
        if given is not None and found is not None and given != found:
            raise ConfigError(f"{flag} {given}, but {config.checkpoint} was trained on {found}")
        languages.append(found if found is not None else given)
    return languages[0], languages[1]


class Service:
    """The models behind their queues (`models.Models`); `start` begins loading them, each
    in its batcher's worker thread, the batchers taking turns on the device."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        paths = checkpoint_paths(config.checkpoint)
        several = len(paths) > 1
        if several and (config.src_lang or config.tgt_lang or config.heads):
            raise ConfigError("--src-lang, --tgt-lang and --heads are for one --checkpoint; "
                              "with several, each checkpoint names its own pair")  # fmt: skip
        turns, models = Turns(batch_slots(config)), []
        for path in paths:
            ckpt = Checkpoint(path)  # a bad path fails now
            pair = model_languages(config, ckpt) if not several else ckpt.languages
            model = Model(path, ckpt.config, pair)
            model.batcher = Batcher(functools.partial(self._load, model), config.max_batch_tokens,
                                    config.max_wait_ms, config.max_queue, turns)  # fmt: skip
            models.append(model)
        self.models = Models(models)
        self.model_config = self.models.first.config
        self.languages = self.models.first.pair
        self.identifier = LanguageIdentifier(self.models.sources)
        m = self.model_config.model
        # what each head does (`aiayn heads`), read and checked now: a wrong file fails here
        self.heads = read_report(config.heads, m.n_layers, m.n_heads) if config.heads else None

    @property
    def batcher(self) -> Batcher:
        """The first model's batcher (a one-model server's only one)."""
        return self.models.first.batcher

    @property
    def parameters(self) -> int | None:
        return self.models.first.parameters

    @property
    def batchers(self) -> list[Batcher]:
        return [model.batcher for model in self.models.all]

    def _load(self, model: Model) -> Runner:
        """In the batcher's thread: load the model (in its own process, or in this one:
        `--worker`), which decodes once, so that ready means it has translated."""
        c = self.config
        # this process's part first: a failure here leaves no model process behind
        if len(self.models.sources) > 1:  # detection is needed: loaded before ready
            self.identifier.load()
        model.parameters = parameter_count(model.config.model)
        model.encode = functools.partial(source_ids, Checkpoint(model.path).src_vocab,
                                         model.config.model)  # fmt: skip
        load = Load(model.path, c.device, c.int8, c.threads, c.max_batch_tokens, c.compile)
        if c.worker == "process":
            runner: Runner = ProcessRunner(load)
            runner.start()
        else:
            runner = load_runner(load)
        model.search_kind = runner.search_kind
        return runner

    def start(self) -> None:
        for batcher in self.batchers:
            batcher.start()

    def stop(self) -> None:
        for batcher in self.batchers:
            batcher.stop()

    @property
    def error(self) -> str | None:
        """Why a model could not be loaded (None while none failed)."""
        return next((b.error for b in self.batchers if b.error), None)

    @property
    def ready(self) -> bool:
        return all(b.ready for b in self.batchers)

    def check_ready(self) -> None:
        if not self.ready:
            reason = self.error or "the model is loading"
            raise ApiError(503, f"not ready: {reason}", {"Retry-After": "2"})

    def head_report(self) -> dict:
        """The `--heads` file's report (404 without one)."""
        if self.heads is None:
            raise ApiError(404, "no head report: start aiayn serve with --heads FILE, the JSON "
                                "that `aiayn heads --json FILE` writes for this model")  # fmt: skip
        return self.heads

    def defaults(self, model: Model | None = None) -> Options:
        decode = (model or self.models.first).config.decode
        return Options(beam=decode.beam, alpha=decode.alpha, nbest=1)

    def route(self, source: str, target: str) -> list[Model]:
        """The models for `source` -> `target` (`Models.route`); 400 naming the pair if none."""
        try:
            return self.models.route(source, target)
        except NoRoute as err:
            raise ApiError(400, str(err)) from None

    def pick(self, source: str, target: str, texts: list[str]
             ) -> tuple[list[Model], tuple[str, float] | None]:  # fmt: skip
        """The route for `source` -> `target`, and for source "auto" the language detected
        over `texts` (one for them all) with its probability; 400 if no models translate it."""
        detected = None
        if source == "auto":
            detected = self.detect("\n".join(texts))[0]
            source = detected[0]
        return self.route(source, target), detected

    def detect_each(self, texts: list[str]) -> list[tuple[str, float]]:
        """Each text's language, as LibreTranslate detects a list's: a text of more than 40
        characters by itself, a shorter one by all the texts together."""
        together = self.detect("\n".join(texts))[0]
        return [self.detect(text)[0] if len(text) > 40 else together for text in texts]

    async def translate_each(
        self, texts: list[str], sources: list[str], target: str, options_for, *,
        html: bool = False,
    ) -> list[TextResult]:  # fmt: skip
        """Each text translated from its own source language into `target`: the texts of one
        language together (`translate_texts`), the languages at once; `options_for(route)`:
        the decoding of a route. 400 naming a pair no models translate, before any work."""
        groups: dict[str, list[int]] = {}
        for i, source in enumerate(sources):
            groups.setdefault(source, []).append(i)
        routes = {source: self.route(source, target) for source in groups}
        done = await asyncio.gather(*(
            self.translate_texts([texts[i] for i in group], options_for(routes[source]),
                                 html=html, route=routes[source])
            for source, group in groups.items()
        ))  # fmt: skip
        out: list[TextResult] = [None] * len(texts)  # type: ignore[list-item]
        for group, results in zip(groups.values(), done):
            for i, result in zip(group, results):
                out[i] = result
        return out

    def detect(self, text: str) -> list[tuple[str, float]]:
        """The languages the server translates from that the identifier knows, most likely
        first, with their probability. Where it cannot tell two apart (one source language,
        or one it knows), that one is named with probability 0: assumed, not detected."""
        sources = self.models.sources
        known = self.identifier.known if len(sources) > 1 else []
        if len(known) < 2:
            return [((known or sources or ["auto"])[0], 0.0)]
        return self.identifier.rank(text)

    async def _sources(self, sentences: list[str], model: Model) -> list[list[int]]:
        """Each sentence's source ids, eos included, encoded here once (in a thread, not in
        the event loop) and carried to the worker; 413 past the limits."""
        c = self.config
        if len(sentences) > c.max_sentences:
            raise ApiError(413, f"too many sentences: {len(sentences)}; the limit is "
                                f"--max-sentences {c.max_sentences}")  # fmt: skip
        sources = await off_loop(sum(map(len, sentences)), model.encode, sentences)
        lengths = [len(ids) for ids in sources]
        for i, n in enumerate(lengths):
            if n > c.max_sentence_tokens:
                start = sentences[i][:40] + ("..." if len(sentences[i]) > 40 else "")
                raise ApiError(413, f"sentence {i + 1} ({start!r}) is too long: {n} tokens; "
                                    f"the limit is --max-sentence-tokens "
                                    f"{c.max_sentence_tokens}")  # fmt: skip
        return sources

    async def translate(
        self, sentences: list[str], options: Options, wants: Wants = Wants(),
        model: Model | None = None,
    ) -> list[Result]:  # fmt: skip
        """Each sentence's result, in order, from one job of `model` (the first one by
        default); refusals as `ApiError`s."""
        self.check_ready()
        if not sentences:
            return []
        model = model or self.models.first
        sources = await self._sources(sentences, model)
        job = Job(sources, [len(x) for x in sources], options, [wants] * len(sentences))
        try:
            future = model.batcher.submit(job)
        except QueueFull as err:
            raise ApiError(503, str(err), {"Retry-After": "1"}) from None
        except NotReady as err:
            raise ApiError(503, f"not ready: {err}", {"Retry-After": "2"}) from None
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.config.timeout_s)
        except (NotReady, WorkerExited) as err:  # the worker stopped, or its process died
            raise ApiError(503, f"not translated: {err}", {"Retry-After": "2"}) from None
        except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11 on
            raise ApiError(504, f"no translation within --timeout {self.config.timeout_s:g} s; "
                                "send fewer or shorter sentences") from None  # fmt: skip

    async def _through(self, route: list[Model], sentences: list[str], options: Options,
                       wants: Wants) -> list[Result]:  # fmt: skip
        """`sentences` translated by each model of `route` in turn (`pivot.py`)."""
        if len(route) == 1:
            return await self.translate(sentences, options, wants, route[0])
        first, second = route
        english = await self.translate(sentences, pivot_options(options), pivot_wants(wants),
                                       first)  # fmt: skip
        final = await self.translate([r.nbest[0][0] for r in english], options, wants, second)
        return [through(a, b) for a, b in zip(english, final)]

    async def translate_texts(
        self, texts: list[str], options: Options, wants: Wants = Wants(), *, split: bool = True,
        html: bool = False, chunked: bool = False, route: list[Model] | None = None,
    ) -> list[TextResult]:  # fmt: skip
        """Each text cut into sentences (`texts.segment`), translated by the models of
        `route` (the first model by default), put back together.
        The sentences go in one job, within --max-sentences; `chunked` (a file: long, and
        sharing the queue with others), `max_sentences` a job, one job after another."""
        self.check_ready()
        if len(texts) > self.config.max_sentences:
            raise ApiError(413, f"too many sentences: {len(texts)} texts, a sentence each at "
                                f"least; the limit is --max-sentences "
                                f"{self.config.max_sentences}")  # fmt: skip
        route = route or [self.models.first]
        lang = route[0].pair[0] or "en"
        docs = await off_loop(sum(map(len, texts)), segment, texts, lang, split, html)
        sentences = [s for doc in docs for s in doc.sentences]
        wants = dataclasses.replace(wants, alignment=True) if html else wants  # places tags
        step = self.config.max_sentences if chunked else max(len(sentences), 1)
        results: list[Result] = []
        for start in range(0, len(sentences), step):
            results += await self._through(route, sentences[start : start + step], options, wants)
        joined = join(docs, results, wants.alignment)
        for result in joined:
            result.models = [model.name for model in route]
        return joined

    async def translate_file(self, text: str, html: bool, route: list[Model] | None = None
                             ) -> str:  # fmt: skip
        """A .txt or .html file's text translated (`translate_texts`, chunked)."""
        (result,) = await self.translate_texts([text], self.defaults(), html=html, chunked=True,
                                               route=route)  # fmt: skip
        return result.text

    def _describe(self, model: Model) -> dict:
        """One model's entry of /info: its architecture, pair, decoding and counts."""
        m, c = model.config.model, self.config
        return {
            "model": {"checkpoint": Path(model.path).name, "d_model": m.d_model,
                      "n_heads": m.n_heads, "n_layers": m.n_layers, "d_ff": m.d_ff,
                      "parameters": model.parameters, "int8": c.int8, "device": c.device,
                      # translations: what runs the search (None while loading); attention,
                      # alignments and log-probabilities: the model's teacher-forced pass
                      "search": model.search_kind},
            "languages": {"source": model.pair[0], "target": model.pair[1]},
            "decode": asdict(self.defaults(model)),
            "ready": model.batcher.ready,
            "stats": asdict(model.batcher.stats),
        }  # fmt: skip

    def info(self) -> dict:
        """The first model's description at the top (a one-model server's), the limits,
        and every model's under `models`."""
        c = self.config
        limits = {k: getattr(c, k) for k in ("max_sentences", "max_sentence_tokens",
                                              "max_body_bytes", "max_beam", "max_queue",
                                              "timeout_s")}  # fmt: skip
        out = self._describe(self.models.first)
        out.update(limits=limits, ready=self.ready,
                   batching={"max_batch_tokens": c.max_batch_tokens, "max_wait_ms": c.max_wait_ms},
                   models=[{"name": m.name, **self._describe(m)} for m in self.models.all])
        return out
