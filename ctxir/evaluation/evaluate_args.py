"""``ctxir evaluate``'s arguments: what to evaluate (a benchmark, a first stage, a re-ranker) and how."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ctxir.rerank.registry import RERANKER_CHOICES
from ctxir.retrieval.registry import DEFAULT_FIRST_STAGE, FIRST_STAGE_CHOICES

# Printed; the JSON file keeps every metric and per-query value.
SHOWN_METRICS = ("nDCG@10", "MRR@10", "MAP@100", "Recall@10", "Recall@100", "P@10", "spearman", "pearson")


@dataclass
class EvaluateArgs:
    data: str = field(
        metadata={
            "help": "BEIR folder (corpus.jsonl, queries.jsonl, qrels/), an STS-B .csv file, or "
            "a pairs file for --task paired"
        }
    )
    split: str = field(
        default="test", metadata={"help": "qrels split (BEIR) or STS-B split when --data is a folder"}
    )
    retriever: str = field(
        default=DEFAULT_FIRST_STAGE,
        metadata={
            "help": "first stage: a first stage of ctxir.retrieval.registry (default: the one the out-of-domain "
            "suite says is best alone, docs/results.md)",
            "choices": FIRST_STAGE_CHOICES,
        },
    )
    model: str = field(
        default="sentence-transformers/all-MiniLM-L6-v2", metadata={"help": "bi-encoder id or folder"}
    )
    pooling: Literal["model", "mean", "cls", "max"] = field(
        default="model", metadata={"help": "'model' keeps the bi-encoder's own pooling"}
    )
    layer: int = field(default=-1, metadata={"help": "hidden layer to pool (0 = embeddings, -1 = last)"})
    query_prompt: str | None = field(
        default=None,
        metadata={
            "help": "text --model puts before each query (and each STS sentence): default its own prompt "
            "(config_sentence_transformers.json, e.g. e5's 'query: '); '' for none; --extra-models keep theirs"
        },
    )
    document_prompt: str | None = field(
        default=None,
        metadata={"help": "text --model puts before each document: default its own prompt; '' for none"},
    )
    index: Literal["auto", "exact", "ann"] = field(
        default="auto",
        metadata={
            "help": "dense index: exact, ann (ctxir.retrieval.ann IVF index, kept beside the cached embeddings and "
            "reopened), or auto = ann from ctxir.retrieval.AUTO_ANN_THRESHOLD (100,000) documents up, exact below"
        },
    )
    backend: Literal["torch", "onnx-int8"] = field(
        default="torch",
        metadata={
            "help": "how the bi-encoder runs: torch (the model's own encode), or onnx-int8 (ONNX Runtime on the CPU with "
            "int8 weights, exported once into the cache folder's onnx/; faster on a CPU, see docs/results.md; the "
            "model's own pooling at the last layer only)"
        },
    )
    fusion: Literal["rrf", "weighted"] = field(default="rrf", metadata={"help": "hybrid fusion"})
    rrf_k: float = field(default=60.0, metadata={"help": "k in 1/(k + rank) for reciprocal-rank fusion"})
    weights: str = field(
        default="", metadata={"help": "hybrid weights 'bm25,dense[,extra…]' (default all 1)"}
    )
    extra_models: str = field(
        default="",
        metadata={
            "help": "hybrid only: more bi-encoders fused beside --model (comma-separated ids or folders)"
        },
    )
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    bm25_stemmer: str = field(
        default="english",
        metadata={
            "help": "Snowball stemmer for BM25 (PyStemmer's language names); 'none' reproduces plain bm25s"
        },
    )
    rerank: str = field(
        default="none",
        metadata={
            "help": "second stage: none, or a re-ranker kind of ctxir.rerank.registry",
            "choices": RERANKER_CHOICES,
        },
    )
    reranker_model: str = field(
        default="",
        metadata={
            "help": "the --rerank model: an id or folder (default: the one shipped inside ctxir for the chosen --rerank)"
        },
    )
    rerank_backend: Literal["torch", "onnx", "onnx-int8"] = field(
        default="torch",
        metadata={
            "help": "how a cross-encoder re-ranker scores: torch; onnx (its body exported once into the cache "
            "folder's onnx/, float32, run by ONNX Runtime on the CPU: the same scores); or onnx-int8 (the same "
            "with the layers it shares unchanged with its base in int8; docs/results.md)"
        },
    )
    rerank_mode: Literal["fused", "alone"] = field(
        default="fused",
        metadata={
            "help": "fused = the re-ranker combined with the first stage (the model folder's fusion.json, else RRF k=60, "
            "equal weights; --tune-on chooses it on training queries), printed beside the re-ranker alone; "
            "alone = the re-ranker's order only"
        },
    )
    tune_on: str = field(
        default="",
        metadata={
            "help": "choose the hybrid's fusion/k/weights and the re-ranker/first-stage fusion on this qrels split "
            "(e.g. train), never the test split"
        },
    )
    tune_queries: str = field(
        default="",
        metadata={
            "help": "only these --tune-on queries: a file of ids (one per line) or a training run's metrics.json "
            "(its held-out query ids, which the model never trained on)"
        },
    )
    task: Literal["auto", "retrieval", "sts", "paired"] = field(
        default="auto",
        metadata={
            "help": "auto = from --data (a BEIR folder → retrieval, an STS-B csv → sts); paired = find each query's one "
            "target among all targets of a pairs file (query<TAB>target .tsv or .jsonl), Recall@k and MRR"
        },
    )
    k_values: str = field(default="1,5,10,20,50", metadata={"help": "--task paired: the k of Recall@k"})
    top_k: int = field(default=100, metadata={"help": "first-stage depth (and the re-ranked candidates)"})
    max_queries: int = field(default=0, metadata={"help": "evaluate only the first N queries (0 = all)"})
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda, mps"})
    batch_size: int = 32
    torch_threads: int = field(default=0, metadata={"help": "CPU threads for torch (0 = torch's default)"})
    output: str = field(default="", metadata={"help": "JSON path (default: results/<data>-<config>.json)"})
    cache_dir: str = field(
        default="",
        metadata={
            "help": "ctxir cache folder, as CTXIR_CACHE (default $CTXIR_CACHE, else ~/.cache/ctxir); embeddings are kept "
            "in its embeddings/ sub-folder"
        },
    )
    report: str = field(
        default="",
        metadata={
            "help": "retrieval: also write a drill-down of the worst queries of the stage evaluated last to this .html "
            "(the same data as .json beside it; see docs/guides/evaluate.md)"
        },
    )
    report_queries: int = field(
        default=10,
        metadata={
            "help": "--report: how many of the worst queries (one pair explained each: seconds; with a re-ranker on a "
            "CPU, tens of seconds)"
        },
    )
