"""``python -m benchmarks.encode``: encoding throughput of the fast paths against plain sentence-transformers, and
what each costs in SciFact nDCG@10; a fast path ships as a flag at ≥ 1.5× with ≤ 0.005 loss (``ship_decision``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
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
    resolve_model_path,
    save_figure,
    set_torch_threads,
    sgemm_gflops,
)
from ctxir import CtxirError
from ctxir.cli import flag
from ctxir.data import load_beir, load_corpus
from ctxir.encoders import BiEncoder, EmbeddingCache, cache_root, weights_fingerprint
from ctxir.evaluation import evaluate_run
from ctxir.types import doc_text

ENCODE_VARIANTS = ("st", "ctxir", "onnx", "onnx-int8-dynamic", "onnx-int8-static", "max-length-short")
SHIP_SPEEDUP, SHIP_LOSS = 1.5, 0.005
# the fast paths that met the rule and were wired as a flag: variant → (the flag, where it is)
SHIPPED_AS = {
    "onnx-int8-dynamic": (
        "--backend onnx-int8",
        '`BiEncoder(backend="onnx-int8")` in the library, '
        "`ctxir evaluate --backend onnx-int8`, `python app.py --backend "
        "onnx-int8` (or `CTXIR_BACKEND=onnx-int8`); default `torch`",
    )
}


@dataclass
class EncodeArgs:
    output: str = flag("", "JSON path (default: results/bench/encode.json)")
    variants: str = flag(",".join(ENCODE_VARIANTS), "comma-separated (st, the baseline, is always measured)")
    model: str = flag("", "bi-encoder folder or id ('' = packaged all-MiniLM-L6-v2)")
    data_root: str = flag("../shared/data", "holds scifact/ and the calibration set (BEIR layout)")
    num_texts: int = flag(256, "timed texts: the first N SciFact abstracts")
    batch_size: int = 32
    repeats: int = flag(5, "timed passes per variant, interleaved: medians reported")
    threads: int = flag(0, "torch and ONNX Runtime intra-op threads (0 = all cores)")
    short_length: int = flag(128, "max-length-short: the shorter max_seq_length")
    ndcg: bool = flag(True, "SciFact test nDCG@10 of every variant (encodes the corpus)")
    ndcg_docs: int = flag(0, "0 = all SciFact documents; N = the judged ones + random others up to N")
    calibration_set: str = flag("msmarco_sample", "onnx-int8-static: folder under --data-root calibrating it")
    calibration_texts: int = flag(256, "passages fed to the static calibration")
    onnx_dir: str = flag("", "where ONNX files go and are reused (default: results/bench/onnx)")
    cache_dir: str = flag("", "ctxir cache root for corpus embeddings ($CTXIR_CACHE)")
    seed: int = 0
    progress: bool = True


def encoder_flops(config, lengths: list[int]) -> float:
    """Multiply-adds × 2 of a BERT encoder's layers over texts of these token lengths (no padding counted)."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    return float(sum(layers * (8 * n * h * h + 4 * n * h * i + 4 * n * n * h) for n in lengths))


