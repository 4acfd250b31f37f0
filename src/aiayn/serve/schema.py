"""The OpenAPI description of every route: each request body, its fields, each status.

The routes read their bodies themselves (within `--max-body-bytes`, in JSON or, for
LibreTranslate's routes, in forms), so FastAPI cannot infer what they take: each route
declares it here, as JSON Schema, with the server's own limits (`--max-beam`, ...) as bounds.
Every error, on every route, is `{"error": message}`. `/openapi.json` serves the result;
`tests/test_serve_schema.py` fuzzes the running server against it with schemathesis.
"""

from __future__ import annotations

from aiayn.analysis.heads_output import HEADS  # noqa: F401 (GET /heads: the report's own)
from aiayn.json_schema import NUMBER, STRING, Schema, array, obj
from aiayn.serve.service import ServeConfig

ERROR: Schema = {
    "type": "object",
    "properties": {"error": {"type": "string", "description": "what was wrong, in one line"}},
    "required": ["error"],
}
RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}

# Why each error status is given, route by route.
REASONS = {
    400: "invalid request: a missing or bad field, a pair the models do not translate, or "
         "a limit passed (LibreTranslate's status for all of them)",
    403: "an api_key not in --api-keys (or none, with --req-limit 0)",
    404: "no such file, or (GET /heads) no head report: the server was started without --heads",
    413: "too large: --max-body-bytes, --max-sentences or --max-sentence-tokens",
    422: "not valid: invalid JSON, an unknown field, a value of the wrong type or range",
    429: "more than the key's or the client's requests a minute (--req-limit)",
    503: "not ready (the model is loading) or the queue is full (--max-queue)",
    504: "not translated within --timeout",
}  # fmt: skip


def json_body(schema: Schema, *, form: bool = False, description: str = "") -> dict:
    """An `openapi_extra` giving the request body: JSON, and url-encoded too if `form`."""
    kinds = ["application/json"] + (["application/x-www-form-urlencoded"] if form else [])
    content = {kind: {"schema": schema} for kind in kinds}
    return {"requestBody": {"required": True, "description": description, "content": content}}


def path_parameter(name: str) -> dict:
    """An `openapi_extra` naming a string path parameter (read from `request.path_params`,
    so that FastAPI adds no validation error of its own shape)."""
    return {"parameters": [{"name": name, "in": "path", "required": True, "schema": STRING}]}


def responses(ok: Schema | None, *errors: int, media: str = "application/json") -> dict:
    """FastAPI's `responses`: 200 with `ok` (None: no schema), then each error status."""
    out: dict[int, dict] = {200: {"description": "done", "content": {media: {"schema": ok or {}}}}}
    for status in errors:
        out[status] = {"description": REASONS[status],
                       "content": {"application/json": {"schema": ERROR}}}  # fmt: skip
        if status in (429, 503):
            out[status]["headers"] = RETRY_AFTER
    return out


MAX_ALPHA = 10.0  # lp(y) = ((5 + |y|) / 6) ** alpha stays finite in float32 up to here
API_KEY: Schema = {"type": ["string", "null"], "description": "a key of --api-keys (optional)"}
HYPOTHESIS = obj({"text": STRING, "score": NUMBER}, ("text", "score"))
SCORED = obj(
    {"text": STRING, "score": NUMBER,
     "tokens": array(STRING, description='its pieces, "</s>" last (with log_probs)'),
     "log_probs": array(NUMBER, description="log p of each piece (with log_probs)")},
    ("text", "score"),
)  # fmt: skip
LINKS = array(array({"type": "integer", "minimum": 0}, minItems=2, maxItems=2),
              description="(source word, target word) pairs, 0-based (with alignment)")
ATTENTION = obj(
    {"source": array(STRING), "target": array(STRING),
     **{kind: {"type": "array", "description": f"{kind} attention [layer][head][query][key]"}
        for kind in ("encoder", "decoder", "cross")}},
    ("source", "target", "encoder", "decoder", "cross"),
)  # fmt: skip
PIVOT = obj({"model": STRING, "text": STRING, "score": NUMBER, "attention": ATTENTION},
            ("model", "text", "score"),
            description="through English: the first model's translation")  # fmt: skip
SENTENCE = obj(
    {"source": STRING, "text": STRING, "score": NUMBER,
     "nbest": array(SCORED, description="the n best, best first"),
     "alignment": LINKS, "attention": ATTENTION, "pivot": PIVOT},
    ("source", "text", "score", "nbest"),
)  # fmt: skip
V1_RESPONSE = obj(
    {"translations": array(obj(
        {"text": STRING,
         "score": {**NUMBER, "description": "log P(y|x) / lp(y) (sec. 6.1's length penalty), "
                                            "summed over the text's sentences"},
         "nbest": array(SCORED, description="the n best, best first (a text of several "
                                            "sentences: each sentence's k-th)"),
         "alignment": LINKS,
         "attention": ATTENTION,
         "sentences": array(SENTENCE, description="each sentence's own translations"),
         "models": array(STRING, description="a server of several models: those that "
                                             "translated, in order")},
        ("text", "score", "nbest", "sentences"),
    ), description="one per text, in order")},
    ("translations",),
)  # fmt: skip


