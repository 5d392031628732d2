"""How much does the order of tied hits move a first stage's nDCG@10? A dev-only check (no test collection is read).

    python scripts/tie_order.py            # the hybrid over the dev parts (held-out SciFact claims, SQuAD questions)

The hybrid first stage is a rank fusion (RRF), so many of its hits tie. trec_eval orders equal scores by doc id,
descending (``evaluate_run(..., ties="trec_eval")``); ctxir's ``evaluate_run`` orders them as the run lists them
(``ties="listed"``, its default), which is the order the app shows. Prints each dev part's nDCG@10 both ways, and how
many of the hits tie, as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir.encoders.models import SHIPPED_CROSS_ENCODER, SHIPPED_MODELS  # noqa: E402
from training.common import DEFAULT_DATA_DIR  # noqa: E402

RULES = {"trec_eval tie order (doc id descending)": "trec_eval", "the list's own order": "listed"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first-stage", default="hybrid", choices=("bm25", "dense", "hybrid"))
    parser.add_argument(
        "--model",
        default=str(SHIPPED_MODELS[SHIPPED_CROSS_ENCODER]),
        help="the cross-encoder whose held-out training claims are the dev (its metrics.json names them)",
    )
    parser.add_argument(
        "--dev", default="scifact,squad", help="--fusion-dev parts of training.evaluate_reranker"
    )
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)

    from ctxir.evaluation import evaluate_run
    from ctxir.types import run_from_hits
    from training import evaluate_reranker as er

    # 1. the dev parts and the first stage's top hits over each part's own corpus
    settings = er.EvaluateRerankerArgs(model=args.model, fusion_dev=args.dev, data_dir=args.data_dir)
    _, _, qrels, _, _, parts = er.dev_claims(Path(args.model), settings)
    hits = er._dev_candidates(parts, [args.first_stage], args.depth)[args.first_stage]
    # 2. each part scored both ways
    run = run_from_hits(hits)
    tied = sum(len(hs) - len({h.score for h in hs}) for hs in hits.values())
    out = {
        "first_stage": args.first_stage,
        "depth": args.depth,
        "hits": sum(len(hs) for hs in hits.values()),
        "hits_tied_with_an_earlier_one": tied,
        "nDCG@10": {
            name: {
                rule: round(
                    float(
                        evaluate_run(
                            {q: qrels[q] for q in part[1]}, {q: run.get(q, {}) for q in part[1]}, ties=ties
                        ).aggregate["nDCG@10"]
                    ),
                    4,
                )
                for rule, ties in RULES.items()
            }
            for name, part in parts.items()
        },
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