def _encode_variants(args: EncodeArgs, names: list, path: str, threads: int, calibration: list) -> dict:
    """name → (encode(texts) → unit vectors, max_length, what it is, the BiEncoder behind it or None)."""
    from sentence_transformers import SentenceTransformer

    from ctxir.encoders.onnx_backend import OnnxEncoder
    from ctxir.encoders.onnx_export import export_onnx, quantise

    base = SentenceTransformer(path, device="cpu")
    max_length = int(base.max_seq_length)
    pooling = BiEncoder(base, cache=None).pooling

    def st(texts: list[str]) -> np.ndarray:
        return base.encode(
            texts, batch_size=args.batch_size, normalize_embeddings=True, show_progress_bar=False
        )

    variants: dict = {"st": (st, max_length, "plain sentence-transformers, PyTorch", None)}
    if "ctxir" in names:
        ctxir = BiEncoder(SentenceTransformer(path, device="cpu"), cache=None, batch_size=args.batch_size)
        variants["ctxir"] = (ctxir.encode, max_length, "ctxir BiEncoder.encode (cache off)", ctxir)
    if "max-length-short" in names:
        short = SentenceTransformer(path, device="cpu")
        short.max_seq_length = min(args.short_length, max_length)
        encoder = BiEncoder(short, cache=None, batch_size=args.batch_size)
        about = f"ctxir BiEncoder with max_seq_length {short.max_seq_length} (model default {max_length})"
        variants["max-length-short"] = (encoder.encode, short.max_seq_length, about, encoder)
    onnx_names = [n for n in names if n.startswith("onnx")]
    if onnx_names:
        folder = Path(args.onnx_dir or "results/bench/onnx") / weights_fingerprint(base)
        fp32 = export_onnx(base, folder, args.progress)

        def make(file: Path) -> Callable[[list[str]], np.ndarray]:
            return OnnxEncoder(file, base, pooling, threads, args.batch_size).encode

        if "onnx" in names:
            variants["onnx"] = (make(fp32), max_length, "torch.onnx.export, float32, ONNX Runtime CPU", None)
        if "onnx-int8-dynamic" in names:
            about = "onnxruntime quantize_dynamic: MatMul weights int8 per channel"
            variants["onnx-int8-dynamic"] = (make(quantise(fp32, "dynamic")), max_length, about, None)
        if "onnx-int8-static" in names:
            feed, size = OnnxEncoder(fp32, base, pooling, threads, args.batch_size).feed, args.batch_size
            batches = [
                feed(base.preprocess(calibration[i : i + size])) for i in range(0, len(calibration), size)
            ]
            about = f"onnxruntime quantize_static, calibrated on {len(calibration)} {args.calibration_set} passages"
            variants["onnx-int8-static"] = (make(quantise(fp32, "static", batches)), max_length, about, None)
    return {n: variants[n] for n in names}


def cached(encode: Callable[[list[str]], np.ndarray], cache, key: dict) -> Callable[[list[str]], np.ndarray]:
    """``encode`` through an EmbeddingCache keyed by ``key`` + the texts (a variant's corpus is encoded once)."""

    def encode_cached(texts: list[str]) -> np.ndarray:
        cache_key = EmbeddingCache.key(key, texts)
        hit = cache.get(cache_key)
        if hit is not None and hit.shape[0] == len(texts):
            return hit
        vectors = np.asarray(encode(texts), dtype=np.float32)
        cache.put(cache_key, vectors)
        return vectors

    return encode_cached


def scifact_ndcg(encode: Callable, encode_corpus: Callable, corpus, queries, qrels, progress: bool) -> dict:
    """nDCG@10 and Recall@100 of exact dense search with the vectors of ``encode`` (the corpus: ``encode_corpus``)."""
    ids = list(corpus)
    if progress:
        print(f"  {len(ids):,} SciFact documents (from the cache, or encoded now) …", flush=True)
    start = time.perf_counter()
    docs = np.asarray(encode_corpus([doc_text(corpus[i]) for i in ids]), dtype=np.float32)
    corpus_s = time.perf_counter() - start
    qids = list(queries)
    scores = np.asarray(encode([queries[q] for q in qids]), dtype=np.float32) @ docs.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {q: {ids[j]: float(scores[r, j]) for j in top[r]} for r, q in enumerate(qids)}
    metrics = evaluate_run(qrels, run).aggregate
    return {
        "ndcg_at_10": round(float(metrics["nDCG@10"]), 4),
        "recall_at_100": round(float(metrics.get("Recall@100", metrics.get("R@100", float("nan")))), 4),
        "corpus_s": round(corpus_s, 1),
    }


def add_speedups(row: dict, st: dict) -> dict:
    """texts/s ÷ st's, and st's CPU seconds ÷ the row's (on a shared CPU the wall clock also measures waiting)."""
    row["speedup_vs_st"] = round(row["texts_per_s"] / st["texts_per_s"], 2)
    row["cpu_speedup_vs_st"] = round(st["cpu_s"] / row["cpu_s"], 2) if row.get("cpu_s") else None
    return row


def ship_decision(row: dict) -> tuple[bool, str]:
    """Whether a fast path ships as a flag (≥ 1.5× st by the smaller of the wall and CPU ratios, ≤ 0.005 loss).

    >>> ship_decision({"speedup_vs_st": 1.8, "ndcg_loss_vs_st": 0.001})
    (True, 'meets the ship rule: 1.8× ≥ 1.5× and nDCG@10 loss 0.0010 ≤ 0.005')
    """
    speedup = min(x for x in (row["speedup_vs_st"], row.get("cpu_speedup_vs_st")) if x is not None)
    loss = row.get("ndcg_loss_vs_st")
    reasons = [] if speedup >= SHIP_SPEEDUP else [f"{speedup}× < {SHIP_SPEEDUP}×"]
    if loss is None:
        reasons.append("nDCG@10 cost not measured")
    elif loss > SHIP_LOSS:
        reasons.append(f"nDCG@10 loss {loss:.4f} > {SHIP_LOSS}")
    if reasons:
        return False, "does not ship: " + "; ".join(reasons)
    rule = f"{speedup}× ≥ {SHIP_SPEEDUP}× and nDCG@10 loss {loss:.4f} ≤ {SHIP_LOSS}"
    return True, f"meets the ship rule: {rule}"


