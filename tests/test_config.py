import dataclasses

import pytest

from aiayn.config import (
    PRESETS,
    Config,
    ConfigError,
    ModelConfig,
    apply_overrides,
    load_config,
    load_yaml,
    model_differences,
    preset,
    save_yaml,
)


def test_yaml_round_trip_preserves_every_field(tmp_path):
    config = load_config("big", ["decode.beam=5", "train.betas=[0.9, 0.99]"])
    save_yaml(config, tmp_path / "c.yaml")
    assert load_yaml(tmp_path / "c.yaml") == config


def test_overrides_dotted_and_bare_keys_are_typed():
    config = apply_overrides(Config(), ["model.d_model=256", "n_heads=4", "p_drop=0", "alpha=1"])
    assert config.model.d_model == 256 and config.model.n_heads == 4
    assert config.model.p_drop == 0.0 and isinstance(config.model.p_drop, float)
    assert config.decode.alpha == 1.0


def test_derived_head_dims_follow_d_model_overrides():
    # d_k is not frozen at base's 64: overriding d_model re-derives it as d_model / h.
    assert load_config("base", ["d_model=256"]).model.key_dim == 32
    assert load_config("B-dk16", ["d_model=256"]).model.key_dim == 16  # explicit d_k stays


@pytest.mark.parametrize(
    "override, message",
    [
        ("nope=1", "valid keys: model.vocab_size"),
        ("model.d_model=big", "model.d_model must be int"),
        ("model.positional=rotary", "must be one of ['sinusoidal', 'learned']"),
        ("n_heads=7", "not divisible by n_heads=7"),
        ("seed=3", "ambiguous"),
        ("d_model", "key=value"),
        ("model.p_drop=1.5", "p_drop must be in [0, 1)"),
        ("n_layers=0", "model.n_layers must be positive"),
        ("model.d_k=-8", "model.d_k must be positive"),
        ("decode.nbest=5", "need 1 <= nbest <= beam"),
        ("d_model=[1", "override 'd_model=[1': expected ',' or ']'"),  # not YAML at all
        ("adam_eps=1e-9x", "train.adam_eps must be float, got '1e-9x'"),
        ("lr_scale=-1", "train.lr_scale must be >= 0, got -1.0"),  # gradient ascent
        ("lr_scale=.nan", "train.lr_scale must be >= 0, got nan"),  # NaN passes `< 0`
        ("clip_norm=.inf", "train.clip_norm must be >= 0, got inf"),
        ("betas=[0.9, 1.5]", "train.betas must be in [0, 1)"),
        ("ln_eps=0", "model.ln_eps must be positive"),
        ("alpha=.nan", "decode.alpha must be >= 0, got nan"),  # blank translations
        ("decode.min_len=-1", "decode.min_len must be >= 0"),
        ("data.seed=-1", "data.seed must be >= 0, got -1"),  # numpy's traceback, at batching
        ("train.seed=-1", "train.seed must be >= 0, got -1"),
        ("data.max_tokens=0", "data.max_tokens must be positive"),
        ("train.attention_kernel=fastest", "train.attention_kernel must be one of ['auto', "),
        ("model.bos_id=37000", "model.bos_id=37000 is outside the vocabulary"),
        ("model.activation=tanh", "model.activation must be one of ['relu', 'swish', 'gelu']"),
        ("decode.beam_rules=fairseq", "must be one of ['t2t', 'transformers']"),
    ],
)
def test_bad_overrides_name_the_problem(override, message):
    with pytest.raises(ConfigError) as err:
        load_config("base", [override])
    assert message in str(err.value)


def test_numbers_in_exponent_form_and_paths_that_look_like_numbers(tmp_path):
    # YAML 1.1 (PyYAML) reads `1e-9`, without a dot, as text; `data.dir=2024` as an int.
    config = apply_overrides(Config(), ["adam_eps=1e-9", "ln_eps=1E-5", "data.dir=2024",
                                        "train.out_dir='0123'"])  # fmt: skip
    assert config.train.adam_eps == 1e-9 and config.model.ln_eps == 1e-5
    assert config.data.dir == "2024" and config.train.out_dir == "0123"
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  adam_eps: 1e-9\n  out_dir: 2024\n")
    with pytest.raises(ConfigError, match=r"must be str, got 2024 \(quote it: '2024'\)"):
        load_yaml(path)  # in a file, quoting is the way: `0123` would already be 83 there
    path.write_text("train:\n  adam_eps: 1e-9\n")
    assert load_yaml(path).train.adam_eps == 1e-9


