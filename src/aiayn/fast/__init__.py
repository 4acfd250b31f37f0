"""The fast path: speed-ups beside the core, each a piece swapped in for one core piece over
the same parameters and tested equal to it (tests/fast/). The core (`model/`, `loss.py`,
`decode/`) is the paper in stock PyTorch. Two entries, one per use, are the only way in:

    loss = fast.for_training(RealTokenLoss(model, eps))     # the trainer: loss and model
    model, search = fast.for_inference(model, int8=False)   # Translator, the service

| core piece (what it computes) | fast piece | why |
| --- | --- | --- |
| `nn.Linear` (the pre-softmax projection too) | `linear.OneDnnLinear` | oneDNN's float32 products where MKL's are slower (at inference: measured per shape) |
| `PositionwiseFeedForward` (eq. 2) | `feedforward.FusedFeedForward` | no fresh ReLU buffers |
| `nn.Dropout` (sec. 5.4) | `dropout.CompactDropout` | a 16-bit random mask on CPUs |
| `Residual` (sec. 3.1) | `dropout.FastResidual` | x + dropout(y) in one pass |
| `MultiHeadAttention` (sec. 3.2.2), decoding | `attention.GroupedAttention` | a sentence's hypotheses read its keys once |
| `model.cache.KVCache` (sec. 3.2.3) | `kv_cache.SharedKVCache` | a beam reorder moves no keys |
| `decode.search.search` | `search.FastSearch` | a faster top-k, cache memory kept between searches |
| `Transformer.decode` + `project` in search | `static_step.DecoderStep`, run by `static_search.StepSearch` | one step as one function of tensors, compiled ahead of time (`compiled_step.py`): no interpreter in a step |
| one step of `run_search` with `BeamStrategy`: decode, project, step, reorder | `search_step.SearchStep` (`static_beam.BeamStep` inside), run by `StepSearch` | a whole beam search step as one compiled call; the log-softmax read only where the beam looks; keys read through their ancestors' rows, never reordered |
| `RealTokenLoss` (sec. 5.4) | `loss.ChunkedRealTokenLoss` | no (tokens, vocab) logits; the GPU attention kernel |
| glibc's malloc thresholds, in a decoding process | `memory.keep_freed_memory` | a step's buffers reused, not faulted in again at every step |

With `int8`, `int8.quantize_int8` gives every linear map int8 weights (CPU decoding);
with `long_lived` (a server), `linear.warm_up` builds every oneDNN kernel up front.
`compile` says when the search runs the compiled decoder step (float32 CPU models): see
`for_inference`; without it, `FastSearch` over the fast pieces.
`--reference` (`train.fast: false`) runs the core alone. Restricted self-attention
(`model/window.py`) has no fast piece: it stays the core's, and decoding keeps to its
window through the shared cache's entries.

The feed-forward swap is for eq. 2's ReLU and the chunked loss for logits without a bias:
a model with another `model.activation` or with `model.output_bias` keeps those core pieces.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import nn

from aiayn.config import COMPILE
from aiayn.decode.search import Search
from aiayn.device import check_int8
from aiayn.fast.attention import GroupedAttention
from aiayn.fast.compiled_step import load_compiled
from aiayn.fast.dropout import CompactDropout, FastResidual
from aiayn.fast.feedforward import FusedFeedForward
from aiayn.fast.int8 import quantize_int8
from aiayn.fast.linear import OneDnnLinear, shared_choice, warm_up
from aiayn.fast.loss import ChunkedRealTokenLoss
from aiayn.fast.memory import keep_freed_memory
from aiayn.fast.search import FastSearch
from aiayn.fast.static_search import StepSearch
from aiayn.loss import RealTokenLoss
from aiayn.model.attention import MultiHeadAttention
from aiayn.model.layers import PositionwiseFeedForward, Residual
from aiayn.model.transformer import Transformer

class Inference(NamedTuple):
    """What `for_inference` gives: the model with its fast pieces, and its search, called
    as `search(src, config)` like `decode.search.search(model, src, config)`."""

    model: Transformer
    search: Search


def for_training(
    loss: RealTokenLoss, *, compiled: bool = False, attention_kernel: str = "auto"
) -> nn.Module:
    """The training objective (and its model, in place) with every fast piece swapped in.
    `compiled`: the network and the loss's element-wise work run through `torch.compile`
    (`train.compile`); `attention_kernel`: the fused attention kernel a CUDA GPU tries
    first (`train.attention_kernel`, `attention.kernel_preference`)."""
    apply(loss.model)
    if loss.model.output_bias is not None:  # the chunked loss's logits have no bias
        return loss
    return ChunkedRealTokenLoss.from_core(loss, compiled, attention_kernel)


def for_inference(
    model: Transformer, *, int8: bool = False, long_lived: bool = False, compile: str = "auto"
) -> Inference:
    """`model` (eval mode, changed in place) with every fast piece swapped in, and the fast
    search over it. `int8`: int8 weights for CPU decoding (CPU, float32 only). `long_lived`:
    for a process that serves for long (`aiayn serve`): every kernel shape the CPU's matrix
    library will be asked for is built now, so that memory stays flat over a run.

    `compile`: "auto" searches with the compiled decoder step where one is in the cache,
    and a long-lived process builds it now if not (a server does while it warms up, before
    it says ready); "always" builds it now if missing (tens of seconds, once: later runs load
    it); "never" keeps the eager search. A one-off run does not build by default, so that a
    one-line translation is never slower than without it. Int8 models compile too (their
    products oneDNN's int8 ones); where `compiled_step.can_compile` says no, `FastSearch`.

    The process keeps the memory its decoding frees for reuse (`memory.keep_freed_memory`:
    glibc's malloc thresholds, process-wide), so that a step's buffers are not faulted in
    afresh at every step."""
    if compile not in COMPILE:
        raise ValueError(f"compile must be one of {', '.join(COMPILE)}, got {compile!r}")
    keep_freed_memory()
    if int8:
        weight = model.output_weight
        check_int8(weight.device, weight.dtype)
    apply(model.eval())
    choice = shared_choice()  # the process's: every model computes a shape's products alike
    for module in model.modules():
        if isinstance(module, OneDnnLinear):
            module.choice = choice
    if int8:
        quantize_int8(model)
    if long_lived:
        warm_up(model)
    compiled = None
    if compile != "never":
        compiled = load_compiled(model, build=compile == "always" or long_lived)
    search = FastSearch(model, int8) if compiled is None else StepSearch(model, compiled)
    return Inference(model, search)


def apply(module: nn.Module) -> nn.Module:
    """Swap every core piece in `module` (itself included) for its fast one, over the same
    parameters; -> the module (a new one only where `module` itself is a core piece). The
    two entries above are made of it. Applying twice changes nothing more."""
    _swap_children(module)
    fast = _fast_piece(module)
    return module if fast is None else fast


def _swap_children(module: nn.Module) -> None:
    for name, child in list(module.named_children()):
        fast = _fast_piece(child)
        if fast is not None:
            setattr(module, name, fast)
            child = fast
        _swap_children(child)


def _fast_piece(module: nn.Module) -> nn.Module | None:
    """The fast counterpart of a core piece (exact types: a subclass is someone's own
    module, kept as it is), or None."""
    kind = type(module)
    if kind is nn.Linear:
        return OneDnnLinear.from_core(module)
    if kind is PositionwiseFeedForward and type(module.activation) is nn.ReLU:  # its fused ReLU
        return FusedFeedForward.from_core(module)
    if kind is nn.Dropout:
        return CompactDropout.from_core(module)
    if kind is Residual:
        return FastResidual.from_core(module)
    if kind is MultiHeadAttention:
        return GroupedAttention.from_core(module)
    return None
