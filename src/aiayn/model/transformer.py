"""The encoder-decoder Transformer (sec. 3, Figure 1): `encode`, `decode`, `forward`.

    logits = Transformer(config)(src, tgt_in)          # teacher-forced logits
    memory = model.encode(src)                          # (batch, src_len, d_model)
    hidden = model.decode(tgt_in, memory, src_pad_mask) # (batch, tgt_len, d_model)
    logits = model.project(hidden)                      # (batch, tgt_len, vocab)

Training projects the decoder states of the real target positions only and takes the
label-smoothed loss of those logits (`loss.py`).

For incremental decoding, `cache = model.new_cache(src_pad_mask)` and pass `cache=` to
`decode` with only the newest target token(s); the search reorders the cache.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from aiayn.config import ModelConfig
from aiayn.model.attention import MultiHeadAttention
from aiayn.model.cache import KVCache, LayerCache
from aiayn.model.layers import DecoderLayer, Embedding, EncoderLayer, PositionalEncoding


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        # Sec. 3.4: one weight matrix shared by the two embedding layers and the pre-softmax
        # projection, for the paper's joint source/target vocabulary.
        self.tgt_embed = Embedding(c.vocab_size, c.d_model)
        self.src_embed = self.tgt_embed if c.shared_vocab else Embedding(c.src_vocab_size, c.d_model)
        # The pre-softmax layer; its bias (Marian's final_logits_bias) only with model.output_bias.
        self.out_proj = nn.Linear(c.d_model, c.vocab_size, bias=c.output_bias)
        if c.tie_embeddings:
            self.out_proj.weight = self.tgt_embed.weight
        # Sec. 3.5. Learned positions (Table 3 row E) get a table per stack, as in ConvS2S
        # [9], the paper's source for them, and tensor2tensor; the sinusoids are one function.
        learned = c.positional == "learned"
        self.positional = PositionalEncoding(c.d_model, c.max_len, learned)  # the encoder's
        self.tgt_positional = (
            PositionalEncoding(c.d_model, c.max_len, learned) if learned else self.positional
        )
        self.embed_dropout = nn.Dropout(c.p_drop)  # on embeddings + positions (sec. 5.4)
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_layers))
        # Pre-LN leaves the stack's output un-normalised, so it needs a final LayerNorm;
        # the paper's post-LN stack already ends in one and has no extra norm.
        pre = c.norm == "pre"
        self.encoder_norm = nn.LayerNorm(c.d_model, eps=c.ln_eps) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model, eps=c.ln_eps) if pre else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialisation (the paper does not state one; these are tensor2tensor's choices).

        Linear weights: Xavier-uniform, which keeps activation variance about constant
        through each projection (each of attention's W^Q, W^K, W^V on its own, also where
        they are fused: `MultiHeadAttention.reset_parameters`); biases zero. Embeddings:
        normal(0, d_model^-0.5), so that after the sqrt(d_model) scaling (sec. 3.4) token vectors have unit-variance entries,
        on the same scale as the sinusoids they are added to, and the tied pre-softmax
        projection starts with logits of about unit variance. LayerNorm: gain 1, bias 0.
        """
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                module.reset_parameters()
        for module in self.modules():  # after the loop above, which also visits their Linears
            if isinstance(module, MultiHeadAttention):
                module.reset_parameters()
        std = self.config.d_model**-0.5
        embeds = [self.tgt_embed] + ([] if self.src_embed is self.tgt_embed else [self.src_embed])
        for embed in embeds:
            nn.init.normal_(embed.weight, mean=0.0, std=std)
        if not self.config.tie_embeddings:
            nn.init.normal_(self.out_proj.weight, mean=0.0, std=std)
        if self.positional.learned:
            # Row E: learned positions start like the embeddings (fairseq's choice too).
            for table in (self.positional, self.tgt_positional):
                nn.init.normal_(table.weight, mean=0.0, std=std)

    def pad_mask(self, tokens: Tensor) -> Tensor:
        """(batch, len) bool, True = padding: the one mask convention of aiayn."""
        return tokens.eq(self.config.pad_id)

    def encode(self, src: Tensor, src_pad_mask: Tensor | None = None) -> Tensor:
        """src: (batch, src_len) token ids -> memory (batch, src_len, d_model)."""
        if src_pad_mask is None:
            src_pad_mask = self.pad_mask(src)
        x = self.embed_dropout(self.positional(self.src_embed(src)))  # (batch, src_len, d_model)
        for layer in self.encoder:
            x = layer(x, src_pad_mask)
        return self.encoder_norm(x)

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor | None,
        src_pad_mask: Tensor,
        cache: KVCache | None = None,
    ) -> Tensor:
        """tgt_in: (batch, tgt_len) ids (bos first) -> hidden (batch, tgt_len, d_model).

        With a cache, `tgt_in` holds only the new positions; earlier ones come from the
        cache, and `memory` may be None once the cache holds the encoder-decoder keys.
        """
        offset = 0 if cache is None else cache.length
        x = self.embed_dropout(self.tgt_positional(self.tgt_embed(tgt_in), offset))
        for i, layer in enumerate(self.decoder):
            x = layer(x, memory, src_pad_mask, None if cache is None else cache.layers[i])
        if cache is not None:
            cache.length += tgt_in.size(1)
        return self.decoder_norm(x)  # (batch, tgt_len, d_model)

    @property
    def output_bias(self) -> Tensor | None:
        """(vocab,) the logits' bias (`model.output_bias`, Marian's), or None: the paper's none."""
        return self.out_proj.bias

    @property
    def output_weight(self) -> Tensor:
        """(vocab, d_model): the pre-softmax projection, the target embedding when tied."""
        return self.out_proj.weight

    def project(self, hidden: Tensor) -> Tensor:
        """The pre-softmax linear transformation (sec. 3.4): (..., d_model) -> (..., vocab)."""
        return self.out_proj(hidden)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits: (batch, src_len), (batch, tgt_len) -> (batch, tgt_len, vocab)."""
        src_pad_mask = self.pad_mask(src)
        memory = self.encode(src, src_pad_mask)
        return self.project(self.decode(tgt_in, memory, src_pad_mask))

    def new_cache(self, src_pad_mask: Tensor) -> KVCache:
        """An empty incremental-decoding state for a batch with this source padding."""
        layers = [LayerCache(self.config.attention_window) for _ in self.decoder]
        return KVCache(layers, src_pad_mask)


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (a tied matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@torch.no_grad()
def parameter_count(config: ModelConfig) -> int:
    """Parameter count of the model `config` describes, without allocating its weights."""
    with torch.device("meta"):
        return count_parameters(Transformer(config))
