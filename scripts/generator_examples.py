"""What a query generator writes for documents of a corpus: a few documents drawn with a seed, queries sampled at
GPL's top-p 0.95 and at narrower nuclei (reporting only: a look at whether its queries name their passage's terms).

    python scripts/generator_examples.py outputs/query-generator [--corpus ../shared/data/scifact] \
        [--documents 6] [--per-doc 2] [--top-p 0.95,0.7,0.3] [--output docs/bench/query-generator-examples.json]

The generator is either kind ``ctxir adapt --generator`` takes (``ctxir.adapt.generator.load_generator``); each
document is read as ``ctxir adapt`` reads it (title, then text).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def run(args: argparse.Namespace) -> dict:
    from ctxir.adapt.generator import generate_queries, load_generator
    from ctxir.data.user_corpus import load_corpus_any
    from ctxir.types import doc_text

    # 1. the generator and the documents (drawn with --seed)
    model, tokenizer = load_generator(args.generator)
    corpus = load_corpus_any(args.corpus)
    doc_ids = random.Random(args.seed).sample(sorted(corpus), args.documents)
    texts = [doc_text(corpus[d]) for d in doc_ids]

    # 2. queries at each nucleus
    record = {"generator": args.generator, "corpus": args.corpus, "seed": args.seed, "documents": []}
    by_p = {
        p: generate_queries(model, tokenizer, texts, args.per_doc, seed=args.seed, top_p=p)
        for p in args.top_p
    }
    for i, doc_id in enumerate(doc_ids):
        title = corpus[doc_id].get("title") or texts[i][:100]
        record["documents"].append(
            {"doc_id": doc_id, "title": title, "queries": {p: q[i] for p, q in by_p.items()}}
        )
        print(f"{title[:100]}")
        for p, q in by_p.items():
            print(f"   top-p {p}: {q[i]}")

    # 3. the record
    if args.output:
        Path(args.output).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        print(f"wrote {args.output}")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("generator", help="a Hub id or the folder training/train_query_generator.py wrote")
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--documents", type=int, default=6)
    parser.add_argument("--per-doc", type=int, default=2)
    parser.add_argument("--top-p", type=lambda s: [float(p) for p in s.split(",")], default=[0.95, 0.7, 0.3])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="", help="a JSON file for the record ('' = print only)")
    run(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
