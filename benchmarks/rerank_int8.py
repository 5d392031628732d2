"""``python -m benchmarks.rerank_int8``: does an int8 cross-encoder keep its ranking? nDCG@10 of each variant
(torch, torch-int8, onnx, onnx-int8: only the layers shared with its base int8, onnx-int8-all) re-ranking BM25's
top 20 of the model's held-out training claims; an int8 path keeps within ``--tolerance`` of torch or not."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ctxir.cli import cli_main, flag
from ctxir.files import read_json
from ctxir.types import CtxirError

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("torch", "torch-int8", "onnx", "onnx-int8", "onnx-int8-all")  # torch always runs: the reference


@dataclass
class Int8Args:
    model: str = flag(str(ROOT / "ctxir/assets/models/cross-encoder"), "metrics.json names held-out claims")
    data_dir: str = flag(str(ROOT.parent / "shared" / "data"), "benchmark data root")
    depth: int = flag(20, "BM25 candidates per claim")
    tolerance: float = flag(0.005, "largest nDCG@10 change that keeps int8")
    variants: str = flag("torch,onnx,onnx-int8,onnx-int8-all", "comma-separated, of " + ", ".join(VARIANTS))


def run(args: Int8Args) -> dict:
    import torch

    from ctxir.data import load_beir
    from ctxir.encoders import onnx_backend, onnx_export
    from ctxir.encoders.models import load_cross_encoder, set_threads
    from ctxir.evaluation import evaluate_run
    from ctxir.rerank import CrossEncoderReranker
    from ctxir.rerank.registry import passages_for
    from ctxir.retrieval import BM25Retriever

    set_threads(1)
    dev = ((read_json(Path(args.model) / "metrics.json") or {}).get("extra") or {}).get("heldout_query_ids")
    if not dev:
        raise CtxirError(
            f"--model {args.model!r} has no metrics.json naming held-out claims "
            "(extra.heldout_query_ids): pass a folder written by training/train_cross_encoder.py"
        )
    corpus, queries, qrels = load_beir(Path(args.data_dir) / "scifact", "train")
    queries, qrels = {q: queries[q] for q in dev}, {q: qrels[q] for q in dev}
    first = BM25Retriever(corpus).search(queries, args.depth)

    model = load_cross_encoder.__wrapped__(args.model, "cpu")
    passages = passages_for(args.model)  # None: the first max-length tokens
    onnx_dir = Path(tempfile.mkdtemp(prefix="ctxir-int8-"))

    def reranker(variant: str):
        if variant == "torch-int8":
            quantised = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            return CrossEncoderReranker(quantised, batch_size=32, passages=passages, backend="torch")
        ranker = CrossEncoderReranker(
            model, batch_size=32, passages=passages, backend="onnx" if variant == "onnx-int8-all" else variant
        )
        ranker.onnx_dir = onnx_dir
        if variant == "onnx-int8-all":  # every MatMul: the bi-encoder's int8 settings on the whole body
            sample = [("a query", "a document"), ("a longer query", "a document too")]
            fp32 = onnx_export.export_onnx(model, onnx_dir / "all", progress=False, sample=sample)
            ranker._onnx = onnx_backend.OnnxCrossEncoder(onnx_export.quantise(fp32, "dynamic"), model, 1)
        ranker.onnx_scorer()
        return ranker

    def score(variant: str) -> tuple[dict, float]:
        ranker = reranker(variant)
        start = time.perf_counter()
        run = {q: {h.doc_id: h.score for h in ranker._rerank(queries[q], first[q], corpus)} for q in dev}
        return run, time.perf_counter() - start

    variants = ["torch", *[v.strip() for v in args.variants.split(",") if v.strip() != "torch"]]
    runs = {v: score(v) for v in variants}
    reference = runs["torch"][0]
    ndcg = {v: round(float(evaluate_run(qrels, run).aggregate["nDCG@10"]), 4) for v, (run, _) in runs.items()}
    result = {
        "claims": len(dev),
        "depth": args.depth,
        "passages": str(passages),
        "tolerance": args.tolerance,
        "variants": {
            v: {
                "ndcg@10": ndcg[v],
                "change": round(ndcg[v] - ndcg["torch"], 4),
                "max_abs_score_difference": round(
                    max(abs(run[q][d] - reference[q][d]) for q in dev for d in reference[q]), 4
                ),
                "seconds": round(seconds, 1),
                "keeps_score": abs(ndcg[v] - ndcg["torch"]) <= args.tolerance,
            }
            for v, (run, seconds) in runs.items()
        },
    }
    print(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    return cli_main(Int8Args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
