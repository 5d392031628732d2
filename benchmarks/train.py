"""``python -m benchmarks.train``: cross-encoder optimiser steps per second against batch size and max length."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.common import (
    beir_texts,
    cell,
    figure,
    finish,
    load_average,
    main_for,
    markdown_table,
    numbers,
    resolve_model_path,
    save_figure,
    set_torch_threads,
)
from ctxir import CtxirError
from ctxir.cli import flag
from ctxir.data import load_beir
from ctxir.encoders.models import load_cross_encoder
from ctxir.types import doc_text


@dataclass
class TrainArgs:
    output: str = flag("", "JSON path (default: results/bench/train.json)")
    model: str = flag("", "body to train ('' = the packaged all-MiniLM-L6-v2 + a fresh 1-label head)")
    batch_sizes: str = "8,16,32"
    max_lengths: str = "128,256"
    steps: int = flag(4, "timed optimiser steps per setting")
    warmup_steps: int = flag(1, "untimed steps first")
    learning_rate: float = 2e-5
    threads: int = flag(0, "torch threads (0 = all cores)")
    data_root: str = "../shared/data"
    seed: int = 0
    progress: bool = True


def train_pairs(root: Path, count: int, seed: int) -> list[tuple[str, str, float]]:
    """(query, document, label): SciFact train queries with a judged document (1) or a random one (0)."""
    corpus, queries, qrels = load_beir(beir_texts(root, "scifact"), "train")
    rng = np.random.default_rng(seed)
    ids, qids, pairs = list(corpus), list(qrels), []
    while len(pairs) < count:
        q = qids[rng.integers(len(qids))]
        positive = [d for d, grade in qrels[q].items() if grade > 0 and d in corpus]
        if positive and len(pairs) % 2 == 0:
            pairs.append((queries[q], doc_text(corpus[positive[0]]), 1.0))
        else:
            pairs.append((queries[q], doc_text(corpus[ids[rng.integers(len(ids))]]), 0.0))
    return pairs


def run_train(args: TrainArgs, argv: list[str] | None = None) -> dict:
    import torch

    batch_sizes = numbers(args.batch_sizes, "--batch-sizes")
    lengths = numbers(args.max_lengths, "--max-lengths")
    if args.steps < 1 or args.warmup_steps < 0:
        raise CtxirError("--steps must be ≥ 1, --warmup-steps ≥ 0")
    load_before, started = load_average(), time.perf_counter()
    threads = set_torch_threads(args.threads)
    torch.manual_seed(args.seed)
    path = resolve_model_path(args.model)
    cross = load_cross_encoder(path, "cpu", num_labels=1)
    model, tokenizer = cross.model, cross.tokenizer
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    pairs = train_pairs(Path(args.data_root), max(batch_sizes) * (args.steps + args.warmup_steps), args.seed)
    results: dict = {}
    for max_length in lengths:
        for batch_size in batch_sizes:
            times, tokens, cursor = [], [], 0
            for step in range(args.warmup_steps + args.steps):
                batch = pairs[cursor : cursor + batch_size]
                cursor += batch_size
                start = time.perf_counter()
                queries, documents = [p[0] for p in batch], [p[1] for p in batch]
                features = tokenizer(
                    queries,
                    documents,
                    padding=True,
                    truncation=True,
                    max_length=max_length,
                    return_tensors="pt",
                )
                logits = model(**features).logits.view(-1)
                loss = loss_fn(logits, torch.tensor([p[2] for p in batch]))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if step >= args.warmup_steps:
                    times.append(time.perf_counter() - start)
                    tokens.append(int(features["attention_mask"].sum()))
            step_s = float(np.median(times))
            label = f"max_length {max_length}, batch {batch_size}"
            results[label] = {
                "max_length": max_length,
                "batch_size": batch_size,
                "step_s": round(step_s, 4),
                "pairs_per_s": round(batch_size / step_s, 1),
                "tokens_per_s": round(float(np.median(tokens)) / step_s),
                "steps_s": [round(t, 4) for t in times],
            }
            if args.progress:
                print(f"{label}: {results[label]['pairs_per_s']} pairs/s", flush=True)
    data = {
        "model": path if args.model else f"{path} + a fresh 1-label head",
        "pairs": "SciFact train queries with a "
        f"judged abstract (label 1) or a random one (label 0), alternating (seed {args.seed})",
    }
    timing = (
        f"one optimiser step = tokenise + forward + BCE-with-logits loss + backward + AdamW (lr "
        f"{args.learning_rate}), what CrossEncoderTrainer runs per step without its data loader and logging; "
        f"{args.warmup_steps} warm-up step(s), median of {args.steps} timed steps; {threads} threads"
    )
    return finish("train", format_train, args, argv, load_before, started, results, data=data, timing=timing)


def format_train(record: dict) -> str:
    columns = (("max_length", "{}"), ("batch_size", "{}"), ("pairs_per_s", "{:.1f}"), ("tokens_per_s", "{:,}"),
               ("step_s", "{:.2f}"))  # fmt: skip
    rows = [[cell(r[k], f) for k, f in columns] for r in record["results"].values()]
    return markdown_table(["max length", "batch", "pairs/s", "tokens/s", "step s"], rows)


def plot_train(records: list[dict], path: str) -> None:
    import matplotlib.ticker

    plt, fig, ax = figure(4.8, 3.2, 1)
    rows = list(records[-1]["results"].values())
    for length in sorted({r["max_length"] for r in rows}):
        sub = [r for r in rows if r["max_length"] == length]
        ax.plot(
            [r["batch_size"] for r in sub],
            [r["pairs_per_s"] for r in sub],
            "o-",
            label=f"max length {length}",
        )
    ticks = sorted({r["batch_size"] for r in rows})
    ax.set(xlabel="batch size", ylabel="training pairs/s", xscale="log", xticks=ticks)
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.legend(fontsize=8)
    save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    return main_for("train", TrainArgs, run_train, argv)


if __name__ == "__main__":
    sys.exit(main())
