"""Typed configuration: dataclasses, the paper's presets, YAML in and out, `key=value` overrides.

One place per default. A `Config` has four sections: `model` (sec. 3), `data`, `train`
(sec. 5) and `decode` (sec. 6.1). Presets are named `Config`s: `base` and `big` (Table 3's
last rows) and one per varied row of Table 3 (A-E), each a `base` with the row's changes.

Overrides are `section.key=value` (e.g. `model.d_model=256`) or, when the key name is unique
across sections, plain `key=value`. Values are parsed as YAML scalars and type-checked.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from aiayn.errors import ConfigError


@dataclass
class ModelConfig:
    """The architecture (sec. 3), in the paper's notation.

    `d_k` / `d_v` default to d_model / n_heads (sec. 3.2.2) but may be set independently,
    as Table 3 rows A and B do. `src_vocab_size` None means one vocabulary shared by source
    and target (sec. 3.4, the paper's joint BPE); set it for separate vocabularies.
    """

    vocab_size: int = 37000  # target (or shared) vocabulary: the paper's ~37k joint BPE (sec. 5.1)
    src_vocab_size: int | None = None  # None: shared with the target
    d_model: int = 512
    n_heads: int = 8  # h
    d_k: int | None = None  # None: d_model / n_heads (see `key_dim`)
    d_v: int | None = None  # None: d_model / n_heads (see `value_dim`)
    d_ff: int = 2048
    n_layers: int = 6  # N, for the encoder and for the decoder
    p_drop: float = 0.1  # residual and embedding dropout (sec. 5.4)
    # The paper applies dropout only to sub-layer outputs and embedding sums (sec. 5.4);
    # attention-weight and ReLU dropout are later tensor2tensor additions, off by default.
    p_drop_attn: float = 0.0
    p_drop_ffn: float = 0.0
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # sec. 3.5; Table 3 row E
    # Positions a learned embedding holds. Sinusoids extend to any length, but attention
    # memory does not: `Translator` truncates longer sources to max_len, with a warning.
    max_len: int = 1024
    # The paper is post-LN: LayerNorm(x + Sublayer(x)) (sec. 3.1). Pre-LN is a later variant.
    norm: Literal["post", "pre"] = "post"
    ln_eps: float = 1e-6  # not in the paper; tensor2tensor's value
    tie_embeddings: bool = True  # sec. 3.4: target embedding = pre-softmax projection
    # Sec. 3.2.2's projections W^Q, W^K, W^V, W^O are matrices without biases (so are
    # tensor2tensor's); fairseq, Marian and nn.Transformer add biases. True adds them.
    attention_bias: bool = False
    # Restricted self-attention (sec. 4, Table 1): each position attends to the positions
    # within this distance (the decoder: this many before it); 0, the paper's models: all.
    attention_window: int = 0
    # Eq. 2's ReLU, or a later activation: swish (x sigmoid(x), OPUS-MT's) or gelu (exact).
    activation: Literal["relu", "swish", "gelu"] = "relu"
    # The paper's pre-softmax projection is the embedding matrix alone (sec. 3.4); true adds
    # a bias to the logits (MarianMT's `final_logits_bias`).
    output_bias: bool = False
    pad_id: int = 0
    # The decoder's first input, the output "shifted right" (sec. 3.1), and the last output
    # token: aiayn's <s> and </s>. MarianMT starts from its pad and ends with id 0.
    bos_id: int = 2
    eos_id: int = 3
    # The vocabulary: aiayn's sentencepiece model(s), whose ids are the token ids, or
    # MarianMT's (OPUS-MT): a source and a target sentencepiece model whose pieces one table
    # numbers, one id space for both sides (`data/marian_vocab.py`).
    vocab_format: Literal["sentencepiece", "marian"] = "sentencepiece"

    def __post_init__(self) -> None:
        _check_ranges(self, "model", ("vocab_size", "d_model", "n_heads", "d_ff", "n_layers",
                                      "max_len", "ln_eps"), ("attention_window",))  # fmt: skip
        for name in ("src_vocab_size", "d_k", "d_v"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ConfigError(f"model.{name} must be positive, got {getattr(self, name)}")
        if (self.d_k is None or self.d_v is None) and self.d_model % self.n_heads:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                "set d_k and d_v explicitly or change n_heads"
            )
        for name in ("p_drop", "p_drop_attn", "p_drop_ffn"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ConfigError(f"model.{name}={getattr(self, name)} is outside the vocabulary")

    # d_k and d_v stay None in the config when derived, so that an override of d_model or
    # n_heads re-derives them; the model reads these two properties.
    @property
    def key_dim(self) -> int:
        """d_k as used: the configured value, else d_model / h."""
        return self.d_k or self.d_model // self.n_heads

    @property
    def value_dim(self) -> int:
        """d_v as used: the configured value, else d_model / h."""
        return self.d_v or self.d_model // self.n_heads

    @property
    def shared_vocab(self) -> bool:
        return self.src_vocab_size is None


@dataclass
class DataConfig:
    """Where the binarized data lives (made by `aiayn prepare`) and how it is batched."""

    dir: str = ""  # a prepared directory: shards, manifest, vocabulary
    max_tokens: int = 4096  # per side per batch, padding included (sec. 5.1 batches by length)
    seed: int = 1  # shuffles batch order; recorded in every checkpoint

    def __post_init__(self) -> None:
        _check_ranges(self, "data", ("max_tokens",), ("seed",))


@dataclass
class TrainConfig:
    """The training recipe of sec. 5."""

    eps_ls: float = 0.1  # label smoothing (sec. 5.4)
    warmup: int = 4000  # warmup_steps of eq. 3
    lr_scale: float = 1.0  # multiplies eq. 3; the paper uses 1
    betas: tuple[float, float] = (0.9, 0.98)  # sec. 5.3
    adam_eps: float = 1e-9  # sec. 5.3
    update_tokens: int = 25000  # target tokens per update, reached by accumulation (sec. 5.1)
    max_steps: int = 100000  # 100k for base, 300k for big (sec. 5.2)
    seed: int = 1
    max_epochs: int = 0  # passes over the training data; 0 = no limit
    max_time_minutes: float = 0.0  # wall-clock limit of one `train` call; 0 = no limit
    accum_steps: int = 0  # micro-batches per update per process; 0 = as many as reach update_tokens
    # the paper: fp32; fp16 needs a GPU; auto: bf16 where the device multiplies it natively
    # (a CPU with AVX-512 BF16 or AMX, a GPU with bfloat16 units), else fp32
    precision: Literal["fp32", "bf16", "fp16", "auto"] = "fp32"
    # The fast path (`aiayn.fast`): speed-ups swapped in for core pieces, each tested equal
    # to it. false (`--reference`): the core alone, the code as the paper writes it.
    fast: bool = True
    # Fast path: torch.compile the network and the loss's element-wise work (fused kernels),
    # for GPUs; on a CPU the hand-fused pieces do better (`benchmarks/train_speed.py --compile`).
    compile: bool = False
    # Fast path: the attention kernel the training forward and dev loss try first on a CUDA
    # GPU (the others as fallbacks); auto: PyTorch's choice
    # (`aiayn.fast.attention.kernel_preference`; `benchmarks/attention_backends.py` compares).
    attention_kernel: Literal["auto", "efficient", "flash", "cudnn", "math"] = "efficient"
    clip_norm: float = 0.0  # max gradient L2 norm; 0 = no clipping, as in the paper
    device: str = "auto"  # auto: cuda (cuda:LOCAL_RANK under torchrun) if available, else cpu
    out_dir: str = "runs/train"  # checkpoints/, train_log.jsonl, tensorboard/
    save_every_minutes: float = 10.0  # "checkpoints written at 10-minute intervals" (sec. 6.1)
    save_every_steps: int = 0  # also save every N updates; 0 = only on the clock
    keep_last: int = 5  # step checkpoints kept: the paper averages the last 5 (base), 20 (big)
    valid_every_steps: int = 1000  # dev loss and perplexity every N updates and at the end
    valid_bleu_lines: int = 0  # greedy dev BLEU on the first N dev pairs at each validation
    patience: int = 0  # stop after N validations without a better dev NLL; 0 = off (paper)
    max_bad_steps: int = 5  # non-finite losses in a row that stop the run
    log_every_steps: int = 100  # a train_log.jsonl line every N updates

    def __post_init__(self) -> None:
        if not 0.0 <= self.eps_ls < 1.0:
            raise ConfigError(f"train.eps_ls must be in [0, 1), got {self.eps_ls}")
        if self.warmup <= 0:
            raise ConfigError(f"train.warmup must be positive, got {self.warmup}")
        positive = ("update_tokens", "max_steps", "keep_last", "max_bad_steps", "log_every_steps",
                    "adam_eps")  # fmt: skip
        non_negative = (  # lr_scale=0 holds the weights still: a way to measure, not to train
            "lr_scale", "max_epochs", "max_time_minutes", "accum_steps", "clip_norm",
            "save_every_minutes", "save_every_steps", "valid_every_steps", "valid_bleu_lines",
            "patience", "seed",
        )  # fmt: skip
        _check_ranges(self, "train", positive, non_negative)
        if not all(0.0 <= beta < 1.0 for beta in self.betas):
            raise ConfigError(f"train.betas must be in [0, 1), got {list(self.betas)}")
        if self.compile and not self.fast:
            raise ConfigError("train.compile is part of the fast path: it needs train.fast=true "
                              "(drop --reference or train.compile)")  # fmt: skip


# When a search runs the compiled decoder step (`fast.for_inference`, `--compile`).
COMPILE = ("auto", "always", "never")


@dataclass
class DecodeConfig:
    """Beam search as in sec. 6.1: beam 4, length penalty alpha 0.6, max length input + 50."""

    beam: int = 4
    alpha: float = 0.6
    max_len_offset: int = 50
    min_len: int = 1  # tokens before eos at least: no empty translation (docs/code-map.md says why)
    nbest: int = 1
    # How a hypothesis's log-probability is divided by its length |Y| (eos included): gnmt,
    # ((5 + |Y|) / 6) ** alpha (GNMT's, which the paper's alpha refers to); power, |Y| ** alpha
    # (HuggingFace transformers', CTranslate2's and Marian's).
    length_penalty: Literal["gnmt", "power"] = "gnmt"
    # Which hypotheses finish and when a sentence stops (`BeamStrategy`): t2t, the rules of
    # tensor2tensor, the paper's code; transformers, HuggingFace's (for imported models).
    beam_rules: Literal["t2t", "transformers"] = "t2t"

    def __post_init__(self) -> None:
        if self.beam < 1 or self.nbest < 1 or self.nbest > self.beam:
            raise ConfigError(f"need 1 <= nbest <= beam, got beam={self.beam} nbest={self.nbest}")
        _check_ranges(self, "decode", (), ("alpha", "max_len_offset", "min_len"))


def model_differences(
    first: ModelConfig,
    second: ModelConfig,
    form: str = "model.{key}: {a} vs {b}",
    ignore: tuple[str, ...] = (),
) -> list[str]:
    """`form` filled in (`key`, and the values `a` of `first` and `b` of `second`) for each
    architecture key but those in `ignore` in which two configs differ, in the dataclass's
    order: the one comparison behind every refusal to mix architectures (averaging,
    resuming, fine-tuning), each caller wording it its own way."""
    a, b = dataclasses.asdict(first), dataclasses.asdict(second)
    return [form.format(key=key, a=a[key], b=b[key])
            for key in a if key not in ignore and a[key] != b[key]]  # fmt: skip


def _check_ranges(
    section: Any, name: str, positive: tuple[str, ...], non_negative: tuple[str, ...]
) -> None:
    """Each field finite and > 0 (`positive`) or >= 0 (`non_negative`); the comparisons are
    written so that NaN fails them too (a NaN learning rate would train on NaN weights)."""
    for key in positive + non_negative:
        value = getattr(section, key)
        low_ok = value > 0 if key in positive else value >= 0
        if not (low_ok and value < math.inf):
            which = "positive" if key in positive else ">= 0"
            raise ConfigError(f"{name}.{key} must be {which}, got {value}")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)


# --- presets: Table 3 -------------------------------------------------------------------

_SECTIONS = ("model", "data", "train", "decode")

# Each preset is `base` plus the overrides of its row of Table 3. Row A keeps h * d_k = 512
# ("keeping the amount of computation constant"); row B changes only d_k; row C's d_model
# rows change d_k = d_v with it; row D varies dropout and label smoothing.
PRESETS: dict[str, dict[str, Any]] = {
    "base": {},
    "big": {
        "model.d_model": 1024, "model.d_ff": 4096, "model.n_heads": 16, "model.p_drop": 0.3,
        "train.max_steps": 300000, "train.keep_last": 20,
    },
    "A-h1": {"model.n_heads": 1, "model.d_k": 512, "model.d_v": 512},
    "A-h4": {"model.n_heads": 4, "model.d_k": 128, "model.d_v": 128},
    "A-h16": {"model.n_heads": 16, "model.d_k": 32, "model.d_v": 32},
    "A-h32": {"model.n_heads": 32, "model.d_k": 16, "model.d_v": 16},
    "B-dk16": {"model.d_k": 16},
    "B-dk32": {"model.d_k": 32},
    "C-N2": {"model.n_layers": 2},
    "C-N4": {"model.n_layers": 4},
    "C-N8": {"model.n_layers": 8},
    "C-d256": {"model.d_model": 256, "model.d_k": 32, "model.d_v": 32},
    "C-d1024": {"model.d_model": 1024, "model.d_k": 128, "model.d_v": 128},
    "C-ff1024": {"model.d_ff": 1024},
    "C-ff4096": {"model.d_ff": 4096},
    "D-drop0.0": {"model.p_drop": 0.0},
    "D-drop0.2": {"model.p_drop": 0.2},
    "D-ls0.0": {"train.eps_ls": 0.0},
    "D-ls0.2": {"train.eps_ls": 0.2},
    "E-learned-pe": {"model.positional": "learned"},
}


def preset(name: str) -> Config:
    """The named preset as a fresh `Config`."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; presets are: {', '.join(PRESETS)}")
    return _with_values(Config(), PRESETS[name])


