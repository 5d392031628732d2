"""How well the shipped cross-encoder's calibration holds on pairs it was not fitted on (reporting only: it chooses
nothing, so a test split may be read).

    python scripts/calibration_heldout.py [--parts wikiqa-test,scifact-test] [--output docs/bench/calibration-heldout.json]

calibration.json (``python -m training.calibrate``) was fitted on dev pairs: the 50 held-out SciFact training claims'
BM25 top 20 and WikiQA dev; the quality its report gives (ECE 0.0057 after) is measured on those same pairs. Here
the same fitted p = sigmoid(scale · score + bias) is scored on pairs outside that fit, each read as ctxir reads them
(the folder's passages.json windows):

- ``wikiqa-test``: WikiQA's test questions with an answer, each with every sentence of its summary (labelled by
  WikiQA), as ``training.calibrate`` builds WikiQA dev;
- ``scifact-test``: SciFact test claims with BM25's top ``--depth`` (labelled by the test qrels), as the app
  re-ranks them.

Writes log loss, Brier score and expected calibration error (10 equal-width bins, ``ctxir.rerank.calibration``) per
part and overall, beside the fit's own report, with the machine and command.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PARTS = ("wikiqa-test", "scifact-test")


def part_pairs(part: str, reranker, data: Path, depth: int) -> tuple[list[float], list[int]]:
    """(scores, labels) of one held-out part, built as training.calibrate builds the fitted ones."""
    from ctxir.data import load_beir
    from training.calibrate import bm25_pairs, wikiqa_file_pairs

    if part == "wikiqa-test":
        return wikiqa_file_pairs(reranker, data / "general" / "wikiqa" / "WikiQA-test.tsv")
    corpus, queries, qrels = load_beir(data / "scifact", "test")
    return bm25_pairs(reranker, corpus, queries, qrels, depth)


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from ctxir.encoders.models import SHIPPED_CROSS_ENCODER, load_cross_encoder, set_threads
    from ctxir.files import write_json
    from ctxir.rerank import CrossEncoderReranker
    from ctxir.rerank.calibration import calibration_for, calibration_quality
    from ctxir.rerank.registry import passages_for
    from training.common import machine_info

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=SHIPPED_CROSS_ENCODER)
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated: {', '.join(PARTS)}")
    parser.add_argument("--depth", type=int, default=20, help="BM25 candidates per SciFact test claim")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--output", default=str(ROOT / "docs" / "bench" / "calibration-heldout.json"))
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        parser.error(f"--parts {bad[0]!r} is not one of {', '.join(PARTS)}")
    # 1. the model and its fitted calibration, reading long documents as its folder says
    set_threads(args.torch_threads)
    calibration = calibration_for(args.model)
    if calibration is None:
        parser.error(
            f"--model {args.model!r} has no calibration.json: fit one with python -m training.calibrate"
        )
    reranker = CrossEncoderReranker(
        load_cross_encoder(args.model, "cpu"), passages=passages_for(args.model), backend="torch"
    )
    # 2. score each held-out part, then 3. the fitted calibration's quality there
    start, data, report = time.perf_counter(), Path(args.data), {}
    scored = {}
    for part in parts:
        scored[part] = part_pairs(part, reranker, data, args.depth)
        s, y = scored[part]
        report[part] = {
            "pairs": len(y),
            "relevant": int(sum(y)),
            **calibration_quality(calibration.probabilities(s), np.asarray(y)),
        }
    every_s = [x for s, _ in scored.values() for x in s]
    every_y = [x for _, y in scored.values() for x in y]
    report["all"] = {
        "pairs": len(every_y),
        "relevant": int(sum(every_y)),
        **calibration_quality(calibration.probabilities(every_s), np.asarray(every_y)),
    }
    record = {
        "model": args.model,
        "calibration": {
            "scale": calibration.scale,
            "bias": calibration.bias,
            "fitted_on": calibration.fitted_on,
        },
        "on_the_fitted_pairs": calibration.report.get("after"),
        "held_out": report,
        "seconds": round(time.perf_counter() - start, 1),
        "machine": machine_info(),
        "command": "python scripts/calibration_heldout.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    write_json(args.output, record)
    print(report, "->", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
