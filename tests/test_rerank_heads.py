"""ctxir's cross-encoder modules (ctxir.encoders.heads, once ctxir.rerank_heads): the segment-cosine score, and a
body saved as its trained top layers over a base named by Hub id — loaded by ctxir with no trust_remote_code, and
by sentence-transformers alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ctxir.encoders import models
from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer, layer_of
from ctxir.encoders.reranker_heads import (
    segment_cosine_scores,
    segment_means,
    term_match_per_token,
)
from ctxir.names import TOP_LAYERS_CONFIG, TOP_LAYERS_WEIGHTS
from ctxir.types import CtxirError

PAIRS = [
    ("the cat sat", "the cat sat on the dog"),
    ("the cat sat", "tea and coffee"),
    ("river water", "otters play in the river water"),
]


def test_segment_means_leave_out_padding_and_split_on_token_types():
    tokens = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)  # (batch, tokens, hidden)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    types = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]])
    a, b = segment_means(tokens, mask, types)
    assert torch.allclose(a[0], tokens[0, :2].mean(0)) and torch.allclose(b[0], tokens[0, 2:].mean(0))
    assert torch.allclose(a[1], tokens[1, :1].mean(0)) and torch.allclose(b[1], tokens[1, 1:3].mean(0))


def test_segment_cosine_scores_are_scaled_cosines_plus_the_linear_term():
    q, d = torch.tensor([[3.0, 4.0]]), torch.tensor([[4.0, 3.0]])
    assert segment_cosine_scores(q, d, torch.tensor(10.0), torch.tensor(-1.0)).item() == pytest.approx(
        10 * 0.96 - 1
    )
    linear = torch.nn.Linear(6, 1)
    torch.nn.init.constant_(linear.weight, 0.5)
    torch.nn.init.zeros_(linear.bias)
    # [q; d; |q − d|] = [3, 4, 4, 3, 1, 1] → 0.5 · 16 = 8
    assert segment_cosine_scores(
        q, d, torch.tensor(10.0), torch.tensor(-1.0), linear
    ).item() == pytest.approx(10 * 0.96 - 1 + 8)


def test_term_match_features_count_exact_matches_per_query_token_by_hand():
    # [CLS]=1 a=5 b=6 [SEP]=2 | a a c [SEP] [PAD]; row 2 has the same query and no shared word
    ids = torch.tensor([[1, 5, 6, 2, 5, 5, 7, 2, 0], [1, 5, 6, 2, 8, 9, 2, 0, 0]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 0], [0, 0, 0, 0, 1, 1, 1, 0, 0]])
    mask = (ids > 0).long()
    weights = torch.tensor(
        [[0.0, 2.0, 1.0, 0.0, 9, 9, 9, 9, 9]] * 2
    )  # [CLS]/[SEP] weigh 0; the document's ignored
    f = term_match_per_token(torch.randn(2, 9, 4), ids, mask, types, weights, kernels=()).sum(1)
    # row 1: "a" occurs twice in the document (weight 2), "b" never: 2·log 3 / 4 query tokens; the [PAD] never counts
    assert f.shape == (2, 1)
    assert f[0, 0].item() == pytest.approx(2 * np.log(3) / 4)
    assert f[1, 0].item() == pytest.approx(0.0)


def test_term_match_kernels_are_rbf_counts_of_cosine_bands():
    # two query tokens along x; the document's two tokens along x (cos 1) and y (cos 0)
    tokens = torch.tensor([[[0.0, 0, 1], [1.0, 0, 0], [2.0, 0, 0], [1.0, 0, 0], [0.0, 1, 0]]])
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    types, mask, weights = (
        torch.tensor([[0, 0, 0, 1, 1]]),
        torch.ones(1, 5, dtype=torch.long),
        torch.ones(1, 5),
    )
    f = term_match_per_token(tokens, ids, mask, types, weights, kernels=(1.0, 0.0), sigma=0.1).sum(1)
    # [CLS] (along z) has cosine 0 with both document tokens; "a" and "b" have cosine 1 with one, 0 with the other
    band_1 = (0 + np.log1p(1 + np.exp(-50)) * 2) / 3
    band_0 = (np.log1p(2.0) + np.log1p(np.exp(-50) + 1) * 2) / 3
    assert f[0].tolist() == pytest.approx([0.0, band_1, band_0], abs=1e-6)


def test_the_term_match_term_starts_at_zero_then_trains_and_reloads(tiny_bert_dir, tmp_path):
    ce = _fresh(tiny_bert_dir, str(tiny_bert_dir))
    before = np.ravel(ce.predict(PAIRS))
    ce[1].add_term_match()
    assert np.allclose(np.ravel(ce.predict(PAIRS)), before)  # zero-initialised: the scores it shipped with
    # a step on a loss that rewards word overlap moves it: the pair sharing words gains on the pair sharing none
    optimizer = torch.optim.Adam([*ce[1].term_weight.parameters(), *ce[1].term_linear.parameters()], lr=0.1)
    features = ce.tokenizer(
        [p[0] for p in PAIRS[:2]], [p[1] for p in PAIRS[:2]], return_tensors="pt", padding=True
    )
    for _ in range(5):
        optimizer.zero_grad()
        scores = ce(dict(features))["scores"].squeeze(1)  # (2,): the module chain's forward, as in training
        (-torch.log_softmax(scores, 0)[0]).backward()
        optimizer.step()
    after = np.ravel(ce.predict(PAIRS))
    assert after[0] - after[1] > before[0] - before[1] + 0.1
    folder = tmp_path / "matched"
    ce.save_pretrained(str(folder))
    assert json.loads((folder / "1_SegmentCosineHead" / "config.json").read_text())["term_match"] is True
    models.load_cross_encoder.cache_clear()
    assert np.allclose(
        np.ravel(models.load_cross_encoder(str(folder), "cpu").predict(PAIRS)), after, atol=0.05
    )
    from ctxir.publish.model_folder import model_facts

    assert model_facts(folder, "cross-encoder")["term_match"] is True  # the card describes the term


def test_a_head_saved_before_term_match_loads_without_it(saved):
    folder, _ = saved
    config = folder / "1_SegmentCosineHead" / "config.json"
    old = {k: v for k, v in json.loads(config.read_text()).items() if k != "term_match"}
    config.write_text(json.dumps(old))
    models.load_cross_encoder.cache_clear()
    head = models.load_cross_encoder(str(folder), "cpu")[1]
    assert head.term_match is False and not hasattr(head, "term_linear")


def test_layer_of_names_encoder_layers_only():
    assert layer_of("encoder.layer.11.output.dense.weight") == 11
    assert layer_of("0.model.encoder.layer.0.attention.self.key.bias") == 0
    assert layer_of("embeddings.LayerNorm.weight") is None and layer_of("pooler.dense.weight") is None


def _fresh(tiny_bert_dir: Path, base: str, train_from: int = 1):
    from sentence_transformers import CrossEncoder

    body = TopLayersTransformer(str(tiny_bert_dir), transformer_task="feature-extraction")
    body.model.config.num_labels = 1
    body.max_seq_length = 32
    body.freeze_below(train_from, base)
    return CrossEncoder(
        modules=[body, SegmentCosineHead(32)], device="cpu", activation_fn=torch.nn.Identity()
    )


def test_untrained_head_scores_the_scaled_cosine_of_one_joint_pass(tiny_bert_dir):
    from transformers import AutoModel, AutoTokenizer

    ce = _fresh(tiny_bert_dir, str(tiny_bert_dir))
    scores = np.ravel(ce.predict(PAIRS))
    tokenizer, bert = (
        AutoTokenizer.from_pretrained(tiny_bert_dir),
        AutoModel.from_pretrained(tiny_bert_dir).eval(),
    )
    for (query, document), score in zip(PAIRS, scores, strict=True):
        enc = tokenizer(query, document, return_tensors="pt")
        with torch.no_grad():
            hidden = bert(**enc).last_hidden_state[0]  # (tokens, hidden)
        types = enc["token_type_ids"][0].bool()
        cos = torch.nn.functional.cosine_similarity(hidden[~types].mean(0), hidden[types].mean(0), dim=0)
        assert score == pytest.approx(20.0 * cos.item(), abs=1e-4)


def test_freeze_below_trains_only_the_top_layers(tiny_bert_dir):
    ce = _fresh(tiny_bert_dir, str(tiny_bert_dir), train_from=1)
    trainable = {n for n, p in ce[0].model.named_parameters() if p.requires_grad}
    assert trainable and all(layer_of(n) == 1 for n in trainable)
    with pytest.raises(ValueError, match="out of range"):
        ce[0].freeze_below(2, "x")


@pytest.fixture
def saved(tiny_bert_dir, tmp_path) -> tuple[Path, object]:
    """A segment-cosine cross-encoder whose top layer and head were changed, saved as top layers."""
    ce = _fresh(tiny_bert_dir, str(tiny_bert_dir))
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in ce.parameters():
            if parameter.requires_grad:
                parameter.add_(0.05 * torch.randn_like(parameter))
    folder = tmp_path / "ce"
    ce.save_pretrained(str(folder))
    return folder, ce


def test_only_the_trained_layers_are_saved_in_float16(saved, tiny_bert_dir):
    from safetensors.torch import load_file

    folder, _ = saved
    patch = load_file(str(folder / TOP_LAYERS_WEIGHTS))
    assert patch and all(layer_of(k) == 1 and v.dtype == torch.float16 for k, v in patch.items())
    config = json.loads((folder / TOP_LAYERS_CONFIG).read_text())
    assert config["base_model"] == str(tiny_bert_dir) and config["trained_from_layer"] == 1
    assert not (folder / "model.safetensors").exists()


def test_ctxir_and_sentence_transformers_load_the_same_model(saved):
    from sentence_transformers import CrossEncoder

    folder, ce = saved
    models.load_cross_encoder.cache_clear()
    loaded = models.load_cross_encoder(str(folder), "cpu")  # no trust_remote_code: ctxir names the classes
    ours = np.ravel(loaded.predict(PAIRS))
    # the saved layers are float16: the reload differs from the in-memory model by that rounding only
    assert np.allclose(ours, np.ravel(ce.predict(PAIRS)), atol=0.05)
    assert not np.allclose(
        ours,
        np.ravel(
            _fresh(Path(json.loads((folder / TOP_LAYERS_CONFIG).read_text())["base_model"]), "x").predict(
                PAIRS
            )
        ),
        atol=1e-3,
    )
    plain = CrossEncoder(str(folder), device="cpu", trust_remote_code=True)
    assert np.array_equal(np.ravel(plain.predict(PAIRS)), ours)
    assert type(loaded.activation_fn).__name__ == "Identity"  # raw scores: a sigmoid would saturate at 1.0
    with pytest.raises(ValueError, match="trust_remote_code"):
        CrossEncoder(str(folder), device="cpu")


def test_the_body_view_is_the_cross_encoders_body(saved):
    folder, _ = saved
    models.load_cross_encoder.cache_clear()
    models.load_transformer.cache_clear()
    ce = models.load_cross_encoder(str(folder), "cpu")
    tokenizer, body = models.load_transformer(str(folder), "cpu", attentions=False)
    enc = tokenizer(*PAIRS[0], return_tensors="pt")
    with torch.no_grad():
        ours = body(**enc).last_hidden_state
        theirs = ce[0].auto_model(**enc).last_hidden_state
    assert torch.allclose(ours, theirs, atol=1e-6)


def test_a_folder_naming_foreign_modules_is_refused(saved):
    folder, _ = saved
    entries = json.loads((folder / "modules.json").read_text())
    entries[1]["type"] = "evil_package.RunsCode"
    (folder / "modules.json").write_text(json.dumps(entries))
    models.load_cross_encoder.cache_clear()
    with pytest.raises(CtxirError, match=r"evil_package\.RunsCode"):
        models.load_cross_encoder(str(folder), "cpu")


def test_layers_trained_over_another_base_are_refused(saved, tmp_path):
    from safetensors.torch import load_file, save_file

    folder, _ = saved
    patch = load_file(str(folder / TOP_LAYERS_WEIGHTS))
    patch["encoder.layer.7.output.dense.weight"] = next(iter(patch.values())).clone()
    save_file(patch, str(folder / TOP_LAYERS_WEIGHTS))
    models.load_cross_encoder.cache_clear()
    with pytest.raises((CtxirError, ValueError), match="another base"):
        models.load_cross_encoder(str(folder), "cpu")
