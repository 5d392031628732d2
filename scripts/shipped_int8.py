"""The shipped cross-encoder's nDCG@10 on the demo corpus through the app's default scoring path (each first stage's
top 20 re-ranked alone and fused), recorded; ``--suite INT8.json``: an onnx-int8 run of the out-of-domain suite
beside the shipped torch figures, each held to the 0.005 rule."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECORD = ROOT / "docs" / "bench" / "shipped-int8-demo.json"
SUITE_RECORD = ROOT / "docs" / "bench" / "shipped-int8-suite.json"
RULE = 0.005
SUITE_COMMAND = (
    "python -m training.evaluate_reranker --model ctxir/assets/models/cross-encoder --torch-threads 1 "
    "--collections msmarco,demo,med,npl,lisa,scifact --other-first-stages bm25 --depths 20 "
    "--rerank-backend onnx-int8 --output INT8.json --update-metrics false"
)
FIRST_STAGES = ("bm25", "hybrid")  # BM25, and the app's default first stage
DEPTH = 20


def load_app(backend: str, cache: Path):
    """(the app's models with only the shipped cross-encoder, scoring through ``backend``, the demo index)."""
    from ctxir.app.config import AppConfig
    from ctxir.app.corpus_index import CorpusIndex
    from ctxir.app.models import AppModels
    from ctxir.data.demo import demo_corpus
    from ctxir.encoders import EmbeddingCache
    from ctxir.rerank.registry import CROSS_ENCODER, RERANKERS

    config = AppConfig(
        device="cpu", rerankers={kind: "none" for kind in RERANKERS if kind != CROSS_ENCODER.name}
    )
    models = AppModels.load(config)
    # as AppModels.load applies --rerank-backend, with the export under ``cache`` (a first start's, made fresh)
    reranker = models.rerankers[CROSS_ENCODER.name]
    reranker.backend, reranker.onnx_dir = backend, cache / "onnx"
    reranker.onnx_scorer()
    index = CorpusIndex("demo", demo_corpus(), models.bi_encoder, cache=EmbeddingCache(cache / "embeddings"))
    return models, index


def figures(reranker, index, first_stage: str) -> dict[str, float]:
    """{"first_stage" | "alone" | "fused": nDCG@10} of ``reranker`` over ``first_stage``'s top 20 (demo queries)."""
    from ctxir.data import load_qrels, load_queries
    from ctxir.data.demo import ASSETS
    from ctxir.evaluation import evaluate_run
    from ctxir.rerank.pipeline import Pipeline, mode_fusion

    qrels = load_qrels(ASSETS / "demo_qrels.tsv")
    queries = {q: t for q, t in load_queries(ASSETS / "demo_queries.jsonl").items() if q in qrels}
    fusion = mode_fusion(reranker, "fused", first_stage)
    runs = Pipeline(index.retriever(first_stage), reranker, depth=DEPTH, fusion=fusion).run(
        queries, show_progress=False
    )
    # each list scored in its shown order: evaluate_run orders tied scores (BM25's on the demo corpus) as listed
    return {"queries": len(queries)} | {
        name: round(float(evaluate_run(qrels, runs[key]).aggregate["nDCG@10"]), 4)
        for name, key in (("first_stage", "first_stage"), ("alone", "rerank"), ("fused", "fused"))
    }


def measure(cache: Path, backend: str = "onnx-int8") -> dict:
    """The record: each first stage's figures through ``backend`` and what scored them."""
    import onnxruntime

    from benchmarks.common import machine
    from ctxir import kinds
    from ctxir.encoders.bi_encoder import weights_fingerprint

    models, index = load_app(backend, cache)
    reranker = models.reranker(kinds.CROSS_ENCODER)
    scorer = reranker.onnx_scorer()
    if backend.startswith("onnx") and scorer is None:
        raise SystemExit(f"backend {backend!r} did not open (torch's scoring instead): see the warning above")
    return {
        "command": "python scripts/shipped_int8.py",
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "backend": backend,
        "model": reranker.model_name,
        "weights_fingerprint": weights_fingerprint(reranker.model),
        "onnx_file": scorer.path.name if scorer is not None else None,
        "onnxruntime": onnxruntime.__version__,
        **{f"{stage}@{DEPTH}": figures(reranker, index, stage) for stage in FIRST_STAGES},
    }


def suite_comparison(int8: dict, torch: dict) -> dict:
    """Each suite collection's BM25 top-20 nDCG@10 (alone, fused) in int8 beside torch, held to the rule."""
    rows = {}
    for name, result in torch.items():
        stage = f"bm25@{DEPTH}"
        if not isinstance(result, dict) or stage not in result or stage not in int8.get(name, {}):
            continue
        ours, theirs = result[stage], int8[name][stage]
        # SciFact's: all claims, then its parts
        ours, theirs = ours.get("all", ours), theirs.get("all", theirs)
        row = {"queries": ours["queries"]}
        for mode in ("alone", "fused"):
            t, q = ours[mode]["nDCG@10"], theirs[mode]["nDCG@10"]
            row[mode] = {"torch": t, "onnx-int8": q, "delta": round(q - t, 4)}
        row["within_rule"] = all(abs(row[m]["delta"]) <= RULE for m in ("alone", "fused"))
        rows[name] = row
    return {
        "commands": [SUITE_COMMAND, "python scripts/shipped_int8.py --suite INT8.json"],
        "rule": f"onnx-int8 within {RULE} nDCG@10 of torch on every collection, alone and fused",
        "collections": rows,
        "every_collection_within_rule": all(r["within_rule"] for r in rows.values()),
    }


def main(argv: list[str] | None = None) -> int:
    import tempfile

    from ctxir.files import write_json

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", default="", help="an onnx-int8 suite evaluation.json, against torch")
    args = parser.parse_args(argv)
    if args.suite:
        from ctxir.encoders.models import SHIPPED_CROSS_ENCODER, SHIPPED_MODELS
        from ctxir.files import read_json

        torch = read_json(SHIPPED_MODELS[SHIPPED_CROSS_ENCODER] / "evaluation.json")
        record = suite_comparison(read_json(args.suite), torch)
        write_json(SUITE_RECORD, record, indent=1)
        print(json.dumps(record, indent=1))
        return 0
    with tempfile.TemporaryDirectory() as cache:  # a fresh export, as a first start makes it
        record = measure(Path(cache))
    write_json(RECORD, record, indent=1)
    print(json.dumps({k: v for k, v in record.items() if k != "machine"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
