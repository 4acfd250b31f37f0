"""Attention weights of a trained model, every layer and head (sec. 3.2, Figures 3-5).

    maps = attention_maps(model, src_vocab, tgt_vocab, src_ids, tgt_ids)
    maps.cross[layer, head]          # (tgt_len, src_len): decoder position -> source piece
    maps = explain(translator, "The cat sits.")            # on the model's own translation
    json.dumps(to_bertviz(maps))     # bertviz's layout: Encoder, Decoder, Cross
    readable_layers(maps)            # {"encoder": 1, "decoder": 0, "cross": 1}: pages open there

The weights come from one teacher-forced `model(src, tgt_in)` call, no cache: a forward
pre-hook on each `MultiHeadAttention` records the inputs it is given, and the weights are
computed again from them with the module's own projections and the core's explicit softmax
(`model.attention.attention_weights`). The model's code is not touched, and normal decoding,
which never registers these hooks, runs at its usual speed.

Target rows are the decoder's input positions, `<s> y_1 ... y_n`: row i is the position
that predicts y_{i+1} (the last one predicts eos). The model's own translation is taken as
the search found it, token by token (`Translator.hypotheses`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.data.vocab import Vocab
from aiayn.model.attention import MultiHeadAttention, attend_mask, attention_weights
from aiayn.model.transformer import Transformer
from aiayn.translate import Translator

KINDS = ("encoder", "decoder", "cross")  # encoder self, decoder self, encoder-decoder


@dataclass
class AttentionMaps:
    """One sentence pair's attention weights, each (layers, heads, q_len, k_len)."""

    source: list[str]  # source pieces, eos ("</s>") last
    target: list[str]  # decoder input pieces, "<s>" first
    encoder: Tensor  # (layers, heads, src_len, src_len)
    decoder: Tensor  # (layers, heads, tgt_len, tgt_len), causal: zero above the diagonal
    cross: Tensor  # (layers, heads, tgt_len, src_len)

    def kind(self, name: str) -> Tensor:
        return {"encoder": self.encoder, "decoder": self.decoder, "cross": self.cross}[name]

    def tokens(self, name: str) -> tuple[list[str], list[str]]:
        """(query pieces, key pieces) of one kind."""
        queries = self.source if name == "encoder" else self.target
        return queries, self.target if name == "decoder" else self.source


def _split_heads(x: Tensor, module: MultiHeadAttention, dim: int) -> Tensor:
    # (batch, len, heads * dim) -> (batch, heads, len, dim)
    return x.unflatten(-1, (module.n_heads, dim)).transpose(1, 2)


def module_weights(
    module: MultiHeadAttention,
    x: Tensor,
    memory: Tensor | None = None,
    key_pad_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    """Eq. 1's softmax weights of `module` for the inputs of its forward call (no cache):
    x (batch, q_len, d_model), memory (batch, k_len, d_model) -> (batch, heads, q_len, k_len)."""
    if module.cross:
        q = _split_heads(module.w_q(x), module, module.d_k)  # (batch, heads, q_len, d_k)
        k, _ = module.project_kv(memory)  # (batch, heads, k_len, d_k)
    else:
        h_dk = module.n_heads * module.d_k
        q, k, _ = module.w_qkv(x).split([h_dk, h_dk, module.n_heads * module.d_v], dim=-1)
        q, k = _split_heads(q, module, module.d_k), _split_heads(k, module, module.d_k)
    mask = attend_mask(key_pad_mask, causal, q.size(2), k.size(2), x.device, module.window)
    return attention_weights(q, k, mask)  # (batch, heads, q_len, k_len)


def _attention_modules(model: Transformer) -> dict[str, list[MultiHeadAttention]]:
    return {
        "encoder": [layer.self_attn for layer in model.encoder],
        "decoder": [layer.self_attn for layer in model.decoder],
        "cross": [layer.cross_attn for layer in model.decoder],
    }


@torch.no_grad()
def capture_weights(model: Transformer, src: Tensor, tgt_in: Tensor) -> dict[str, Tensor]:
    """Every layer's weights for a batch: src (batch, src_len), tgt_in (batch, tgt_len) ->
    {kind: (layers, batch, heads, q_len, k_len)}, from one teacher-forced forward call."""
    calls: dict[int, tuple[tuple, dict]] = {}

    def record(module: MultiHeadAttention, args: tuple, kwargs: dict) -> None:
        calls[id(module)] = (args, dict(kwargs))

    modules = _attention_modules(model)
    handles = [
        m.register_forward_pre_hook(record, with_kwargs=True)
        for ms in modules.values()
        for m in ms
    ]
    try:
        model(src, tgt_in)
    finally:
        for handle in handles:
            handle.remove()
    out = {}
    for kind, ms in modules.items():
        layers = []
        for m in ms:
            args, kwargs = calls[id(m)]
            names = ("x", "memory", "key_pad_mask", "causal")
            given = {**dict(zip(names, args)), **{k: v for k, v in kwargs.items() if k in names}}
            layers.append(module_weights(m, **given))
        out[kind] = torch.stack(layers)  # (layers, batch, heads, q_len, k_len)
    return out


def attention_maps(
    model: Transformer,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    src_ids: list[int],
    tgt_ids: list[int],
) -> AttentionMaps:
    """The weights of one pair: `src_ids` as the model reads them (eos last), `tgt_ids` the
    target without bos or eos (the decoder reads `<s> tgt_ids`)."""
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], device=device)  # (1, src_len)
    tgt_in = torch.tensor([[tgt_vocab.bos_id, *tgt_ids]], device=device)  # (1, tgt_len)
    weights = {k: w[:, 0].float().cpu() for k, w in capture_weights(model, src, tgt_in).items()}
    return AttentionMaps(
        source=[src_vocab.piece(i) for i in src_ids],
        target=[tgt_vocab.piece(i) for i in tgt_in[0].tolist()],
        **weights,
    )


