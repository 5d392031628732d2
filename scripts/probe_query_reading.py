"""Does a cross-encoder gain from reading a long query whole? A dev-only probe (no test collection is read).

    python scripts/probe_query_reading.py --reading cut         # as shipped: query and window cut alike to fit
    python scripts/probe_query_reading.py --reading query-whole # the same length, only the window is cut
    python scripts/probe_query_reading.py --reading grow        # the pair read longer, the window keeps its room

The shipped cross-encoder reads a (query, window) pair in 128 tokens, cutting the longer of the two first
(``longest_first``), so a query over ~62 tokens loses its end. ``query-whole`` cuts only the window
(``only_second``); ``grow`` reads ``128 + max(0, query tokens − --room-query)`` tokens, so beside a long query the
window keeps the room a ``--room-query``-token query leaves it. Scored on a dev part of
``training.evaluate_reranker`` (default ``squad-topics``: SQuAD paragraphs' first 50 words as queries, their
articles' other paragraphs relevant), BM25's top 20, the re-ranker alone; prints nDCG@10 as JSON. A query of at most
``--room-query`` tokens is read as shipped in every mode, so short-query parts do not change.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir.encoders.models import SHIPPED_CROSS_ENCODER, SHIPPED_MODELS  # noqa: E402
from training.common import DEFAULT_DATA_DIR  # noqa: E402

READINGS = ("cut", "query-whole", "grow")
MIN_WINDOW = 32  # tokens a window keeps beside the longest query; a longer query is read as shipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reading", choices=READINGS, default="cut")
    parser.add_argument("--model", default=str(SHIPPED_MODELS[SHIPPED_CROSS_ENCODER]))
    parser.add_argument(
        "--part", default="squad-topics", help="a --fusion-dev part of training.evaluate_reranker"
    )
    parser.add_argument(
        "--room-query", type=int, default=32, help="grow: query tokens the window's room is kept for"
    )
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)

    import torch

    from ctxir import kinds
    from ctxir.rerank.registry import load_reranker
    from training.evaluate_reranker import EvaluateRerankerArgs, dev_claims
    from training.fusion_choice import dev_ndcg
    from training.shared_scores import score_candidates

    torch.set_num_threads(1)
    # 1. the dev part (its own corpus, queries, qrels) and BM25's top 20
    settings = EvaluateRerankerArgs(
        model=args.model, fusion_dev=f"scifact,{args.part}", data_dir=args.data_dir
    )
    corpus, queries, qrels, first, _, parts = dev_claims(Path(args.model), settings)
    part = {args.part: parts[args.part]}
    queries = {q: text for q, text in queries.items() if q in parts[args.part][1]}
    # 2. the re-ranker, in torch so the per-call reading applies
    ranker = load_reranker(kinds.CROSS_ENCODER, args.model, device="cpu")
    ranker.backend = "torch"
    model, own = ranker.model, ranker.model.max_seq_length
    predict = model.predict

    def read(pairs, **kwargs):
        query_tokens = len(model.tokenizer(pairs[0][0], add_special_tokens=False)["input_ids"])
        length = own if args.reading == "query-whole" else own + max(0, query_tokens - args.room_query)
        if args.reading == "cut" or query_tokens <= args.room_query or query_tokens > length - 3 - MIN_WINDOW:
            return predict(pairs, **kwargs)
        text = {"max_length": min(length, 512), "truncation": "only_second"}
        return predict(pairs, processing_kwargs={"text": text}, **kwargs)

    # every pair of one call shares its query (CrossEncoderReranker scores query by query)
    model.predict = read
    # 3. score and report
    start = time.perf_counter()
    scored = score_candidates(ranker, queries, first, corpus, f"{args.part}, reading {args.reading}")
    run = {q: dict(scored[q]) for q in queries}
    print(
        json.dumps(
            {
                "part": args.part,
                "queries": len(queries),
                "reading": args.reading,
                "room_query": args.room_query,
                "nDCG@10 alone": round(dev_ndcg(qrels, run, part), 4),
                "seconds": round(time.perf_counter() - start),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