def test_a_config_that_is_a_directory_or_not_utf8_is_a_clear_error(tmp_path):
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ConfigError, match="dir.yaml: cannot read"):
        load_config(str(tmp_path / "dir.yaml"))
    (tmp_path / "latin1.yaml").write_bytes(b"# caf\xe9\nmodel:\n  d_model: 512\n")
    with pytest.raises(ConfigError, match="latin1.yaml: not UTF-8 text"):
        load_config(str(tmp_path / "latin1.yaml"))


def test_yaml_unknown_key_lists_valid_keys(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model:\n  d_modle: 512\n")
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    assert "d_modle" in str(err.value) and "model.d_model" in str(err.value)
    assert str(err.value).startswith(f"{path}: unknown config key")  # which file says so


def test_table3_presets():
    assert list(PRESETS) == [
        "base", "big", "A-h1", "A-h4", "A-h16", "A-h32", "B-dk16", "B-dk32", "C-N2", "C-N4",
        "C-N8", "C-d256", "C-d1024", "C-ff1024", "C-ff4096", "D-drop0.0", "D-drop0.2",
        "D-ls0.0", "D-ls0.2", "E-learned-pe",
    ]  # fmt: skip
    heads = {name: (preset(name).model.n_heads, preset(name).model.key_dim) for name in PRESETS}
    assert heads["A-h1"] == (1, 512) and heads["A-h4"] == (4, 128)
    assert heads["A-h16"] == (16, 32) and heads["A-h32"] == (32, 16)
    b16 = preset("B-dk16").model
    assert (b16.key_dim, b16.value_dim) == (16, 64)  # row B changes d_k only
    d256 = preset("C-d256").model
    assert (d256.d_model, d256.key_dim, d256.value_dim) == (256, 32, 32)
    assert preset("D-ls0.2").train.eps_ls == 0.2 and preset("D-drop0.0").model.p_drop == 0.0
    assert preset("E-learned-pe").model.positional == "learned"
    big = preset("big")
    assert (big.model.d_model, big.model.d_ff, big.model.n_heads, big.model.p_drop) == (
        1024, 4096, 16, 0.3,
    )
    assert big.train.max_steps == 300000 and preset("base").train.max_steps == 100000


def test_base_preset_is_the_paper():
    config = preset("base")
    assert dataclasses.astuple(config.train)[:5] == (0.1, 4000, 1.0, (0.9, 0.98), 1e-9)
    assert (config.decode.beam, config.decode.alpha, config.decode.max_len_offset) == (4, 0.6, 50)
    assert config.model == ModelConfig()
    assert config.model.norm == "post" and config.model.tie_embeddings


def test_a_yaml_file_may_start_from_a_preset(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("preset: big\ntrain:\n  max_steps: 7\n")
    config = load_yaml(path)
    assert config.model == preset("big").model and config.train.max_steps == 7
    path.write_text("preset: huge\n")
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        load_yaml(path)
    path.write_text("preset: [base]\n")  # was a TypeError traceback (unhashable list)
    with pytest.raises(ConfigError, match=r"unknown preset \['base'\]"):
        load_yaml(path)


def test_model_differences_name_each_differing_key_in_order_in_the_callers_words():
    a = ModelConfig(d_model=16, n_heads=2, d_ff=32, n_layers=2, p_drop=0.1)
    b = dataclasses.replace(a, n_layers=3, d_ff=64, p_drop=0.3)
    assert model_differences(a, dataclasses.replace(a)) == []
    assert model_differences(a, b) == [
        "model.d_ff: 32 vs 64", "model.n_layers: 2 vs 3", "model.p_drop: 0.1 vs 0.3"
    ]
    assert model_differences(b, a, "{key}: {a!r}/{b!r}", ignore=("d_ff", "p_drop")) == [
        "n_layers: 3/2"
    ]
