"""Write a large MS MARCO-like BEIR folder, and its embeddings straight into ctxir's cache, without the model.

    HF_HUB_OFFLINE=1 python -m benchmarks.synthetic_corpus --num-docs 1000000   # → outputs/synthetic-1m/

For start-up and index measurements at a size the bi-encoder cannot encode on a CPU. What is written:

* ``corpus.jsonl``: the real passages of ``msmarco_sample`` and ``scifact`` (ids prefixed ``m-`` / ``s-``), then
  synthetic passages of 2–5 real sentences each (40–90 words) up to ``--num-docs``: real vocabulary for BM25.
* ``queries.jsonl`` + ``qrels/test.tsv``: the real queries and judgments of both sets (prefixed ids).
* ``cache/embeddings/<key>.npy``: one unit vector per passage under the key ``BiEncoder().cache_key(texts)``
  gives. Real passages get their real embedding; a synthetic one, the embedding of its first sentence's passage
  plus Gaussian noise (``--noise``), as ``benchmarks.search`` builds them. Dense results on them measure speed and
  recall, not quality.
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

from benchmarks.common import opt
from ctxir.cli import cli_main
from ctxir.data import load_beir, load_corpus, write_beir
from ctxir.encoders import BiEncoder, EmbeddingCache
from ctxir.files import atomic_path, write_atomic
from ctxir.types import CtxirError, doc_text

ROOT = Path(__file__).resolve().parents[1]

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


def normalise(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True).clip(min=1e-12)
    return x


def real_sets(root: Path):
    """(prefixed corpus, prefixed queries, prefixed test qrels) of both real sets, in a fixed order."""

    corpus, queries, qrels = {}, {}, {}
    for prefix, name in SOURCES:
        folder = root / name
        if not (folder / "corpus.jsonl").is_file():
            raise CtxirError(
                f"--data-root {str(root)!r} has no {name}/corpus.jsonl: point it at the shared data "
                "folder (the one holding msmarco_sample/ and scifact/)"
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


def covariance_noise(centres: np.ndarray, noise: float):
    """A sampler of (n, dim) Gaussian noise with the centres' covariance, scaled so E|u|² = noise²."""
    mean = centres.mean(0)
    _, singular, vt = np.linalg.svd(centres - mean, full_matrices=False)
    scale = singular / np.sqrt(len(centres))  # (dim,) standard deviation along each principal direction
    scale *= noise / np.sqrt((scale**2).sum())
    scale, vt = scale.astype(np.float32), vt.astype(np.float32)

    def sample(n: int, rng: np.random.Generator) -> np.ndarray:
        return (rng.standard_normal((n, len(scale)), dtype=np.float32) * scale) @ vt  # (n, dim)

    return sample


def run(args: SyntheticArgs) -> dict:
    from tqdm.auto import tqdm

    started = time.perf_counter()
    out = Path(args.output)
    rng = np.random.default_rng(args.seed)
    corpus, queries, qrels = real_sets(Path(args.data_root))
    if args.num_docs < len(corpus):
        raise CtxirError(
            f"--num-docs {args.num_docs!r} is below the {len(corpus):,} real passages: ask for at least "
            "that many"
        )
    # 1. real embeddings (the model, through the normal ~/.cache/ctxir cache: encoded once, then read)
    # per set, as `python -m benchmarks.search` encodes them, so both share the cached vectors
    encoder = BiEncoder(device="cpu")
    real_vectors = np.concatenate(
        [
            encoder.encode_corpus(load_corpus(Path(args.data_root) / name / "corpus.jsonl"), args.progress)[1]
            for _, name in SOURCES
        ]
    )  # (10,183, 384)
    # 2. the corpus file: real passages, then synthetic ones
    sentences, sentence_rows = sentence_pool(corpus)
    centre_of = np.empty(
        args.num_docs - len(corpus), dtype=np.int64
    )  # synthetic passage → real row of its centre

    def rows():  # streamed: a million passages are never held at once; each one's centre noted as it goes
        yield from corpus.items()
        for i, (text, first) in enumerate(synthetic_passages(sentences, len(centre_of), rng, args.progress)):
            centre_of[i] = sentence_rows[first]
            yield f"syn-{i:07d}", {"title": "", "text": text}

    write_beir(out, rows(), queries, qrels, "test")
    # 3. the embeddings, under the key the encoder computes for the texts as ctxir reads them back
    texts = [doc_text(d) for d in load_corpus(out / "corpus.jsonl").values()]
    cache = EmbeddingCache(out / "cache" / "embeddings")
    key = BiEncoder(encoder.model, cache=cache).cache_key(texts)
    sample = covariance_noise(real_vectors, args.noise)
    chunk = 100_000
    with atomic_path(cache.root / f"{key}.npy", suffix=".npy") as tmp:
        matrix = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=np.float32, shape=(len(texts), real_vectors.shape[1])
        )
        matrix[: len(corpus)] = real_vectors
        for begin in tqdm(
            range(0, len(centre_of), chunk),
            desc="synthetic embeddings",
            unit="chunk",
            disable=not args.progress,
        ):
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
