import pytest
import torch

from maopd.agents.tiny_model import TinyModelConfig, build_tiny_model, load_model, save_model
from maopd.agents.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["The capital of France is Paris."])


def _same_weights(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_same_seed_same_weights_and_caller_rng_untouched(tokenizer):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = build_tiny_model(tokenizer, TinyModelConfig(seed=7))
    assert torch.equal(torch.rand(3), expected)
    assert _same_weights(first, build_tiny_model(tokenizer, TinyModelConfig(seed=7)))
    assert not _same_weights(first, build_tiny_model(tokenizer, TinyModelConfig(seed=8)))


def test_shape_follows_tokenizer_and_config(tokenizer):
    model = build_tiny_model(tokenizer, TinyModelConfig(hidden_size=32, num_layers=3, head_dim=8))
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.num_hidden_layers == 3
    assert model.config.eos_token_id == tokenizer.eos_token_id
    logits = model(torch.tensor([tokenizer.encode("Paris")])).logits
    assert logits.shape[-1] == len(tokenizer)


def test_save_and_load_round_trip(tokenizer, tmp_path):
    model = build_tiny_model(tokenizer)
    model_dir = save_model(model, tokenizer, tmp_path / "tiny")
    loaded, loaded_tokenizer = load_model(model_dir)
    ids = torch.tensor([loaded_tokenizer.encode("The capital of France")])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    bf16, _ = load_model(model_dir, dtype=torch.bfloat16)
    assert next(bf16.parameters()).dtype == torch.bfloat16


def test_bad_config_and_missing_dir_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="num_heads"):
        TinyModelConfig(num_heads=3, num_kv_heads=2)
    with pytest.raises(ValueError, match="hidden_size"):
        TinyModelConfig(hidden_size=0)
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)
