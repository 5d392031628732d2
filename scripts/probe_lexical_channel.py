"""How far can the shipped cross-encoder's lexical channel go on a collection? An analysis probe that chooses nothing.

    python scripts/probe_lexical_channel.py --collections lisa              # 35 queries, 1.5 minutes on 2 threads
    python scripts/probe_lexical_channel.py --collections lisa,npl,med --output docs/bench/ce-stage7-lexical-channel.json

The shipped head scores a (query, window) pair as a segment cosine plus a learned term-match term
(``ctxir.encoders.heads.SegmentCosineHead``); a document scores as its best window (MaxP). This script splits every
window's score into those two parts and re-ranks BM25's top ``--depth`` by each part alone, and by the term-match
part with each query token's share multiplied by the collection's own IDF^γ (document frequency of its word piece
over the whole corpus, BM25's IDF: the corpus statistic the head never sees, since it reads the token's importance
off its vector). It prints nDCG@10 as JSON, beside BM25 and the shipped score (which must equal the suite's
"re-ranker alone" cell for BM25, a check that the split is exact).

It reads a collection's test queries, so nothing it prints may choose a setting: it says where the limit of a
re-ranker that only reads the pair lies, not what to ship.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir.encoders.models import SHIPPED_CROSS_ENCODER, SHIPPED_MODELS  # noqa: E402
from training.common import DEFAULT_DATA_DIR  # noqa: E402
from training.evaluate_reranker import COLLECTIONS  # noqa: E402


def window_parts(
    ce, query: str, windows: list[str], batch_size: int = 32
) -> list[tuple[float, list[tuple[int, float]]]]:
    """Each window's (cosine part, [(query token id, its term-match share), ...]); the parts sum to its score."""
    import torch

    from ctxir.encoders.heads import segment_cosine_scores, segment_means

    head, out = ce[-1], []
    device = next(ce.parameters()).device
    for start in range(0, len(windows), batch_size):
        features = ce.preprocess([(query, w) for w in windows[start : start + batch_size]])
        enc = {k: v.to(device) for k, v in features.items() if isinstance(v, torch.Tensor)}
        with torch.no_grad():
            f = ce[0](dict(enc))
            q, d = segment_means(f["token_embeddings"], f["attention_mask"], f["token_type_ids"])
            cosine = segment_cosine_scores(q, d, head.scale, head.bias, head.linear)  # (batch,)
            shares = head.term_match_scores(f)  # (batch, tokens): 0 outside the query
        query_mask = f["attention_mask"] * (1 - f["token_type_ids"])  # (batch, tokens)
        for b in range(len(cosine)):
            tokens = [
                (int(i), float(s))
                for i, s, m in zip(enc["input_ids"][b], shares[b], query_mask[b], strict=True)
                if m > 0 and s != 0
            ]
            out.append((float(cosine[b]), tokens))
    return out