def shown_decision(name: str, row: dict) -> str:
    """``ship_decision``'s decision, with the flag when the variant was wired as one.

    >>> shown_decision("onnx-int8-dynamic", {"ships": True, "decision": "meets the ship rule: 2.2× ≥ 1.5×"})
    'meets the ship rule: 2.2× ≥ 1.5× → shipped as `--backend onnx-int8`'
    """
    decision = row.get("decision", "baseline" if name == "st" else "ctxir's default path")
    if row.get("ships") and name in SHIPPED_AS:
        return f"{decision} → shipped as `{SHIPPED_AS[name][0]}`"
    return decision


@dataclass
class EncodeInputs:
    names: list[str]
    texts: list[str]  # the timed texts
    corpus: dict
    queries: dict
    qrels: dict
    calibration: list[str]  # onnx-int8-static's calibration passages
    path: str  # the model folder


def read_inputs(args: EncodeArgs) -> EncodeInputs:
    """Check the arguments, read SciFact test (and the calibration passages for onnx-int8-static)."""
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in ENCODE_VARIANTS]
    if unknown or args.num_texts < 1 or args.repeats < 1 or args.batch_size < 1:
        raise CtxirError(
            f"--variants {args.variants!r} (use {', '.join(ENCODE_VARIANTS)}), --num-texts, --repeats and "
            "--batch-size ≥ 1"
        )
    names = ["st", *[n for n in names if n != "st"]]
    root = Path(args.data_root)
    corpus, queries, qrels = load_beir(beir_texts(root, "scifact"), "test")
    texts = [doc_text(d) for d in list(corpus.values())[: args.num_texts]]
    calibration = []
    if "onnx-int8-static" in names:
        passages = load_corpus(beir_texts(root, args.calibration_set) / "corpus.jsonl")
        calibration = [doc_text(d) for d in list(passages.values())[: args.calibration_texts]]
    return EncodeInputs(names, texts, corpus, queries, qrels, calibration, resolve_model_path(args.model))


def time_variants(variants: dict, texts: list[str], threads: int, args: EncodeArgs) -> tuple:
    """(sgemm peaks, passes, first-pass vectors) per variant: ``--repeats`` passes interleaved, after a warm-up."""
    import torch

    peaks = {"before": sgemm_gflops(threads)}
    vectors = {}
    for encode, *_ in variants.values():
        encode(texts)  # warm-up: first calls allocate, and ONNX Runtime plans per shape
    passes: dict[str, list[dict]] = {n: [] for n in variants}
    for repeat in range(args.repeats):
        for name, (encode, *_) in variants.items():
            torch.set_num_threads(threads)
            wall, cpu = time.perf_counter(), time.process_time()
            out = encode(texts)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if repeat == 0:
                vectors[name] = np.asarray(out, dtype=np.float32)
            passes[name].append({"wall_s": wall, "cpu_s": cpu})
        if args.progress:
            print(
                f"pass {repeat + 1}/{args.repeats}: "
                + ", ".join(f"{n} {p[-1]['wall_s']:.2f} s" for n, p in passes.items()),
                flush=True,
            )
    peaks["after"] = sgemm_gflops(threads)
    peaks["gflops"] = round((peaks["before"]["gflops"] + peaks["after"]["gflops"]) / 2, 1)
    return peaks, passes, vectors