def v1_request(c: ServeConfig, codes: Codes = ([], [])) -> Schema:
    return obj(
        {"text": {"anyOf": [STRING, array(STRING, maxItems=c.max_sentences)],
                  "description": "a text, or a list of them"},
         "beam": {"type": "integer", "minimum": 1, "maximum": c.max_beam,
                  "description": "beam size (default: the checkpoint's)"},
         "alpha": {**NUMBER, "minimum": 0, "maximum": MAX_ALPHA,
                   "description": "length penalty (default: the checkpoint's)"},
         "nbest": {"type": "integer", "minimum": 1, "maximum": c.max_beam,
                   "description": "hypotheses to return, at most the beam (1)"},
         "split": {"type": "boolean",
                   "description": "cut each text into sentences (true); false: one segment"},
         "format": {**STRING, "enum": ["text", "html"], "description": "text (default) or html"},
         "attention": {"type": "boolean", "description": "return attention maps (false)"},
         "alignment": {"type": "boolean", "description": "return word alignments (false)"},
         "log_probs": {"type": "boolean",
                       "description": "return each hypothesis's per-token log-probabilities"},
         **language_fields(codes),
         "api_key": API_KEY},
        ("text",), additionalProperties=False,
    )  # fmt: skip


Codes = tuple[list[str], list[str]]  # (every source language, every target reached)


def language_fields(codes: Codes) -> dict[str, Schema]:
    """`source` and `target`: the models' own codes (any string where none are recorded)."""
    known = all(codes)
    return {
        "source": {**STRING, **({"enum": [*codes[0], "auto"]} if known else {}),
                   "description": 'source language code, or "auto"'},
        "target": {**STRING, **({"enum": list(codes[1])} if known else {}),
                   "description": "target language code"},
    }  # fmt: skip


def libre_translate_request(c: ServeConfig, codes: Codes) -> Schema:
    return obj(
        {"q": {"anyOf": [{**STRING, "minLength": 1},
                         array(STRING, minItems=1, maxItems=c.max_sentences)],
               "description": "text(s) to translate"},
         **language_fields(codes),
         "format": {**STRING, "enum": ["text", "html"], "default": "text"},
         "alternatives": {"type": "integer", "minimum": 0, "maximum": c.max_beam - 1,
                          "default": 0, "description": "alternative translations to return"},
         "api_key": API_KEY},
        ("q", "source", "target"),
    )  # fmt: skip


DETECTIONS = array(obj(
    {"confidence": {**NUMBER, "minimum": 0, "maximum": 100}, "language": STRING},
    ("confidence", "language"),
))  # fmt: skip
LANGUAGES = array(obj({"code": STRING, "name": STRING, "targets": array(STRING)},
                      ("code", "name", "targets")))  # fmt: skip
DETECTED = obj({"confidence": NUMBER, "language": STRING}, ("confidence", "language"))
LIBRE_TRANSLATION = obj(
    {"translatedText": {"anyOf": [STRING, array(STRING)]},
     "detectedLanguage": {"anyOf": [DETECTED, array(DETECTED)],
                          "description": 'with source "auto"'},
     "alternatives": {"anyOf": [array(STRING), array(array(STRING))],
                      "description": "with alternatives > 0"},
     "models": {"anyOf": [array(STRING), array(array(STRING))],
                "description": "a server of several models: those that translated, in order "
                               "(each text's, for a list)"}},
    ("translatedText",),
)  # fmt: skip
DETECT_REQUEST = obj({"q": {**STRING, "minLength": 1}, "api_key": API_KEY}, ("q",))


def file_request(codes: Codes) -> dict:
    file = {**STRING, "format": "binary", "description": "a .txt or .html file (by its name, "
            "else its type)"}  # fmt: skip
    body = obj({"file": file, **language_fields(codes), "api_key": API_KEY},
               ("file", "source", "target"))  # fmt: skip
    kinds = {"schema": body, "encoding": {"file": {"contentType": "text/plain, text/html"}}}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": kinds}}}


PAIR = obj({"code": STRING, "name": STRING}, ("code", "name"))
FRONTEND_SETTINGS = obj(
    {"charLimit": {"type": "integer"}, "frontendTimeout": {"type": "integer"},
     "apiKeys": {"type": "boolean"}, "keyRequired": {"type": "boolean"},
     "suggestions": {"type": "boolean"}, "filesTranslation": {"type": "boolean"},
     "supportedFilesFormat": array(STRING),
     "language": obj({"source": PAIR, "target": PAIR}, ("source", "target"))},
    ("charLimit", "apiKeys", "keyRequired", "suggestions", "supportedFilesFormat", "language"),
)  # fmt: skip
INFO = obj(
    {name: {"type": "object"} for name in
     ("model", "languages", "decode", "limits", "batching", "stats")}
    | {"models": array({"type": "object"}, description="each model: name, model, languages, "
                                                       "decode, ready, stats")}
    | {"ready": {"type": "boolean"}},
    ("model", "languages", "decode", "limits", "batching", "ready", "stats"),
)  # fmt: skip
