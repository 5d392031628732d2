"""Peak memory of encoding a corpus with ``--backend torch`` and ``--backend onnx-int8`` (issue #21 §5), each in a
fresh process so its peak RSS (``ru_maxrss``) is its own.

    nice -n 19 python -m benchmarks.onnx_memory --data ../shared/data/scifact --docs 1400 --threads 1

Each variant runs ``BiEncoder(...).encode`` over the first ``--docs`` documents (title + text) of a BEIR corpus,
the way ``ctxir evaluate`` encodes a corpus, after the int8 model was exported once into ``--onnx-dir``
(the export itself, a one-off, is measured separately as ``export``). Printed: RSS after loading, peak RSS, the
peak's growth over the loaded state, and texts/s. Variants:

- ``torch``: the model's own encode.
- ``onnx-int8``: as shipped: runs of at most ``ctxir.encoders.onnx_backend.TOKENS_PER_RUN`` rows × tokens, the CPU arena
  shrunk after each run.
- ``onnx-int8-before``: as first released, for comparison: one run per batch of ``--batch-size`` texts, the
  arena kept at its peak.
- ``export``: the first use, exporting and quantising (torch.onnx dynamo + onnxruntime's quantiser).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = ("torch", "onnx-int8", "onnx-int8-before", "export")


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def child(args: argparse.Namespace) -> dict:
    """One variant, in this process: load, (export,) encode; the RSS at each step."""
    import torch

    torch.set_num_threads(args.threads)
    from ctxir.data import load_beir
    from ctxir.encoders import BiEncoder, onnx_backend

    corpus, _, _ = load_beir(args.data, "test")
    texts = [f"{d.get('title', '')} {d.get('text', '')}".strip() for d in list(corpus.values())[: args.docs]]
    del corpus
    if args.variant == "onnx-int8-before":  # as released first: one run per batch, the arena kept at its peak
        onnx_backend.OnnxEncoder.runs = staticmethod(lambda feats: [feats])
        onnx_backend._run_options = lambda: None
    backend = "torch" if args.variant == "torch" else "onnx-int8"
    encoder = BiEncoder(
        args.model,
        device="cpu",
        cache=False,
        backend=backend,
        onnx_dir=args.onnx_dir,
        batch_size=args.batch_size,
    )
    row = {"variant": args.variant, "docs": len(texts), "loaded_mb": rss_mb()}
    if args.variant == "export":
        started = time.perf_counter()
        encoder._onnx_encoder()
        row["seconds"] = time.perf_counter() - started
    else:
        encoder.encode(texts[:8])  # the ONNX session is opened on the first encode
        row["session_mb"] = rss_mb()
        started = time.perf_counter()
        encoder.encode(texts)
        row["texts_per_s"] = len(texts) / (time.perf_counter() - started)
    row["end_mb"] = rss_mb()
    row["peak_mb"] = peak_mb()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data/scifact")
    parser.add_argument("--docs", type=int, default=1400)
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch and ONNX Runtime threads")
    parser.add_argument(
        "--onnx-dir",
        default="",
        help="where the int8 model is exported (default: a temporary folder, exported first)",
    )
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--variant", default="", help=argparse.SUPPRESS)  # the child process's one variant
    parser.add_argument("--output", default="")
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(child(args)))
        return 0
    onnx_dir = args.onnx_dir or tempfile.mkdtemp(prefix="ctxir-onnx-memory-")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"--variants: {unknown[0]!r} is not known: use some of {', '.join(VARIANTS)}")
    # the children run this module by name, from any working folder (their --data stays relative to the caller's)
    root = str(Path(__file__).resolve().parents[1])
    python_path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH", "")]))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": python_path}

    def measure(variant: str, folder: str) -> dict | None:
        command = [
            sys.executable,
            "-m",
            "benchmarks.onnx_memory",
            "--variant",
            variant,
            "--data",
            args.data,
            "--docs",
            str(args.docs),
            "--model",
            args.model,
            "--batch-size",
            str(args.batch_size),
            "--threads",
            str(args.threads),
            "--onnx-dir",
            folder,
        ]
        out = subprocess.run(command, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return None
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["growth_mb"] = row["peak_mb"] - row["loaded_mb"]
        return row

    # the encode variants need the int8 file: exported into --onnx-dir first when it is not there (not reported)
    needs_file = any(v.startswith("onnx") for v in variants)
    if (
        needs_file
        and not any(Path(onnx_dir).rglob("model-int8-dynamic.onnx"))
        and measure("export", onnx_dir) is None
    ):
        return 1
    rows = []
    for variant in variants:
        # the export is measured into a fresh folder, so it really exports
        row = measure(
            variant, tempfile.mkdtemp(prefix="ctxir-onnx-export-") if variant == "export" else onnx_dir
        )
        if row is None:
            return 1
        rows.append(row)
        speed = f"{row['texts_per_s']:.1f} texts/s" if "texts_per_s" in row else f"{row['seconds']:.1f} s"
        print(
            f"{variant:16s} loaded {row['loaded_mb']:7.0f} MB  peak {row['peak_mb']:7.0f} MB  "
            f"(+{row['growth_mb']:.0f})  end {row['end_mb']:7.0f} MB  {speed}",
            flush=True,
        )
    if args.output:
        Path(args.output).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
