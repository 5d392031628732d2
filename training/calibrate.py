"""Fit a cross-encoder's calibration (raw pair score → probability of relevance, Platt scaling) on held-out
SciFact claims and WikiQA dev: calibration.json.

    python -m training.calibrate --model outputs/ce-general-stage5
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python training/calibrate.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.cli import flag
from training.common import DEFAULT_DATA_DIR, cli_main
from training.fusion_choice import heldout_claims, load_reranker


@dataclass
class CalibrateArgs:
    model: str = flag(help="cross-encoder folder (a train_cross_encoder.py output or a shipped one)")
    dev_from: str = flag("", "folder whose metrics.json names the held-out training claims (default --model)")
    data_dir: str = flag(DEFAULT_DATA_DIR, "benchmark data root (../shared/data)")
    depth: int = flag(20, "BM25 candidates per held-out claim (the app re-ranks 20)")
    batch_size: int = 32
    device: str = "auto"
    torch_threads: int = flag(1, "CPU threads for torch (0 = torch's default)")


def run(args: CalibrateArgs) -> dict:
    import numpy as np

    from ctxir.data.general import load_wikiqa
    from ctxir.encoders.models import set_threads
    from ctxir.rerank import fit_calibration
    from ctxir.rerank.calibration import calibration_quality
    from ctxir.retrieval import BM25Retriever
    from ctxir.types import doc_text

    set_threads(args.torch_threads)
    # 1. load the model, reading long documents as its folder says (passages.json)
    reranker = load_reranker(args.model, args.device, args.batch_size)
    # 2. score the dev pairs: the held-out claims' BM25 candidates; each WikiQA dev question with its summary's sentences
    parts = {"scifact-heldout": ([], []), "wikiqa-dev": ([], [])}  # (scores, labels)
    corpus, queries, qrels, _ = heldout_claims(Path(args.dev_from or args.model), args.data_dir)
    hits = BM25Retriever(corpus).search(queries, args.depth)
    for q, text in queries.items():
        for hit in reranker._rerank(text, hits[q], corpus):
            parts["scifact-heldout"][0].append(hit.score)
            parts["scifact-heldout"][1].append(int(qrels[q].get(hit.doc_id, 0) > 0))
    wikiqa = load_wikiqa(Path(args.data_dir) / "general" / "wikiqa" / "WikiQA-dev.tsv")
    for q, text in wikiqa.queries.items():
        docs = [*wikiqa.qrels[q], *wikiqa.negatives[q]]
        parts["wikiqa-dev"][0].extend(reranker.score_pairs(text, [doc_text(wikiqa.corpus[d]) for d in docs]))
        parts["wikiqa-dev"][1].extend(int(d in wikiqa.qrels[q]) for d in docs)
    # 3. fit, and report each source's quality under the one fit
    described = ", ".join(f"{name} ({len(s)} pairs, {sum(y)} relevant)" for name, (s, y) in parts.items())
    scores, labels = ([v for part in parts.values() for v in part[i]] for i in (0, 1))
    calibration = fit_calibration(scores, labels, fitted_on=f"dev pairs: {described}")
    calibration.report["sources"] = {
        name: calibration_quality(calibration.probabilities(s), np.asarray(y))
        for name, (s, y) in parts.items()
    }
    path = calibration.save(args.model)
    print(
        f"calibration: p = sigmoid({calibration.scale:.4f} · score + {calibration.bias:.4f}); "
        f"{calibration.report} -> {path}"
    )
    return {"scale": calibration.scale, "bias": calibration.bias, "report": calibration.report}


def main(argv: list[str] | None = None) -> int:
    return cli_main(CalibrateArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