def probe(ranker, collection: str, depth: int, powers: list[float], data_dir: str) -> dict:
    """nDCG@10 over ``collection``'s BM25 top ``depth`` of BM25, the shipped score, each part alone, and the
    term-match part weighted by the corpus's IDF^γ for each γ of ``powers``."""
    import numpy as np

    from ctxir.data import load_beir
    from ctxir.evaluation import evaluate_run
    from ctxir.retrieval import BM25Retriever
    from training.common import data_folder

    start = time.perf_counter()
    # 1. the collection and BM25's top `depth`
    corpus, queries, qrels = load_beir(data_folder(data_dir, collection), "test")
    queries = {q: t for q, t in queries.items() if q in qrels}
    first = BM25Retriever(corpus).search(queries, depth)
    # 2. the corpus's word-piece document frequencies, for BM25's (Lucene) IDF
    ce = ranker.model
    texts = [f"{d.get('title') or ''} {d.get('text') or ''}" for d in corpus.values()]
    df: Counter = Counter()
    for ids in ce.tokenizer(texts, add_special_tokens=False)["input_ids"]:
        df.update(set(ids))
    n = len(texts)

    def idf(token: int) -> float:
        return math.log(1 + (n - df[token] + 0.5) / (df[token] + 0.5))

    # 3. every window's two parts, then each way of scoring a document as its best window
    shipped, cosine_only, term_only = (
        "shipped (cosine + term match)",
        "cosine part alone",
        "term-match part alone",
    )
    weighted_names = {p: f"term-match part, shares × corpus IDF^{p:g}" for p in powers}
    ways: dict[str, dict[str, dict[str, float]]] = {
        name: {} for name in (shipped, cosine_only, term_only, *weighted_names.values())
    }
    for i, (qid, hits) in enumerate(first.items()):
        for way in ways.values():
            way[qid] = {}
        for hit in hits:
            doc = corpus[hit.doc_id]
            windows = (
                ranker.passages.split(doc.get("title") or "", doc.get("text") or "")
                if ranker.passages is not None
                else [f"{doc.get('title') or ''} {doc.get('text') or ''}".strip()]
            )
            parts = window_parts(ce, queries[qid], windows)
            cosine = [c for c, _ in parts]
            term = [sum(s for _, s in tokens) for _, tokens in parts]
            ways[shipped][qid][hit.doc_id] = float(max(np.add(cosine, term)))
            ways[cosine_only][qid][hit.doc_id] = max(cosine)
            ways[term_only][qid][hit.doc_id] = max(term)
            for p, name in weighted_names.items():
                ways[name][qid][hit.doc_id] = max(
                    sum(s * idf(t) ** p for t, s in tokens) for _, tokens in parts
                )
        if i % 10 == 0:
            print(
                f"{collection}: {i}/{len(first)} queries, {time.perf_counter() - start:.0f} s",
                file=sys.stderr,
            )

    # 4. nDCG@10 of each, every list scored in the order it is shown
    def ndcg(scores: dict[str, dict[str, float]]) -> float:
        run = {q: dict(sorted(d.items(), key=lambda kv: -kv[1])) for q, d in scores.items()}
        return round(evaluate_run({q: qrels[q] for q in run}, run).aggregate["nDCG@10"], 4)

    bm25 = {q: {h.doc_id: h.score for h in hits} for q, hits in first.items()}
    return {
        "collection": collection,
        "queries": len(queries),
        "candidates": f"BM25 top {depth}",
        "nDCG@10": {"BM25": ndcg(bm25), **{name: ndcg(way) for name, way in ways.items()}},
        "seconds": round(time.perf_counter() - start),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--collections",
        default="lisa",
        help=f"comma-separated, of {', '.join(c for c in COLLECTIONS if c != 'demo')}",
    )
    parser.add_argument("--model", default=str(SHIPPED_MODELS[SHIPPED_CROSS_ENCODER]))
    parser.add_argument("--depth", type=int, default=20, help="BM25 candidates re-ranked per query")
    parser.add_argument("--idf-powers", default="1,2", help="γ of the IDF-weighted term-match rows")
    parser.add_argument("--torch-threads", type=int, default=2)
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    parser.add_argument("--output", default="", help="also write the JSON here")
    args = parser.parse_args(argv)
    collections = [c.strip() for c in args.collections.split(",") if c.strip()]
    valid = [c for c in COLLECTIONS if c != "demo"]
    if not collections or any(c not in valid for c in collections):
        parser.error(
            f"--collections {args.collections!r}: name one or more of {', '.join(valid)}, comma-separated"
        )
    powers = [float(p) for p in args.idf_powers.split(",") if p.strip()]

    import torch

    from ctxir import kinds
    from ctxir.rerank.registry import load_reranker

    torch.set_num_threads(args.torch_threads)
    ranker = load_reranker(kinds.CROSS_ENCODER, args.model, device="cpu")
    head = ranker.model[-1]
    if not getattr(head, "term_match", False) or getattr(head, "importance_pooling", False):
        parser.error(
            f"--model {args.model!r}: needs a SegmentCosineHead with the term-match term and no importance pooling "
            "(the shipped cross-encoder's head), whose score splits into a cosine and a term-match part"
        )
    model = Path(args.model).resolve()
    report = {
        "model": str(model.relative_to(ROOT)) if model.is_relative_to(ROOT) else args.model,
        "torch_threads": args.torch_threads,
        "results": [probe(ranker, c, args.depth, powers, args.data_dir) for c in collections],
    }
    text = json.dumps(report, indent=1, ensure_ascii=False)
    if args.output:
        Path(args.output).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
