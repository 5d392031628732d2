"""Recall of ctxir.retrieval.ann's index against exact search on a real BEIR set's own embeddings, by cells scanned.

    HF_HUB_OFFLINE=1 python -m benchmarks.ann_recall --data ../shared/data/scifact --nprobe 0,96,132

For each ``--nprobe`` (0 = ``ctxir.retrieval.ann``'s default) and depth k in ``--depths``: the mean share of the
exact top-k (a full dot-product scan of the same cached, normalised corpus embeddings) that the index returns,
over the split's queries. No relevance judgments are used: this measures the index against exact search, not
retrieval quality. Corpus embeddings come from ctxir's cache (encoded once by the packaged all-MiniLM-L6-v2 if absent).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from benchmarks.common import command_line, main_for


@dataclass
class RecallArgs:
    data: str = field(default="../shared/data/scifact", metadata={"help": "BEIR folder"})
    split: str = "test"
    nprobe: str = field(
        default="0", metadata={"help": "comma-separated cells scanned per query (0 = the default)"}
    )
    rescore: int = field(
        default=4, metadata={"help": "re-score rescore × k candidates with the float vectors"}
    )
    depths: str = field(default="10,100", metadata={"help": "comma-separated k"})


def run(args: RecallArgs, argv: list[str] | None = None) -> int:
    from ctxir.data import load_beir
    from ctxir.encoders import BiEncoder
    from ctxir.retrieval.ann import AnnIndex, AnnParams

    corpus, queries, _ = load_beir(args.data, args.split)
    encoder = BiEncoder(device="cpu")
    docs = np.asarray(encoder.encode_corpus(corpus, show_progress_bar=True)[1])  # (docs, 384), unit rows
    vectors = encoder.encode(list(queries.values()))  # (queries, 384)
    scores = vectors @ docs.T  # (queries, docs): exact
    rows = []
    for nprobe in (int(n) for n in args.nprobe.split(",")):
        index = AnnIndex.build(docs, AnnParams(nprobe=nprobe, rescore=args.rescore), show_progress=False)
        for k in (int(d) for d in args.depths.split(",")):
            truth = np.argsort(-scores, axis=1)[:, :k]
            found = index.search(vectors, k)[0]
            recall = float(
                np.mean(
                    [len(set(f) & set(t)) / k for f, t in zip(found.tolist(), truth.tolist(), strict=True)]
                )
            )
            rows.append(
                {
                    "documents": len(docs),
                    "nlist": index.params.nlist,
                    "nprobe": index.params.nprobe,
                    "rescore": args.rescore,
                    "k": k,
                    "recall_vs_exact": round(recall, 4),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print(
        json.dumps(
            {
                "command": command_line("ann_recall", argv),
                "queries": len(queries),
                "load_average": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return main_for("ann_recall", RecallArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
