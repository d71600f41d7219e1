import json

import pytest
from transformers import AutoConfig, RobertaConfig

import modeling_minibert  # noqa: F401  (registers the Auto classes)
from modeling_minibert import MiniBertConfig
from modeling_minibert.configuration_minibert import FLOAT_FIELDS, MAX_VOCAB_SIZE


def test_defaults_are_the_mini_bert_sizes():
    config = MiniBertConfig()
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (8192, 192, 3)
    assert (config.num_attention_heads, config.intermediate_size, config.max_position_embeddings) == (4, 768, 64)
    assert config.type_vocab_size == 2 and config.head_dim == 48
    assert (config.hidden_act, config.final_layer_norm, config.mlm_head_transform) == ("gelu", False, True)


def test_bert_base_and_large_are_expressible():
    for hidden, layers, heads in ((768, 12, 12), (1024, 24, 16)):
        config = MiniBertConfig(
            vocab_size=30522,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=4 * hidden,
            max_position_embeddings=512,
        )
        assert config.head_dim == 64


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hidden_size", 190, r"hidden_size \(190\) must be divisible by num_attention_heads \(4\)"),
        ("num_hidden_layers", 0, r"num_hidden_layers must be a positive integer, got 0"),
        ("vocab_size", -5, r"vocab_size must be a positive integer, got -5"),
        ("max_position_embeddings", 0, r"max_position_embeddings must be a positive integer, got 0"),
        ("hidden_act", "swishy", r"hidden_act 'swishy' is not a known activation"),
        ("hidden_dropout_prob", 1.0, r"hidden_dropout_prob must be in \[0, 1\), got 1.0"),
        ("attention_probs_dropout_prob", -0.1, r"attention_probs_dropout_prob must be in \[0, 1\), got -0.1"),
        ("pad_token_id", 9000, r"pad_token_id \(9000\) must be in \[0, vocab_size=8192\)"),
        ("hidden_size", "abc", r"hidden_size must be an integer, got 'abc'"),
        ("num_hidden_layers", 2.5, r"num_hidden_layers must be an integer, got 2.5"),
        ("num_hidden_layers", True, r"num_hidden_layers must be an integer, got True"),
        ("hidden_dropout_prob", "0.1", r"hidden_dropout_prob must be a number, got '0.1'"),
        ("unpad_inputs", 1, r"unpad_inputs must be true or false, got 1"),
        ("hidden_act", 3, r"hidden_act must be a string, got 3"),
        ("layer_norm_position", "middle", r"layer_norm_position must be one of 'post', 'pre', got 'middle'"),
    ],
)
def test_invalid_values_raise_value_error_naming_field_and_value(field, value, message):
    with pytest.raises(ValueError, match=message):
        MiniBertConfig(**{field: value})


def test_round_trip_and_auto_config(tmp_path):
    config = MiniBertConfig(hidden_act="relu", final_layer_norm=True, mlm_head_transform=False, num_labels=5)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "minibert"
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, MiniBertConfig)
    assert loaded.to_diff_dict() == config.to_diff_dict()


def test_config_of_another_model_type_is_refused_naming_the_file(tmp_path):
    RobertaConfig().save_pretrained(tmp_path)  # (a BERT config translates: test_convert_bert.py)
    with pytest.raises(ValueError, match=r"config.json in .* has model_type 'roberta', expected 'minibert' or 'bert'"):
        MiniBertConfig.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hidden_size", "abc", r"MiniBertConfig.hidden_size must be an integer, got 'abc'"),
        ("num_hidden_layers", 2.5, r"MiniBertConfig.num_hidden_layers must be an integer, got 2.5"),
        ("layer_norm_position", "PRE", r"layer_norm_position must be one of 'post', 'pre', got 'PRE'"),
    ],
)
def test_config_json_with_a_wrong_field_is_refused_naming_it(tmp_path, field, value, message):
    MiniBertConfig().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, field: value}))
    for load in (AutoConfig.from_pretrained, MiniBertConfig.from_pretrained):
        with pytest.raises(ValueError, match=message):
            load(tmp_path)


def test_invalid_json_is_named_with_its_position(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "minibert",}')
    with pytest.raises(ValueError, match=rf"{tmp_path / 'config.json'} is not valid JSON: .*line 1 column 27"):
        MiniBertConfig.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config.json must hold a JSON object, got list"):
        MiniBertConfig.from_pretrained(tmp_path)


def test_pre_layer_norm_is_opt_in_and_brings_its_final_layer_norm(tmp_path):
    assert MiniBertConfig().layer_norm_position == "post"
    config = MiniBertConfig(layer_norm_position="pre")
    assert config.final_layer_norm is True  # pre-LN's residual stream is normalised only there
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert (loaded.layer_norm_position, loaded.final_layer_norm) == ("pre", True)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("field", FLOAT_FIELDS)
def test_every_float_field_refuses_nan_and_infinity(field, value, tmp_path):
    """`nan <= 0` is False, so a range check alone lets NaN through (and fill-mask printed nan scores)."""
    with pytest.raises(ValueError, match=rf"^MiniBertConfig.{field} must be a finite number, got {value}$"):
        MiniBertConfig(**{field: value})
    MiniBertConfig().save_pretrained(tmp_path)  # json writes and reads NaN and Infinity as they are
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, field: value}))
    with pytest.raises(ValueError, match=rf"MiniBertConfig.{field} must be a finite number, got {value}"):
        AutoConfig.from_pretrained(tmp_path)


def test_the_float_fields_are_every_float_of_the_config():
    floats = {
        name
        for name, value in MiniBertConfig(classifier_dropout=0.1).to_diff_dict().items()
        if isinstance(value, float)
    }
    assert floats <= set(FLOAT_FIELDS) and len(FLOAT_FIELDS) == 5


def test_vocab_size_has_an_upper_bound_checked_before_any_allocation():
    assert MiniBertConfig(vocab_size=MAX_VOCAB_SIZE).vocab_size == 2**20  # exactly the limit: fine
    for value in (MAX_VOCAB_SIZE + 1, 10**9):
        with pytest.raises(
            ValueError, match=rf"^MiniBertConfig.vocab_size={value} is above the limit of 1048576 \(2\*\*20\) ids$"
        ):
            MiniBertConfig(vocab_size=value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_labels=0), r"num_labels must be at least 1, got 0"),
        (dict(initializer_range=-0.02), r"initializer_range must be at least 0, got -0.02"),
    ],
)
def test_values_torch_would_fail_on_later_are_refused_now(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MiniBertConfig(**kwargs)
    assert MiniBertConfig(num_labels=1, initializer_range=0.0).num_labels == 1
