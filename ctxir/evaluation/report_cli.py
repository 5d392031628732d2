"""``ctxir report RESULTS.json``: the failure report of a saved evaluation, its models rebuilt from the results."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ctxir.cli import cli_main
from ctxir.data.beir import load_beir, load_qrels, load_queries
from ctxir.data.user_corpus import load_corpus_any
from ctxir.encoders.bi_encoder import BiEncoder
from ctxir.evaluation.report import make_report, report_from_results, report_paths
from ctxir.files import read_json
from ctxir.rerank.registry import load_reranker
from ctxir.retrieval.registry import FIRST_STAGES
from ctxir.retrieval.retrievers import BM25Retriever
from ctxir.types import Corpus, CtxirError


def explainers_from_config(config: Mapping, corpus: Corpus, system: str, device: str = "auto") -> dict:
    """Rebuild the models a results JSON's ``config`` names, for ``explain_failures`` (BM25 is re-indexed, the
    bi-encoder and re-ranker loaded; the corpus is not encoded)."""

    retriever = config.get("retriever", "")
    stage = FIRST_STAGES.get(retriever)  # a first stage no longer registered: nothing of it is explained
    found: dict = {}
    if stage is not None and stage.uses_bm25:
        stemmer = config.get("bm25_stemmer", "english")
        found["bm25"] = BM25Retriever(
            corpus,
            k1=config.get("bm25_k1", 1.5),
            b=config.get("bm25_b", 0.75),
            stemmer=None if str(stemmer).lower() == "none" else stemmer,
        )
    if stage is not None and stage.uses_bi_encoder:
        pooling = config.get("pooling", "model")
        found["bi_encoder"] = BiEncoder(
            config["model"],
            pooling=None if pooling == "model" else pooling,
            layer=config.get("layer", -1),
            device=device,
            cache=False,
            query_prompt=config.get("query_prompt"),
            document_prompt=config.get("document_prompt"),
        )
    if config.get("rerank", "none") != "none" and system != retriever:
        found["reranker"] = load_reranker(config["rerank"], config.get("reranker_model", ""), device)
    return found


@dataclass
class ReportArgs:
    results: str = field(metadata={"help": "results JSON written by ctxir evaluate (it holds the runs)"})
    output: str = field(
        default="",
        metadata={
            "help": "report .html (the JSON is written beside it; default: the "
            "results path with -report.html)"
        },
    )
    data: str = field(
        default="", metadata={"help": "BEIR folder (default: the one the results were made on)"}
    )
    split: str = field(default="", metadata={"help": "qrels split (default: the results' own)"})
    corpus: str = field(
        default="", metadata={"help": "a user corpus file instead of --data (needs --queries and --qrels)"}
    )
    queries: str = field(default="", metadata={"help": "queries.jsonl for --corpus"})
    qrels: str = field(default="", metadata={"help": "qrels .tsv (query-id, corpus-id, score) for --corpus"})
    system: str = field(
        default="", metadata={"help": "which run of the results (default: the stage evaluated last)"}
    )
    metric: str = "nDCG@10"
    worst: int = field(default=10, metadata={"help": "how many of the worst queries to show"})
    top: int = field(default=10, metadata={"help": "results shown per query"})
    explain: Literal["auto", "none"] = field(
        default="auto",
        metadata={
            "help": "auto = load the models the results name (BM25, bi-encoder, re-ranker) and explain one pair per "
            "query; none = no model"
        },
    )
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda, mps"})


def run(args: ReportArgs) -> dict:
    if not Path(args.results).is_file():
        raise CtxirError(f"--results {args.results!r} is not a file: pass the JSON ctxir evaluate wrote")
    results = read_json(args.results)
    config = results.get("config", {})
    output = args.output or str(Path(args.results).with_suffix("")) + "-report.html"
    if report_paths(output)[1].resolve() == Path(args.results).resolve():
        raise CtxirError(
            f"--output {output!r} would write the report's JSON over the results {args.results!r}: "
            "give the report another name"
        )
    if args.corpus:
        if not (args.queries and args.qrels):
            raise CtxirError("--corpus needs --queries and --qrels: a report needs judged queries")
        corpus, qrels = load_corpus_any(args.corpus), load_qrels(args.qrels)
        queries = load_queries(args.queries)
        source = {"data": args.corpus, "split": Path(args.qrels).stem}
    else:
        data, split = args.data or config.get("data", ""), args.split or config.get("split", "test")
        if not data:
            raise CtxirError(
                "the results JSON names no data folder: pass --data BEIR_FOLDER (or --corpus, "
                "--queries and --qrels)"
            )
        corpus, queries, qrels = load_beir(data, split)
        source = {"data": data, "split": split}
    cases, meta = report_from_results(
        results, corpus, queries, qrels, args.system, args.metric, args.worst, args.top
    )
    meta.update(source)
    explainers = (
        explainers_from_config(config, corpus, meta["system"], args.device) if args.explain == "auto" else {}
    )
    html_path, json_path = make_report(output, cases, meta, corpus, explainers)
    print(f"wrote {html_path} and {json_path}")
    return meta


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-"):  # the results JSON may come first, without --results
        argv = ["--results", *argv]
    return cli_main(ReportArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