def throughput(variants: dict, passes: dict, vectors: dict, raw_lengths: list, config, peak: float) -> dict:
    """Per variant: texts/s, tokens/s, GFLOP/s and its share of the sgemm peak, agreement with st's vectors."""
    results: dict = {}
    for name, (_, max_length, about, _) in variants.items():
        lengths = [min(n, max_length) for n in raw_lengths]
        wall = float(np.median([p["wall_s"] for p in passes[name]]))
        flops = encoder_flops(config, lengths)
        cosine = (vectors[name] * vectors["st"]).sum(1)
        results[name] = {
            "texts_per_s": round(len(raw_lengths) / wall, 1),
            "tokens_per_s": round(sum(lengths) / wall),
            "wall_s": round(wall, 3),
            "cpu_s": round(float(np.median([p["cpu_s"] for p in passes[name]])), 3),
            "gflops": round(flops / wall / 1e9, 1),
            "share_of_sgemm_peak": round(flops / wall / 1e9 / peak, 3),
            "max_length": max_length,
            "mean_tokens": round(float(np.mean(lengths)), 1),
            "min_cosine_vs_st": round(float(cosine.min()), 5),
            "mean_cosine_vs_st": round(float(cosine.mean()), 6),
            "passes_s": [round(p["wall_s"], 3) for p in passes[name]],
            "about": about,
        }
    for row in results.values():
        add_speedups(row, results["st"])
    return results


def ndcg_corpus(inputs: EncodeInputs, args: EncodeArgs) -> tuple[dict, str]:
    """(the SciFact documents searched, how they were chosen): all, or ``--ndcg-docs`` with every judged one."""
    corpus, ids = inputs.corpus, list(inputs.corpus)
    if not args.ndcg_docs or args.ndcg_docs >= len(ids):
        about = (
            f"SciFact test: {len(inputs.queries)} queries over all {len(corpus):,} documents, exact search"
        )
        return corpus, about
    rng = np.random.default_rng(args.seed)
    judged = sorted({d for q in inputs.qrels.values() for d in q if d in corpus})
    others = [i for i in ids if i not in set(judged)]
    keep = set(judged) | set(rng.choice(others, max(0, args.ndcg_docs - len(judged)), replace=False))
    corpus = {i: corpus[i] for i in ids if i in keep}
    return corpus, (
        f"SciFact test ({len(inputs.queries)} queries) over a {len(corpus):,}-document subset: the "
        f"{len(judged)} judged documents + random others (seed {args.seed})"
    )


def add_ndcg(results: dict, variants: dict, inputs: EncodeInputs, reference, args: EncodeArgs) -> str:
    """Add the nDCG@10 cost on SciFact test (st = ctxir when their vectors agree); returns how docs were chosen."""
    corpus, about_ndcg = ndcg_corpus(inputs, args)
    cache = EmbeddingCache(cache_root(args.cache_dir) / "bench-encode")
    fingerprint = weights_fingerprint(reference)
    for name, (encode, max_length, _, bi_encoder) in variants.items():
        if name == "st" and "ctxir" in variants and results["ctxir"]["min_cosine_vs_st"] > 0.99999:
            continue  # identical vectors: filled from ctxir's below
        if args.progress:
            print(f"[{name}] nDCG@10 …", flush=True)
        if bi_encoder is not None:  # ctxir's own cache, shared with DenseRetriever, the app and `search`
            bi_encoder.cache = EmbeddingCache(cache_root(args.cache_dir) / "embeddings")
            encode_corpus = bi_encoder.encode_cached
        else:
            key = {"variant": name, "weights": fingerprint, "max_length": max_length, "format": 1}
            encode_corpus = cached(encode, cache, key)
        results[name] |= scifact_ndcg(
            encode, encode_corpus, corpus, inputs.queries, inputs.qrels, args.progress
        )
    if "ndcg_at_10" not in results["st"]:
        results["st"] |= {k: v for k, v in results["ctxir"].items() if k in ("ndcg_at_10", "recall_at_100")}
        results["st"]["ndcg_note"] = "same vectors as ctxir (min cosine > 0.99999 on the timed texts)"
    for row in results.values():
        row["ndcg_loss_vs_st"] = round(results["st"]["ndcg_at_10"] - row["ndcg_at_10"], 4)
    return about_ndcg


