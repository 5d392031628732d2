"""What every benchmark shares: the machine and its load, the JSON record, argument helpers, tables and figures."""

from __future__ import annotations

import dataclasses
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import psutil

from ctxir import DEFAULT_BI_ENCODER, CtxirError, resolve_model
from ctxir.cli import cli_main
from ctxir.files import cpu_count, write_json

# The flags that decide these kernels' speed, reported with every run (all flags are in /proc/cpuinfo).
SIMD_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx_vnni", "avx512_bf16", "avx512_fp16", "avx512_vpopcntdq", "amx_tile"
)  # fmt: skip


def machine() -> dict:
    """Cores, CPU model and SIMD flags, memory, load and library versions: printed beside every number."""
    info: dict = {"cores": cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    try:
        text = Path("/proc/cpuinfo").read_text()
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        flags = set(fields.get("flags", "").split())
        info["cpu"] = fields.get("model name", platform.processor())
        info["simd_flags"] = [f for f in SIMD_FLAGS if f in flags]
    except OSError:
        info["cpu"] = platform.processor()
    info["ram_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    info["versions"] = {p: installed(p) for p in ("numpy", "torch", "faiss-cpu", "sentence-transformers")}
    return info


def installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def rss_mb() -> float:
    """Resident set size of this process, in MB."""
    return psutil.Process().memory_info().rss / 2**20


def set_torch_threads(n: int) -> int:
    import torch

    n = n or machine()["cores"]
    torch.set_num_threads(n)
    return n


def sgemm_gflops(threads: int, size: int = 1024, repeats: int = 7) -> dict:
    """float32 matmul peak as torch reaches it on this machine with ``threads`` threads (median of ``repeats``)."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        rates.append(4 * 2 * size**3 / (time.perf_counter() - start) / 1e9)
    return {
        "gflops": round(float(np.median(rates)), 1),
        "best_gflops": round(max(rates), 1),
        "size": size,
        "threads": threads,
    }


def command_line(kind: str, argv: list[str] | None) -> str:
    """The command as typed, in its canonical form (``argv``: the flags, without the kind).

    >>> command_line("search", ["--num-docs", "10"])
    'python -m benchmarks.search --num-docs 10'
    """
    # quoted where a flag's value has spaces (an endpoint label), so the recorded command runs as it is printed
    return " ".join(
        [f"python -m benchmarks.{kind}", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )


def main_for(kind: str, args_class: type, run: Callable, argv: list[str] | None) -> int:
    """``python -m benchmarks.KIND --flags``: parse ``args_class``, call ``run(args, flags)`` (exit 2 on bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return cli_main(args_class, lambda args: run(args, argv), argv)


def finish(kind, table, args, argv, load_before, started, results, output="", **extra) -> dict:
    """Write and print (``table``) the record: what ran, where, under what load, with which settings."""
    record = {
        "kind": kind,
        "command": command_line(kind, argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "wall_s": round(time.perf_counter() - started, 1),
        **extra,
        "settings": dataclasses.asdict(args),
        "results": results,
    }
    print(table(record))
    out = Path(output or args.output or f"results/bench/{kind}.json")
    write_json(out, record, indent=1)
    print(f"wrote {out}")
    return record


def summary_ms(values: list[float]) -> dict:
    p50, p95 = (float(p) * 1000 for p in np.percentile(values, [50, 95]))
    return {"p50_ms": round(p50, 2), "p95_ms": round(p95, 2), "n": len(values)}


def median_of(passes: list[dict], key: str) -> float:
    return round(float(np.median([p[key] for p in passes])), 2)


def normalise(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` scaled to unit length, in place."""
    x /= np.linalg.norm(x, axis=1, keepdims=True).clip(min=1e-12)
    return x


def numbers(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise CtxirError(f"{what} {text!r}: give whole numbers separated by commas") from err
    if not values or min(values) < 1:
        raise CtxirError(f"{what} {text!r}: give whole numbers ≥ 1 separated by commas")
    return values


def resolve_model_path(name: str) -> str:
    """A folder for ``name`` ('' = the packaged all-MiniLM-L6-v2, offline)."""
    return resolve_model(name or DEFAULT_BI_ENCODER)


def beir_texts(root: Path, name: str) -> Path:
    folder = root / name
    if not (folder / "corpus.jsonl").is_file():
        raise CtxirError(
            f"--data-root {str(root)!r} has no {name}/corpus.jsonl: point it at the shared data folder"
        )
    return folder


def markdown_table(header: str | list[str], rows: list[list[str]]) -> str:
    """A Markdown table; ``header``: its titles, or their header line ("a | b")."""
    header = header.split(" | ") if isinstance(header, str) else header
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def cell(value, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def figure(width: float = 9, height: float = 3.4, columns: int = 2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, columns, figsize=(width, height))
    return plt, fig, axes


def save_figure(plt, fig, path: str) -> None:
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