def explain(
    translator: Translator, text: str, target: str | list[int] | None = None
) -> AttentionMaps:
    """The attention of `translator`'s model on `text` and `target`: a given translation
    (text, encoded with the target vocabulary), its token ids, or by default the model's
    own best translation. The source is truncated as the Translator truncates it."""
    if target is None:
        hyps = translator.hypotheses([text])[0]
        target = hyps[0].tokens if hyps else []
    elif isinstance(target, str):
        target = translator.tgt_vocab.encode(target)
    limit = translator.model.config.max_len - 1
    src_ids = translator.encode([text])[0] or [translator.src_vocab.eos_id]  # eos alone: blank
    return attention_maps(
        translator.model, translator.src_vocab, translator.tgt_vocab, src_ids, target[:limit]
    )


def _entropy(p: Tensor) -> Tensor:
    """Entropy in nats of distributions over the last dimension (0 log 0 = 0)."""
    return -(p * p.clamp_min(1e-30).log()).sum(-1)


def readability(weights: Tensor) -> Tensor:
    """How much each layer's weights say about which key a query reads, (layers, heads,
    q_len, k_len) -> (layers,): for each head, the mutual information in nats between the
    query position (uniform) and the key it attends to, H(mean of the rows) - mean of the
    rows' H, averaged over the heads. It is 0 for uniform rows, and 0 again where every row
    looks at the same key (a "sink" such as the final </s>); it is largest where each query
    puts its weight on a key of its own, as a word aligned to a word does (Figures 3-5)."""
    w = weights.double()
    rows = _entropy(w).mean(-1)  # (layers, heads): the rows' mean entropy
    spread = _entropy(w.mean(-2))  # (layers, heads): the entropy of the mean row
    return (spread - rows).mean(-1)  # (layers,)


def readable_layers(maps: AttentionMaps) -> dict[str, int]:
    """Each kind's most readable layer (0-based) for this sentence (`readability`): the
    layer the pages open on, rather than layer 1, whose weights are usually the most diffuse."""
    return {kind: int(readability(maps.kind(kind)).argmax()) for kind in KINDS}


def rounded(weights: Tensor, digits: int = 5) -> list:
    """Weights as nested lists of floats rounded to `digits` decimals (compact JSON: in
    float64, as float32's nearest to 0.0338 is printed 0.033799998462200165)."""
    return torch.round(weights.double(), decimals=digits).tolist()


def to_json(maps: AttentionMaps, digits: int = 5) -> dict:
    """{"source", "target", "encoder", "decoder", "cross", "readable_layer"}: the web
    pages' layout; "readable_layer" holds each kind's `readable_layers`."""
    data: dict = {"source": maps.source, "target": maps.target}
    data.update({kind: rounded(maps.kind(kind), digits) for kind in KINDS})
    data["readable_layer"] = readable_layers(maps)
    return data


def to_bertviz(maps: AttentionMaps) -> dict:
    """bertviz's `model_view` / `head_view` parameters for an encoder-decoder model:
    "attention" lists Encoder, Decoder and Cross, each with "attn" (layers, heads, q_len,
    k_len), "left_text" (query pieces) and "right_text" (key pieces)."""
    names = {"encoder": "Encoder", "decoder": "Decoder", "cross": "Cross"}
    attention = []
    for kind in KINDS:
        left, right = maps.tokens(kind)
        attention.append(
            {"name": names[kind], "attn": maps.kind(kind).tolist(), "left_text": left,
             "right_text": right}
        )  # fmt: skip
    layers, heads = maps.encoder.shape[:2]
    return {
        "attention": attention,
        "default_filter": "0",
        "include_layers": list(range(layers)),
        "include_heads": list(range(heads)),
    }