def run_encode(args: EncodeArgs, argv: list[str] | None = None) -> dict:
    from sentence_transformers import SentenceTransformer

    load_before, started = load_average(), time.perf_counter()
    inputs = read_inputs(args)
    threads = set_torch_threads(args.threads)
    variants = _encode_variants(args, inputs.names, inputs.path, threads, inputs.calibration)
    reference = SentenceTransformer(inputs.path, device="cpu")
    tokenizer, config = reference.tokenizer, reference[0].auto_model.config
    raw_lengths = [len(ids) for ids in tokenizer(inputs.texts, truncation=False)["input_ids"]]
    peaks, passes, vectors = time_variants(variants, inputs.texts, threads, args)
    results = throughput(variants, passes, vectors, raw_lengths, config, peaks["gflops"])
    about_ndcg = (
        add_ndcg(results, variants, inputs, reference, args) if args.ndcg else "not measured (--ndcg false)"
    )
    data = {
        "timed_texts": f"the first {len(inputs.texts)} SciFact abstracts (title + text), batch size "
        f"{args.batch_size}, {threads} threads",
        "ndcg": about_ndcg,
        "model": inputs.path,
        "flops": "2 × multiply-adds of the encoder layers over the real (unpadded, truncated) tokens",
    }
    timing = (
        f"wall time of encode(all timed texts) per pass, {args.repeats} passes interleaved across variants "
        f"after one untimed pass each; medians reported; speedup = texts/s ÷ st's"
    )
    extra = {"sgemm": peaks, "data": data, "timing": timing}
    return finish("encode", format_encode, args, argv, load_before, started, results, **extra)


COLUMNS = (
    ("texts_per_s", "{:.1f}"), ("tokens_per_s", "{:,}"), ("speedup_vs_st", "{:.2f}"), ("cpu_speedup_vs_st", "{:.2f}"),
    ("gflops", "{:.1f}"), ("share_of_sgemm_peak", "{:.0%}"), ("max_length", "{}"), ("ndcg_at_10", "{:.4f}"),
    ("ndcg_loss_vs_st", "{:+.4f}"),
)  # fmt: skip


def format_encode(record: dict) -> str:
    results = record["results"]
    for (
        name,
        row,
    ) in results.items():  # the ship rule, applied to every fast path (older records: their cpu_s)
        add_speedups(row, results["st"])
        if name not in ("st", "ctxir"):
            row["ships"], row["decision"] = ship_decision(row)
    rows = [
        [name, *(cell(r.get(k), f) for k, f in COLUMNS), shown_decision(name, r)]
        for name, r in results.items()
    ]
    return markdown_table(
        "variant | texts/s | tokens/s | × st (wall) | × st (CPU s) | GFLOP/s | of sgemm peak | max len | nDCG@10 | "
        "loss vs st | decision",
        rows,
    )


def describe_sgemm(record: dict) -> str:
    """The line under an encode record's header: the sgemm peak its shares are of."""
    s = record["sgemm"]
    return (
        f"sgemm peak (torch.mm {s['before']['size']}², {s['before']['threads']} threads, median of 7): "
        f"{s['before']['gflops']} GFLOP/s before, {s['after']['gflops']} after; shares use {s['gflops']}.  "
    )


def decisions(record: dict) -> str:
    """The report's paragraph under an encode table: the rule, each fast path's decision, the flags shipped."""
    results = record["results"]
    lines = [
        f"- **{n}**: {shown_decision(n, r)}. Measured: {r['about']}."
        for n, r in results.items()
        if "decision" in r
    ]
    shipped = [n for n, r in results.items() if r.get("ships") and n in SHIPPED_AS]
    lines += [f"- `{SHIPPED_AS[n][0]}` is {SHIPPED_AS[n][1]}." for n in shipped]
    return (
        f"The rule: a fast path ships as a flag only if it is ≥ {SHIP_SPEEDUP}× plain sentence-transformers (the "
        f"smaller of the wall-clock and CPU-time ratios) with ≤ {SHIP_LOSS} SciFact nDCG@10 loss.\n\n"
        + "\n".join(lines)
        + "\n"
    )


def plot_encode(records: list[dict], path: str) -> None:
    """encode: speed-up over sentence-transformers and nDCG@10 loss per variant (the last record)."""
    plt, fig, (left, right) = figure()
    results = records[-1]["results"]
    names = list(results)
    left.barh(names, [results[n]["speedup_vs_st"] for n in names], color="tab:blue")
    left.axvline(SHIP_SPEEDUP, color="grey", lw=0.8, ls="--")
    left.set(xlabel="texts/s ÷ plain sentence-transformers")
    left.invert_yaxis()
    right.barh(names, [results[n].get("ndcg_loss_vs_st") or 0 for n in names], color="tab:orange")
    right.axvline(SHIP_LOSS, color="grey", lw=0.8, ls="--")
    right.set(xlabel="SciFact nDCG@10 loss vs st")
    right.invert_yaxis()
    save_figure(plt, fig, path)


def main(argv: list[str] | None = None) -> int:
    return main_for("encode", EncodeArgs, run_encode, argv)


if __name__ == "__main__":
    sys.exit(main())
