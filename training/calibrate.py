"""Fit a cross-encoder's calibration (raw pair score → probability of relevance, Platt scaling) on held-out
SciFact claims and WikiQA dev: calibration.json.

    python -m training.calibrate --model outputs/ce-general-stage5
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # `python training/calibrate.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.cli import flag
from ctxir.files import read_json
from ctxir.types import CtxirError
from training.common import DEFAULT_DATA_DIR, cli_main, data_folder


@dataclass
class CalibrateArgs:
    model: str = field(
        metadata={"help": "cross-encoder folder (a train_cross_encoder.py output or a shipped one)"}
    )
    dev_from: str = flag("", "folder whose metrics.json names the held-out training claims (default --model)")
    data_dir: str = flag(DEFAULT_DATA_DIR, "benchmark data root (../shared/data)")
    depth: int = flag(20, "BM25 candidates per held-out claim (the app re-ranks 20)")
    batch_size: int = 32
    device: str = "auto"
    torch_threads: int = flag(1, "CPU threads for torch (0 = torch's default)")


def scifact_pairs(reranker, args: CalibrateArgs) -> tuple[list[float], list[int]]:
    """(scores, labels) of the held-out claims' BM25 candidates, each read as the model reads documents."""
    from ctxir.data import load_beir

    source = Path(args.dev_from or args.model)
    dev = list(((read_json(source / "metrics.json") or {}).get("extra") or {}).get("heldout_query_ids") or [])
    if not dev:
        raise CtxirError(
            f"{str(source / 'metrics.json')!r} names no held-out training claims: pass --dev-from the "
            "folder of a model trained with --dev-queries N"
        )
    corpus, queries, qrels = load_beir(data_folder(args.data_dir, "scifact"), "train")
    return bm25_pairs(reranker, corpus, {q: queries[q] for q in dev}, qrels, args.depth)


def bm25_pairs(reranker, corpus, queries, qrels, depth: int) -> tuple[list[float], list[int]]:
    """(scores, labels) of each query's BM25 top ``depth``, each document read as the model reads it."""
    from ctxir.retrieval import BM25Retriever

    hits = BM25Retriever(corpus).search(queries, depth)
    scores, labels = [], []
    for q, text in queries.items():
        for hit in reranker._rerank(text, hits[q], corpus):
            scores.append(hit.score)
            labels.append(int(qrels.get(q, {}).get(hit.doc_id, 0) > 0))
    return scores, labels


def wikiqa_pairs(reranker, args: CalibrateArgs) -> tuple[list[float], list[int]]:
    """(scores, labels) of WikiQA dev: every answered question with each sentence of its summary."""
    return wikiqa_file_pairs(reranker, Path(args.data_dir) / "general" / "wikiqa" / "WikiQA-dev.tsv")


def wikiqa_file_pairs(reranker, path: Path) -> tuple[list[float], list[int]]:
    """(scores, labels) of one WikiQA file: every answered question with each sentence of its summary."""
    from ctxir.data.general import load_wikiqa
    from ctxir.types import doc_text

    split = load_wikiqa(path)
    scores, labels = [], []
    for q, text in split.queries.items():
        docs = [*split.qrels[q], *split.negatives[q]]
        scores += [float(s) for s in reranker.score_pairs(text, [doc_text(split.corpus[d]) for d in docs])]
        labels += [int(d in split.qrels[q]) for d in docs]
    return scores, labels


def run(args: CalibrateArgs) -> dict:
    import numpy as np

    from ctxir.encoders.models import load_cross_encoder, set_threads
    from ctxir.rerank import CrossEncoderReranker, fit_calibration
    from ctxir.rerank.calibration import calibration_quality
    from ctxir.rerank.registry import passages_for

    if args.torch_threads:
        set_threads(args.torch_threads)
    # 1. load the model, reading long documents as its folder says (passages.json)
    reranker = CrossEncoderReranker(
        load_cross_encoder.__wrapped__(args.model, args.device),
        batch_size=args.batch_size,
        passages=passages_for(args.model),
        backend="torch",
    )
    # 2. score the dev pairs
    parts = {"scifact-heldout": scifact_pairs(reranker, args), "wikiqa-dev": wikiqa_pairs(reranker, args)}
    scores = [s for part, _ in parts.values() for s in part]
    labels = [y for _, part in parts.values() for y in part]
    # 3. fit, and report each source's quality under the one fit
    described = ", ".join(
        f"{name} ({len(part[0])} pairs, {sum(part[1])} relevant)" for name, part in parts.items()
    )
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
