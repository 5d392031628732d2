"""Silver STS pairs (Augmented SBERT): STS-B train sentences paired with neighbours and random others, labelled by a
teacher bi-encoder's cosine mapped onto the gold scale (isotonic regression).

    python -m training.silver_pairs --teacher outputs/bi-encoder-stsb-cosent --output outputs/silver-stsb.csv
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

if __package__ in (None, ""):  # `python training/silver_pairs.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.cli import flag
from ctxir.files import write_json
from ctxir.types import CtxirError
from training.common import DEFAULT_DATA_DIR, cli_main, data_folder


@dataclass
class SilverPairsArgs:
    teacher: str = flag("", "the bi-encoder that labels the pairs, e.g. outputs/bi-encoder-stsb-cosent")
    output: str = flag("outputs/silver-stsb.csv", "the CSV to write")
    data_dir: str = flag(DEFAULT_DATA_DIR, "benchmark data root (../shared/data)")
    neighbours: int = flag(2, "nearest other sentences paired with each sentence")
    random: int = flag(1, "random other sentences paired with each sentence")
    max_sentences: int = flag(-1, "use N train sentences, seeded (-1 = all)")
    batch_size: int = 64
    device: str = "auto"
    seed: int = 42


def sample_pairs(
    embeddings: np.ndarray,
    neighbours: int,
    random: int,
    seed: int,
    exclude: set[frozenset[int]] = frozenset(),
) -> list[tuple[int, int]]:
    """Index pairs (i, j), i ≠ j, each unordered pair once and none in ``exclude``: every row of ``embeddings``
    (normalised, (n, dim)) with its ``neighbours`` most similar untaken other rows and ``random`` others (seeded).

    >>> e = np.eye(3, dtype=np.float32)[[0, 0, 1, 2]]  # rows 0 and 1 are the same vector
    >>> sample_pairs(e, neighbours=1, random=0, seed=0)  # row 1's nearest, row 0, is taken: it pairs with row 2
    [(0, 1), (1, 2), (2, 0), (3, 0)]
    >>> sample_pairs(e, neighbours=1, random=0, seed=0, exclude={frozenset((0, 1))})
    [(0, 2), (1, 2), (2, 3), (3, 0)]
    """
    n = len(embeddings)
    if n < 2:
        raise CtxirError(f"sample_pairs needs at least 2 sentences, got {n}: use more train sentences")
    rng = np.random.default_rng(seed)
    seen, out = set(exclude), []

    def add(i: int, j: int) -> bool:
        key = frozenset((i, j))
        if i == j or key in seen:
            return False
        seen.add(key)
        out.append((i, j))
        return True

    for start in range(0, n, 1024):
        sims = embeddings[start : start + 1024] @ embeddings.T  # (block, n)
        order = np.argsort(-sims, axis=1, kind="stable")
        for row, i in enumerate(range(start, min(start + 1024, n))):
            taken = 0
            for j in order[row]:
                if taken == neighbours:
                    break
                taken += add(i, int(j))
    for i in range(n):
        for _ in range(random):
            for _try in range(10):  # a collision (itself, a gold or repeated pair) draws again
                if add(i, int(rng.integers(n))):
                    break
    return out


def run(args: SilverPairsArgs) -> dict:
    """Write the silver pairs' CSV and, beside it, its record (.json); returns the record."""
    from scipy.stats import spearmanr
    from sklearn.isotonic import IsotonicRegression

    from ctxir.data import load_sts
    from ctxir.encoders.models import load_bi_encoder
    from training.common import take

    if not args.teacher:
        raise CtxirError(
            "--teacher is required: the bi-encoder that labels the pairs, e.g. "
            "outputs/bi-encoder-stsb-cosent (python training/train_bi_encoder.py --task stsb)"
        )
    if args.neighbours < 0 or args.random < 0 or args.neighbours + args.random == 0:
        raise CtxirError(
            f"--neighbours {args.neighbours!r} --random {args.random!r}: need both ≥ 0 and at least one "
            "positive, e.g. --neighbours 2 --random 1"
        )
    # 1. gold train pairs: their sentences are the pool, their labels fit the calibration
    folder = data_folder(args.data_dir, "stsb")
    gold = load_sts(folder, "train")
    distinct = list(dict.fromkeys(s for a, b, _ in gold for s in (a, b)))
    row = {s: i for i, s in enumerate(distinct)}
    pool = np.array(sorted(row[s] for s in take(distinct, args.max_sentences, args.seed)))  # of distinct
    print(
        f"{len(gold):,} gold train pairs, {len(distinct):,} distinct sentences, {len(pool):,} paired",
        flush=True,
    )
    # 2. teacher embeddings of every distinct sentence, (n, dim), normalised
    teacher = load_bi_encoder(args.teacher, args.device)
    vectors = teacher.encode(
        distinct, batch_size=args.batch_size, normalize_embeddings=True, show_progress_bar=True
    )
    embeddings = np.asarray(vectors, dtype=np.float32)
    # 3. sample pairs in the pool (indices into it), gold pairs left out
    at = {int(r): k for k, r in enumerate(pool)}
    gold_pairs = {frozenset((at[row[a]], at[row[b]])) for a, b, _ in gold if row[a] in at and row[b] in at}
    pairs = [
        (int(pool[i]), int(pool[j]))
        for i, j in sample_pairs(embeddings[pool], args.neighbours, args.random, args.seed, gold_pairs)
    ]
    # 4. calibrate on the gold pairs: teacher cosine → gold / 5, monotone, so the teacher's order is kept
    gold_cos = np.array([float(embeddings[row[a]] @ embeddings[row[b]]) for a, b, _ in gold])
    gold_y = np.array([s / 5.0 for _, _, s in gold])
    calibration = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(gold_cos, gold_y)
    labels = calibration.predict(np.array([float(embeddings[i] @ embeddings[j]) for i, j in pairs]))
    # 5. write
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [(distinct[i], distinct[j], y) for (i, j), y in zip(pairs, labels, strict=True)]
    pd.DataFrame(rows, columns=["sentence1", "sentence2", "score"]).to_csv(
        out, index=False, float_format="%.4f"
    )
    record = {
        "command": "python -m training.silver_pairs " + " ".join(sys.argv[1:]),
        "teacher": args.teacher,
        "source": {"dataset": "stsb", "split": "train", "path": str(folder)},
        "sentences": len(pool),
        "pairs": len(pairs),
        "neighbours": args.neighbours,
        "random": args.random,
        "seed": args.seed,
        "teacher_on_gold_train": {
            "spearman": round(float(spearmanr(gold_cos, gold_y)[0]), 4),
            "calibrated_mse": round(float(np.mean((calibration.predict(gold_cos) - gold_y) ** 2)), 4),
        },
        "label_mean": round(float(labels.mean()), 4),
        "label_std": round(float(labels.std()), 4),
    }
    write_json(out.with_suffix(out.suffix + ".json"), record)
    print(
        f"{len(pairs):,} silver pairs → {out} (label mean {record['label_mean']}, std {record['label_std']})"
    )
    return record


def main(argv: list[str] | None = None) -> int:
    return cli_main(SilverPairsArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
