"""One rule for every max_length / --max-length (ctxir.encoders.lengths.max_length_for): None or 0 = the model's own
limit, a number = that many tokens, never beyond the position embeddings."""

from types import SimpleNamespace

import numpy as np
import pytest

from ctxir.app.pairs_tab import input_formation
from ctxir.encoders.lengths import max_length_for, position_limit, set_max_length
from ctxir.encoders.models import load_transformer
from ctxir.rerank import ClsLrRanker, cls_features
from ctxir.types import CtxirError

LONG = " ".join(["river bank otters"] * 100)  # ~300 word pieces: past the tiny BERT's 128 positions


@pytest.mark.parametrize(
    ("requested", "own", "positions", "expected"),
    [
        (None, 256, 512, 256),
        (0, 256, 512, 256),  # the model's own
        (128, 256, 512, 128),
        (384, 256, 512, 384),  # a number, shorter or longer than the model's own
        (1024, 256, 512, 512),
        (None, 1024, 512, 512),  # never past the position embeddings
        (None, 10**30, 512, 512),
        (None, 10**30, None, None),  # a tokenizer with no limit of its own
        (None, None, None, None),
        (64, None, None, 64),
    ],
)
def test_the_rule(requested, own, positions, expected):
    assert max_length_for(requested, own, positions) == expected


@pytest.mark.parametrize("bad", [-1, 1.5, "256", True])
def test_a_bad_length_names_the_argument_and_the_value(bad):
    with pytest.raises(CtxirError, match=rf"--max-length must be a whole number.*got {bad!r}"):
        max_length_for(bad, 256, 512, name="--max-length")


def test_position_limit_leaves_out_the_padding_offset_of_roberta_like_models():
    assert position_limit(SimpleNamespace(model_type="bert", max_position_embeddings=512)) == 512
    assert (
        position_limit(SimpleNamespace(model_type="mpnet", max_position_embeddings=514, pad_token_id=1))
        == 512
    )
    assert position_limit(SimpleNamespace(model_type="t5")) is None


def test_set_max_length_on_the_packaged_minilm(minilm_path):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_path), device="cpu")
    assert model.max_seq_length == 256  # its own (sentence_bert_config.json); 512 positions
    assert set_max_length(model, 0) == 256 and model.max_seq_length == 256
    assert set_max_length(model, 128) == 128 and model.max_seq_length == 128
    assert set_max_length(model, 4096) == 512 and model.max_seq_length == 512
    with pytest.raises(CtxirError, match="--max-length"):
        set_max_length(model, -3, name="--max-length")


def test_train_bi_encoder_max_length_follows_the_rule(minilm_path):
    from training.train_bi_encoder import BiEncoderArgs, load

    assert load(BiEncoderArgs(model=str(minilm_path), max_length=0), "cpu").max_seq_length == 256
    assert load(BiEncoderArgs(model=str(minilm_path), max_length=100_000), "cpu").max_seq_length == 512


def test_cls_features_and_cls_lr_never_read_past_the_position_embeddings(tiny_bert_dir):
    tokenizer, body = load_transformer(str(tiny_bert_dir), "cpu", attentions=False)
    assert tokenizer.model_max_length >= 10**9 and body.config.max_position_embeddings == 128  # no own limit
    pairs = [("otters", LONG), ("tea", "coffee")]
    # before the rule the default was 512 tokens: ~300 of them past 128 positions, a RuntimeError
    assert cls_features(body, tokenizer, pairs).shape == (2, 32)
    np.testing.assert_allclose(
        cls_features(body, tokenizer, pairs), cls_features(body, tokenizer, pairs, max_length=128), atol=1e-5
    )
    coef = np.ones(32, dtype=np.float32)
    assert ClsLrRanker(str(tiny_bert_dir), coef, 0.0, device="cpu").max_length == 128
    assert ClsLrRanker(str(tiny_bert_dir), coef, 0.0, max_length=64, device="cpu").max_length == 64
    assert ClsLrRanker(str(tiny_bert_dir), coef, 0.0, max_length=4096, device="cpu").max_length == 128
    assert ClsLrRanker(str(tiny_bert_dir), coef, 0.0, device="cpu").score_pairs("otters", [LONG]).shape == (
        1,
    )


def test_the_apps_input_formation_cuts_where_the_model_does(tiny_bert_dir):
    tokenizer, _ = load_transformer(str(tiny_bert_dir), "cpu", attentions=False)
    cut = input_formation(tokenizer, "otters", LONG, positions=128)
    assert cut["num_tokens"] == 128 and cut["truncated"]
    assert input_formation(tokenizer, "otters", LONG, max_length=32, positions=128)["num_tokens"] == 32
    short = input_formation(tokenizer, "otters", "river bank", positions=128)
    assert not short["truncated"] and short["tokens"][0] == "[CLS]"
