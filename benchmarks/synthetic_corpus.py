"""``python -m benchmarks.synthetic_corpus --num-docs 1000000``: a large MS MARCO-like BEIR folder and its
embeddings, written straight into ctxir's cache without the model, for start-up and index measurements.

The real passages of msmarco_sample and scifact, then synthetic ones of 2–5 real sentences (real vocabulary for
BM25), each embedded as its first sentence's passage plus noise: dense results measure speed and recall, not quality.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.common import covariance_noise, normalise, opt
from ctxir.cli import cli_main
from ctxir.data import load_beir, load_corpus, write_beir
from ctxir.encoders import BiEncoder, EmbeddingCache
from ctxir.files import atomic_path, write_atomic
from ctxir.types import CtxirError, doc_text

SOURCES = (("m-", "msmarco_sample"), ("s-", "scifact"))
# A sentence: text up to . ! or ? followed by a space (or the end); short fragments are dropped below.
SENTENCE = re.compile(r"[^.!?]+[.!?]+(?=\s|$)")


@dataclass
class SyntheticArgs:
    num_docs: int = opt(1_000_000, "passages in all (the real ones first)")
    output: str = opt("outputs/synthetic-1m", "folder written (BEIR layout + cache/)")
    data_root: str = opt("../shared/data", "folder holding msmarco_sample/ and scifact/")
    noise: float = opt(1.0, "rms norm of the noise added to a real embedding")
    seed: int = 0
    progress: bool = opt(True, "progress bars")


def real_sets(root: Path):
    """(prefixed corpus, prefixed queries, prefixed test qrels) of both real sets, in a fixed order."""
    corpus, queries, qrels = {}, {}, {}
    for prefix, name in SOURCES:
        folder = root / name
        if not (folder / "corpus.jsonl").is_file():
            raise CtxirError(
                f"--data-root {str(root)!r} has no {name}/corpus.jsonl: point it at the shared data folder"
            )
        part = load_corpus(folder / "corpus.jsonl")
        corpus |= {prefix + doc_id: doc for doc_id, doc in part.items()}
        _, part_queries, part_qrels = load_beir(folder, "test")
        queries |= {prefix + q: text for q, text in part_queries.items()}
        qrels |= {prefix + q: {prefix + d: s for d, s in judged.items()} for q, judged in part_qrels.items()}
    return corpus, queries, qrels


def sentence_pool(corpus: dict) -> tuple[list[str], np.ndarray]:
    """Every real sentence of 4+ words and the row (passage) it came from."""
    sentences, rows = [], []
    for row, doc in enumerate(corpus.values()):
        for sentence in SENTENCE.findall(doc["text"]):
            sentence = sentence.strip()
            if len(sentence.split()) >= 4:
                sentences.append(sentence)
                rows.append(row)
    return sentences, np.asarray(rows, dtype=np.int64)


def synthetic_passages(sentences: list[str], count: int, rng: np.random.Generator, progress: bool):
    """``count`` (text, index of its first sentence): 2–5 random sentences, 40–90 words."""
    from tqdm.auto import tqdm

    lengths = np.array([len(s.split()) for s in sentences])
    for _ in tqdm(range(count), desc="synthetic passages", unit="doc", disable=not progress, mininterval=1.0):
        first = int(rng.integers(len(sentences)))
        parts, words = [sentences[first]], int(lengths[first])
        target = int(rng.integers(40, 91))
        while words < target and len(parts) < 5:
            other = int(rng.integers(len(sentences)))
            parts.append(sentences[other])
            words += int(lengths[other])
        yield " ".join(parts), first


def run(args: SyntheticArgs) -> dict:
    from tqdm.auto import tqdm

    started = time.perf_counter()
    out = Path(args.output)
    rng = np.random.default_rng(args.seed)
    corpus, queries, qrels = real_sets(Path(args.data_root))
    if args.num_docs < len(corpus):
        raise CtxirError(
            f"--num-docs {args.num_docs!r} is below the {len(corpus):,} real passages: ask for more"
        )
    # per set, as `python -m benchmarks.search` encodes them, so both share the cached vectors
    encoder = BiEncoder(device="cpu")
    real = [load_corpus(Path(args.data_root) / name / "corpus.jsonl") for _, name in SOURCES]
    real_vectors = np.concatenate([encoder.encode_corpus(c, args.progress)[1] for c in real])  # (10,183, 384)
    sentences, sentence_rows = sentence_pool(corpus)
    centre_of = np.empty(args.num_docs - len(corpus), dtype=np.int64)  # synthetic passage → its centre's row

    def rows():  # streamed: a million passages are never held at once; each one's centre noted as it goes
        yield from corpus.items()
        for i, (text, first) in enumerate(synthetic_passages(sentences, len(centre_of), rng, args.progress)):
            centre_of[i] = sentence_rows[first]
            yield f"syn-{i:07d}", {"title": "", "text": text}

    write_beir(out, rows(), queries, qrels, "test")
    # the embeddings, under the key the encoder computes for the texts as ctxir reads them back
    texts = [doc_text(d) for d in load_corpus(out / "corpus.jsonl").values()]
    cache = EmbeddingCache(out / "cache" / "embeddings")
    key = BiEncoder(encoder.model, cache=cache).cache_key(texts)
    sample = covariance_noise(real_vectors, args.noise)
    chunk = 100_000
    with atomic_path(cache.root / f"{key}.npy", suffix=".npy") as tmp:
        shape = (len(texts), real_vectors.shape[1])
        matrix = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
        matrix[: len(corpus)] = real_vectors
        steps = range(0, len(centre_of), chunk)
        for begin in tqdm(steps, desc="synthetic embeddings", unit="chunk", disable=not args.progress):
            centres = centre_of[begin : begin + chunk]
            block = normalise(real_vectors[centres] + sample(len(centres), rng))
            matrix[len(corpus) + begin : len(corpus) + begin + len(centres)] = block
        matrix.flush()
        del matrix
    record = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "num_docs": len(texts),
        "real_docs": len(corpus),
        "queries": len(queries),
        "embedding_key": key,
        "noise": args.noise,
        "seed": args.seed,
        "seconds": round(time.perf_counter() - started, 1),
        "load_average": os.getloadavg(),
    }
    write_atomic(out / "synthetic.json", json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))
    return record


def main(argv: list[str] | None = None) -> int:
    return cli_main(SyntheticArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
