"""Does an int8 cross-encoder keep its ranking? The shipped (or any) cross-encoder in float32 and with torch's dynamic
int8 quantisation of every Linear layer, both re-ranking BM25's top 20 of the model's held-out training claims.

    python scripts/cross_encoder_int8.py --model ctxir/assets/models/cross-encoder

The issue's rule: use the int8 path for the cross-encoder only if it keeps the score within 0.005 (nDCG@10), decided
on these held-out *training* claims (metrics.json's ``extra.heldout_query_ids``), never on test. Prints both
scores, the largest score difference over the pairs, and the time of each pass (one torch thread).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ctxir.cli import cli_main
from ctxir.files import read_json
from ctxir.types import CtxirError

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Int8Args:
    model: str = field(default=str(ROOT / "ctxir" / "assets" / "models" / "cross-encoder"), metadata={
        "help": "cross-encoder folder whose metrics.json names its held-out training claims"})
    data_dir: str = field(default=str(ROOT.parent / "shared" / "data"), metadata={"help": "benchmark data root"})
    depth: int = field(default=20, metadata={"help": "BM25 candidates per claim"})
    tolerance: float = field(default=0.005, metadata={"help": "largest nDCG@10 change that keeps int8"})


def run(args: Int8Args) -> dict:
    import torch

    from ctxir.data import load_beir
    from ctxir.encoders.models import load_cross_encoder, set_threads
    from ctxir.evaluation import evaluate_run
    from ctxir.rerank import CrossEncoderReranker
    from ctxir.retrieval import BM25Retriever

    set_threads(1)
    # 1. the held-out training claims the model names
    dev = ((read_json(Path(args.model) / "metrics.json") or {}).get("extra") or {}).get("heldout_query_ids")
    if not dev:
        raise CtxirError(f"--model {args.model!r} has no metrics.json naming held-out claims "
                         "(extra.heldout_query_ids): pass a folder written by training/train_cross_encoder.py")
    corpus, queries, qrels = load_beir(Path(args.data_dir) / "scifact", "train")
    queries, qrels = {q: queries[q] for q in dev}, {q: qrels[q] for q in dev}
    first = BM25Retriever(corpus).search(queries, args.depth)

    # 2. the same candidates scored by float32 and by int8
    def score(model) -> tuple[dict, float]:
        reranker, start = CrossEncoderReranker(model, batch_size=32), time.perf_counter()
        run = {q: {h.doc_id: h.score for h in reranker._rerank(queries[q], first[q], corpus)} for q in dev}
        return run, time.perf_counter() - start

    model = load_cross_encoder.__wrapped__(args.model, "cpu")
    fp32, fp32_seconds = score(model)
    int8, int8_seconds = score(torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8))
    # 3. the comparison
    result = {"claims": len(dev), "depth": args.depth,
              "fp32_ndcg@10": round(float(evaluate_run(qrels, fp32).aggregate["nDCG@10"]), 4),
              "int8_ndcg@10": round(float(evaluate_run(qrels, int8).aggregate["nDCG@10"]), 4),
              "max_abs_score_difference": round(max(abs(fp32[q][d] - int8[q][d]) for q in dev for d in fp32[q]), 4),
              "fp32_seconds": round(fp32_seconds, 1), "int8_seconds": round(int8_seconds, 1)}
    result["keeps_score"] = abs(result["int8_ndcg@10"] - result["fp32_ndcg@10"]) <= args.tolerance
    print(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    return cli_main(Int8Args, run, argv)


if __name__ == "__main__":
    sys.exit(main())