# --- YAML and overrides --------------------------------------------------------------------


def to_dict(config: Config) -> dict[str, Any]:
    """Plain nested dict (tuples as lists), ready for YAML or JSON."""
    return _plain(dataclasses.asdict(config))


def from_dict(data: dict[str, Any], where: str = "config") -> Config:
    """Build a `Config` from a nested dict, refusing unknown sections and keys.

    An optional top-level `preset: NAME` starts from that preset instead of the defaults,
    so a recipe file states only what it changes (e.g. `preset: big` plus its data).
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of sections, got {type(data).__name__}")
    data = dict(data)
    start = preset(data.pop("preset")) if "preset" in data else Config()
    unknown = set(data) - set(_SECTIONS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown section(s) {sorted(unknown)}; valid sections: "
            f"{', '.join(_SECTIONS)} (and `preset`)"
        )
    flat = {}
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: section {section!r} must be a mapping")
        flat.update({f"{section}.{key}": value for key, value in values.items()})
    return _with_values(start, flat, where)


def save_yaml(config: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(config), sort_keys=False), encoding="utf-8")


def load_yaml(path: str | Path) -> Config:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as err:  # a directory, no permission, an I/O error
        raise ConfigError(f"{path}: cannot read ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    return from_dict(data or {}, where=str(path))


def load_config(name_or_path: str, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """A preset name or a YAML file, then `key=value` overrides applied in order."""
    if name_or_path in PRESETS:
        config = preset(name_or_path)
    elif Path(name_or_path).suffix in (".yaml", ".yml") or Path(name_or_path).exists():
        config = load_yaml(name_or_path)
    else:
        raise ConfigError(
            f"{name_or_path!r} is neither a preset nor a config file; presets: {', '.join(PRESETS)}"
        )
    return apply_overrides(config, overrides)


def apply_overrides(config: Config, overrides: list[str] | tuple[str, ...]) -> Config:
    """Apply `key=value` strings; values are YAML scalars (`0.1`, `true`, `[0.9, 0.98]`),
    except for text keys (paths), whose value is the text as written (`data.dir=2024`)."""
    values = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        dotted = _qualify(key.strip())
        values[dotted] = _override_value(dotted, raw, item)
    return _with_values(config, values, "overrides")


def _override_value(dotted: str, raw: str, item: str) -> Any:
    if not raw.strip():
        return None
    section, _, key = dotted.partition(".")
    hint = typing.get_type_hints(_section_type(section))[key]
    if hint in (str, str | None) and raw.strip()[0] not in "'\"":
        return raw  # YAML would turn the path `2024` into an int
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or "not a YAML value"
        raise ConfigError(f"override {item!r}: {problem}") from None


def valid_keys() -> list[str]:
    return [f"{s}.{f.name}" for s in _SECTIONS for f in dataclasses.fields(_section_type(s))]


def _qualify(key: str) -> str:
    """`d_model` -> `model.d_model` when unambiguous; dotted keys are checked as they are."""
    keys = valid_keys()
    if key in keys:
        return key
    matches = [k for k in keys if k.split(".", 1)[1] == key]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise ConfigError(f"key {key!r} is ambiguous: write one of {', '.join(matches)}")
    raise ConfigError(f"unknown config key {key!r}; valid keys: {', '.join(keys)}")


def _with_values(config: Config, values: dict[str, Any], where: str = "preset") -> Config:
    """A new Config with dotted `section.key` values set, each type-checked, then validated."""
    sections = {s: dataclasses.asdict(getattr(config, s)) for s in _SECTIONS}
    for dotted, value in values.items():
        try:
            section, _, key = _qualify(dotted).partition(".")
        except ConfigError as err:  # name the file (or override) the key came from
            raise ConfigError(f"{where}: {err}") from None
        hint = typing.get_type_hints(_section_type(section))[key]
        sections[section][key] = _coerce(value, hint, f"{where}: {section}.{key}")
    try:
        built = {s: _section_type(s)(**sections[s]) for s in _SECTIONS}
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    return Config(**built)


def _section_type(section: str) -> type:
    types_ = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig}
    return types_[section]


_DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Check `value` against a type hint; ints are accepted for floats, lists for tuples."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _coerce(value, next(a for a in args if a is not type(None)), where)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where} must be one of {list(args)}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{where} must be a list of {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a, where) for v, a in zip(value, args))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        return float(value)  # YAML 1.1 reads `1e-9` (no dot) as text, not a number
    if hint is int and isinstance(value, bool) or not isinstance(value, hint):
        quote = f" (quote it: '{value}')" if hint is str and isinstance(value, (int, float)) else ""
        raise ConfigError(f"{where} must be {hint.__name__}, got {value!r}{quote}")
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
