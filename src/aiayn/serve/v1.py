"""`POST /v1/translate`: its body's fields, checked, and its answer.

    {"text": str | [str], "beam", "alpha", "nbest", "split": true, "format": "text" | "html",
     "attention", "alignment", "log_probs": false, "api_key"}
    -> {"translations": [{"text", "score", "nbest": [{"text", "score"}], "alignment"?,
                          "attention"?, "sentences": [{"source", "text", "score", "nbest":
                          [{"text", "score", "tokens"?, "log_probs"?}], "alignment"?,
                          "attention"?}]}]}

One translation per text, in order. A text is cut into sentences unless `"split": false`
(`texts.py`; HTML always is, and keeps its tags); each sentence's own result is in
`sentences`, and a text of one sentence
also carries its attention and its hypotheses' tokens and log-probabilities at the top,
as before texts were split. `alignment`: (source word, target word) pairs, 0-based, of
the sentence or (plain text) of the whole text; `log_probs`: log p of each token of each
hypothesis, its end of sentence `</s>` last (their sum over lp(|y|) is its score).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiayn.serve.models import Model
from aiayn.serve.runner import Options, Result, Wants
from aiayn.serve.schema import MAX_ALPHA
from aiayn.serve.service import ApiError, Service
from aiayn.serve.texts import TextResult

FIELDS = {"text", "beam", "alpha", "nbest", "split", "format", "attention", "alignment",
          "log_probs", "api_key", "source", "target"}  # fmt: skip


@dataclass
class V1Request:
    texts: list[str]
    options: Options
    wants: Wants
    split: bool
    html: bool
    route: list[Model]


def _texts(data: dict, name: str) -> list[str]:
    value = data.get(name)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return value
    raise ApiError(422, f'"{name}" must be a string or a list of strings')


def _int(data: dict, name: str, default: int, low: int, high: int, limit: str) -> int:
    value = data.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(422, f'"{name}" must be an integer, got {json.dumps(value)}')
    if not low <= value <= high:
        raise ApiError(422, f'"{name}" must be in {low}..{high} ({limit}), got {value}')
    return value


def _flag(data: dict, name: str, default: bool) -> bool:
    value = data.get(name, default)
    if not isinstance(value, bool):
        raise ApiError(422, f'"{name}" must be true or false, got {json.dumps(value)}')
    return value


def parse_v1(data: Any, service: Service) -> V1Request:
    """The fields of a /v1/translate body, checked; 422 naming the first that is bad."""
    if not isinstance(data, dict):
        raise ApiError(422, "the body must be a JSON object")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise ApiError(422, f"unknown field(s) {', '.join(unknown)}; known: {sorted(FIELDS)}")
    route = _route(data, service)
    defaults = service.defaults(route[-1])
    beam = _int(data, "beam", defaults.beam, 1, service.config.max_beam, "--max-beam")
    nbest = _int(data, "nbest", 1, 1, beam, "at most the beam")
    alpha = data.get("alpha", defaults.alpha)
    number = isinstance(alpha, (int, float)) and not isinstance(alpha, bool)
    if not number or not 0 <= alpha <= MAX_ALPHA:
        raise ApiError(422, f'"alpha" must be a number in 0..{MAX_ALPHA:g}, '
                            f"got {json.dumps(alpha)}")  # fmt: skip
    text_format = data.get("format", "text")
    if text_format not in ("text", "html"):
        raise ApiError(422, f'"format" must be "text" or "html", got {json.dumps(text_format)}')
    wants = Wants(*(_flag(data, name, False) for name in ("attention", "alignment", "log_probs")))
    return V1Request(_texts(data, "text"), Options(beam, float(alpha), nbest), wants,
                     _flag(data, "split", True), text_format == "html", route)  # fmt: skip


def _route(data: dict, service: Service) -> list[Model]:
    """The models for the body's `source` and `target`: by default the server's only source
    language (else "auto": detected over the texts) and its only target (else required)."""
    sources, targets = service.models.codes()
    source = data.get("source", sources[0] if len(sources) == 1 else "auto")
    target = data.get("target", targets[0] if len(targets) == 1 else None if targets else "")
    if target is None:
        raise ApiError(422, f'"target" is required: this server translates into '
                            f'{", ".join(targets)}')  # fmt: skip
    if not isinstance(source, str) or not isinstance(target, str):
        raise ApiError(422, '"source" and "target" must be language codes')
    try:
        texts = _texts(data, "text") if source == "auto" else []  # detected over
        return service.pick(source, target, texts)[0]
    except ApiError as err:  # no model for the pair: a value out of range here
        raise ApiError(422, err.message) from None


def _hypotheses(result: Result, wants: Wants) -> list[dict]:
    out = []
    for k, (text, score) in enumerate(result.nbest):
        hypothesis: dict[str, Any] = {"text": text, "score": score}
        if wants.log_probs:
            hypothesis.update(tokens=result.tokens[k], log_probs=result.log_probs[k])
        out.append(hypothesis)
    return out


def _sentence(source: str, result: Result, wants: Wants, pivot_model: str = "") -> dict:
    (text, score), out = result.nbest[0], {"source": source}
    out.update(text=text, score=score, nbest=_hypotheses(result, wants))
    if wants.alignment:
        out["alignment"] = [list(link) for link in result.alignment or []]
    if result.attention is not None:
        out["attention"] = result.attention
    if result.pivot is not None:  # through English: the first leg's own translation
        first = result.pivot
        out["pivot"] = {"model": pivot_model, "text": first.nbest[0][0], "score": first.nbest[0][1]}
        if first.attention is not None:
            out["pivot"]["attention"] = first.attention
    return out


def answer(result: TextResult, wants: Wants, models: bool = False) -> dict:
    """One text's entry of `translations`; `wants`: what the client asked for; `models`:
    name the models that translated it (a server of several)."""
    first = result.models[0] if result.models else ""
    sentences = [_sentence(s, r, wants, first) for s, r in zip(result.sentences, result.results)]
    nbest = [{"text": text, "score": score} for text, score in result.nbest]
    out: dict[str, Any] = {"text": result.text, "score": result.score, "nbest": nbest}
    if len(sentences) == 1:  # its sentence's own fields, as before texts were split
        for joined, own in zip(nbest, sentences[0]["nbest"]):
            joined.update({k: v for k, v in own.items() if k in ("tokens", "log_probs")})
        if "attention" in sentences[0]:
            out["attention"] = sentences[0]["attention"]
    if wants.alignment and result.alignment is not None:
        out["alignment"] = [list(link) for link in result.alignment]
    out["sentences"] = sentences
    if models:
        out["models"] = result.models
    return out
