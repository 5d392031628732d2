"""Publishing a bi-encoder ``ctxir adapt`` adapted: its metrics.json, its adapter merged, what its card must say."""

from __future__ import annotations

from pathlib import Path

from ctxir import kinds
from ctxir.adapt.queries import kinds_phrase
from ctxir.adapt.work import RECORD_FILE
from ctxir.encoders.models import is_adapter, load_bi_encoder
from ctxir.files import read_json
from ctxir.names import ADAPT_INCOMPLETE
from ctxir.publish.licenses import KNOWN_LICENSE_EXAMPLES, parse_license
from ctxir.retrieval.registry import FIRST_STAGES
from ctxir.types import CtxirError

ADAPTED_TEMPLATE = "bi_encoder_adapted.md"
EVAL_METRICS = ("nDCG@10", "Recall@100")  # the card's rows per evaluated system; nDCG@10 leads
NOT_RECORDED = "not recorded by ctxir adapt"
# GPL: the recipe ctxir adapt follows (pseudo-queries, mined negatives, a cross-encoder teacher's margins)
GPL_CITATION = (
    "@inproceedings{wang-etal-2022-gpl,\n  title = {GPL: Generative Pseudo Labeling for Unsupervised Domain "
    "Adaptation of Dense Retrieval},\n  author = {Wang, Kexin and Thakur, Nandan and Reimers, Nils and Gurevych, "
    "Iryna},\n  booktitle = {NAACL},\n  year = {2022}\n}"
)


def is_adapt_output(folder: Path) -> bool:
    """A folder ``ctxir adapt`` wrote (or is writing): its record or its unfinished marker, beside an adapter."""
    return ((folder / RECORD_FILE).is_file() or (folder / ADAPT_INCOMPLETE).is_file()) and is_adapter(folder)


def public_corpus_name(path: str) -> str:
    """The corpus by its folder's or file's name, never its path (a BEIR ``corpus.jsonl`` → its folder's name)."""
    parts = [part for part in str(path).replace("\\", "/").split("/") if part and part != "."]
    if len(parts) > 1 and parts[-1].lower() in ("corpus.jsonl", "corpus.json"):
        parts = parts[:-1]
    return parts[-1] if parts else "corpus"


def public_record(record: dict) -> dict:
    """adapt.json as the Hub repo carries it (its copy, the card and metrics.json): the corpus by name only."""
    return {**record, "corpus": {**record["corpus"], "path": public_corpus_name(record["corpus"]["path"])}}


def adapt_metrics(src: Path, repo_id: str, corpus_license: str | None, evaluation: str | None = None) -> dict:
    """The metrics.json of the adapter in ``src`` from adapt.json, ``corpus_license`` and an evaluation file."""
    if (src / ADAPT_INCOMPLETE).is_file():
        raise CtxirError(
            f"--model-dir {str(src)!r} is unfinished: `ctxir adapt` was writing it and did not complete; rerun that "
            "command to finish it, then stage it"
        )
    record = read_json(src / RECORD_FILE, strict=False)
    needed = ("base_model", "corpus", "teacher", "loss", "queries", "training", "settings")
    missing = [k for k in needed if k not in record]
    if missing:
        raise CtxirError(
            f"{str(src / RECORD_FILE)!r} lacks {', '.join(map(repr, missing))}: it is not the record `ctxir adapt` "
            "writes; rerun `ctxir adapt` into a new --output and stage that"
        )
    corpus = record["corpus"]
    if not (corpus_license or "").strip():
        raise CtxirError(
            f"--model-dir {str(src)!r} was adapted by `ctxir adapt` on your corpus {corpus['path']!r}, whose terms "
            "only you know: the model's license derives from its training data, so pass --corpus-license with that "
            f"corpus's license (e.g. {', '.join(map(repr, KNOWN_LICENSE_EXAMPLES))})"
        )
    if parse_license(corpus_license) is None:
        raise CtxirError(
            f"--corpus-license {corpus_license!r} is not a license ctxir knows: give a Hub license id or name, e.g. "
            f"{', '.join(map(repr, KNOWN_LICENSE_EXAMPLES))}"
        )
    record = public_record(record)
    corpus, settings, training = record["corpus"], record["settings"], record["training"]
    return {
        "model_type": kinds.BI_ENCODER,
        "model_name": repo_id.split("/", 1)[1],
        "base_model": record["base_model"],
        "objective": f"{record['loss']} (ctxir adapt: LoRA, merged)",
        "datasets": [
            {
                "name": str(corpus["path"]),
                "split": "documents only (no query, no relevance label)",
                "role": "train",
                "license": corpus_license.strip(),
                "num_examples": corpus["documents"],
            }
        ],
        "config": settings,
        "training": {
            "steps": training["steps_done"],
            "epochs": settings.get("epochs"),
            "train_examples": record.get("training_rows"),
            "batch_size": settings.get("batch_size"),
            "learning_rate": settings.get("learning_rate"),
            "wall_time_seconds": (record.get("seconds") or {}).get("total", 0.0),
            "device": NOT_RECORDED,
            "hardware": NOT_RECORDED,
            "seed": settings.get("seed"),
            "final_loss": training.get("train_loss"),
        },
        "evaluations": evaluation_rows(evaluation, src) if evaluation else [],
        # what wrote the adapter (sentence-transformers records it in the folder), not what stages it
        "versions": dict(
            read_json(src / "config_sentence_transformers.json", strict=False).get("__version__") or {}
        ),
        "created": record.get("created"),
        "adapt": record,
    }


def evaluation_rows(path: str, src: Path) -> list[dict]:
    """metrics.json evaluations (``EVAL_METRICS`` of each system) from this adapter's ``ctxir evaluate --output``."""
    file = Path(path).expanduser()
    result = read_json(file, strict=False) if file.is_file() else None
    if not isinstance(result, dict) or result.get("task") != "retrieval" or not result.get("metrics"):
        raise CtxirError(
            f"--evaluation {path!r} is not the file `ctxir evaluate --output` writes for a retrieval run: evaluate "
            f"the adapter with `ctxir evaluate --data BEIR_FOLDER --model {src} --output FILE` and pass FILE"
        )
    config = result.get("config") or {}
    model = str(config.get("model") or "")
    if not model or Path(model).expanduser().resolve() != src:
        raise CtxirError(
            f"--evaluation {path!r} evaluated the model {model!r}, not --model-dir {str(src)!r}: a card states only "
            f"its own model's figures; evaluate it with `ctxir evaluate --model {src} --output FILE`"
        )
    first_stage = FIRST_STAGES.get(str(config.get("retriever")))
    if first_stage is None or not first_stage.uses_bi_encoder:
        raise CtxirError(
            f"--evaluation {path!r} ran --retriever {config.get('retriever')!r}, which does not use the bi-encoder: "
            "evaluate with --retriever dense or hybrid"
        )
    if config.get("max_queries", 0) and result.get("num_queries") == config["max_queries"]:
        raise CtxirError(
            f"--evaluation {path!r} covers the first {config['max_queries']} queries only (--max-queries): the card "
            "leads with a figure on the whole split; evaluate without --max-queries"
        )
    dataset = Path(str(config.get("data") or "")).name or "unnamed"
    rows = []
    for system, figures in result["metrics"].items():
        for metric in EVAL_METRICS:
            if isinstance(figures, dict) and isinstance(figures.get(metric), (int, float)):
                rows.append(
                    {
                        "dataset": dataset,
                        "split": str(config.get("split") or "test"),
                        "task": "retrieval",
                        "metric": metric,
                        "after": float(figures[metric]),
                        "config": system,
                        "queries": int(result.get("num_queries") or 0) or None,
                        "headline": system == result.get("system") and metric == EVAL_METRICS[0],
                    }
                )
    if not rows:
        raise CtxirError(f"--evaluation {path!r} holds no {' or '.join(EVAL_METRICS)} figure")
    if not any(r["headline"] for r in rows):
        rows[0]["headline"] = True
    return sorted(rows, key=lambda r: not r["headline"])


def write_standalone_bi_encoder(src: Path, dest: Path) -> None:
    """The adapter in ``src`` merged into its base, saved to ``dest`` as a plain SentenceTransformer."""
    load_bi_encoder.cache_clear()  # a private copy, not the one later loads in this process share
    model = load_bi_encoder(str(src), "cpu")
    load_bi_encoder.cache_clear()
    dest.mkdir(parents=True, exist_ok=True)
    model.save(str(dest), create_model_card=False)


def adapted_context(metrics: dict) -> dict:
    """What the adapted card states beyond the common context (``ctxir.publish.cards._template_context``)."""
    record = metrics["adapt"]
    training = record["training"]
    queries = {k: v for k, v in record["queries"].items() if k != "total"}
    if record.get("complete", training["steps_done"] >= training["steps_planned"]):
        run = f"complete: {training['steps_done']} of {training['steps_planned']} steps"
    else:
        run = (
            f"stopped by its time budget (--max-minutes) at step {training['steps_done']} of "
            f"{training['steps_planned']}: a partial adapter"
        )
    return {
        "record": record,
        "corpus": record["corpus"],
        "corpus_license": metrics["datasets"][0]["license"],  # as the publisher wrote it
        "corpus_terms": parse_license(metrics["datasets"][0]["license"]).name,
        "query_counts": queries,
        "query_kinds": kinds_phrase(queries),
        "query_examples": {k: v for k, v in (record.get("query_examples") or {}).items() if v},
        "run_state": run,
        "settings": record["settings"],
        "gpl_citation": GPL_CITATION,
    }


def adapted_card_problems(metrics: dict, text: str) -> list[str]:
    """What an adapted model's card must say (corpus, teacher, loss, run state, "not evaluated") and does not."""
    record = metrics["adapt"]
    corpus = record["corpus"]
    needed = {
        "that it was adapted without labels": "without labels",
        # in code spans, as the card's table names them: the settings' JSON on the card repeats some of them bare
        "the corpus path": f"`{corpus['path']}`",
        "the corpus fingerprint": f"`{corpus['fingerprint']}`",
        "the number of documents": f"{corpus['documents']:,}",
        "the teacher": f"`{record['teacher']}`",
        "the loss": f"`{record['loss']}`",
        "the run's state": adapted_context(metrics)["run_state"],
    }
    if not metrics["evaluations"]:
        needed["that it was not evaluated"] = "Not evaluated here"
    return [f"the card does not state {what} ({said!r})" for what, said in needed.items() if said not in text]
