"""``ctxir adapt``: adapt the bi-encoder to a corpus without labels (docs/lab.md says why each step and default).

ctxir adapt --corpus ../shared/data/lisa --output runs/lisa-adapted --max-minutes 30
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

from ctxir import kinds
from ctxir.adapt.negatives import COMPLEMENT_TEACHER
from ctxir.adapt.queries import ALL_KINDS, QUERY_KINDS, PseudoQuery, describe, pseudo_queries
from ctxir.adapt.work import BudgetReached, WorkDir, corpus_fingerprint, read_jsonl, write_card, write_jsonl
from ctxir.cli import cli_main, flag
from ctxir.encoders.models import DEFAULT_BI_ENCODER
from ctxir.types import Corpus, CtxirError, doc_text

# Fewer documents leave too few to mine negatives from, and the adapter would learn them by heart.
MIN_DOCUMENTS = 20


@dataclass
class AdaptArgs:
    """ctxir adapt: adapt the bi-encoder to a corpus without labels (pseudo-queries, mined negatives, a teacher)."""

    corpus: str = flag("", "the corpus: a BEIR folder or corpus.jsonl, or a .txt/.jsonl/.csv/.tsv file")
    output: str = flag("", "folder for the adapter (rerunning continues the run in it)")
    model: str = flag(DEFAULT_BI_ENCODER, "the bi-encoder to adapt (id or folder)")
    query_prompt: str | None = flag(None, "text before each query: default --model's own; '' for none")
    document_prompt: str | None = flag(None, "text before each document: default --model's own; '' for none")
    teacher: str = flag(COMPLEMENT_TEACHER, "complement (cosine+BM25), a cross-encoder, or '' (shipped one)")
    query_kinds: str = flag(",".join(QUERY_KINDS), "pseudo-queries: title, sentence, span, generated")
    generator: str = flag("", "experimental: a doc2query model (Hub id or folder) for generated queries")
    queries_per_doc: int = flag(3, "pseudo-queries cut from each document, at most")
    max_queries: int = flag(2000, "pseudo-queries kept, drawn across the corpus (0 = all)")
    negatives: int = flag(1, "mined negatives per query (BM25 and dense in turn)")
    mining_depth: int = flag(30, "negatives are drawn from each retriever's top N")
    max_seq_length: int = flag(128, "tokens per text in training (0 = the model's own)")
    lora_rank: int = 16
    lora_alpha: int = 32
    learning_rate: float = 2e-4
    batch_size: int = flag(32, "training batch (raise it on a GPU)")
    teacher_batch_size: int = flag(64, "pairs per teacher batch (raise it on a GPU)")
    epochs: float = 1.0
    max_steps: int = flag(0, "training steps (0 = --epochs over the labelled rows)")
    save_steps: int = flag(25, "a checkpoint every N steps (a rerun resumes from it)")
    save_minutes: float = flag(5.0, "also a checkpoint at the first step N minutes after the last")
    max_minutes: float = flag(30.0, "time budget: training stops, saved, at the step past it (0 = none)")
    device: str = flag("auto", "auto, cpu, cuda, cuda:N, mps")
    torch_threads: int = flag(0, "CPU threads for torch (0 = default)")
    seed: int = 42
    overwrite: bool = flag(False, "start --output again if it holds another run")
    keep_work: bool = flag(False, "keep --output/work (queries, labels, checkpoints)")
    quiet: bool = flag(False, "no progress bars")


_say = functools.partial(print, flush=True)


# what the work files and the adapter do not depend on
_NOT_SHAPING = {"corpus", "output", "max_minutes", "device", "torch_threads", "overwrite", "keep_work"}
_NOT_SHAPING |= {"quiet", "teacher_batch_size", "save_steps", "save_minutes"}


def usable_corpus(corpus: Corpus, path: str) -> Corpus:
    """The documents that have text; an empty corpus, or one with fewer than ``MIN_DOCUMENTS`` such, is refused."""
    if not corpus:
        raise CtxirError(f"--corpus {path!r} holds no documents: give a corpus with at least {MIN_DOCUMENTS}")
    usable = {doc_id: doc for doc_id, doc in corpus.items() if doc_text(doc).strip()}
    empty = [doc_id for doc_id in corpus if doc_id not in usable]
    if empty:
        _say(
            f"  {len(empty):,} documents have no text and are left out (e.g. {', '.join(map(repr, empty[:3]))})"
        )
    if len(usable) < MIN_DOCUMENTS:
        raise CtxirError(
            f"--corpus {path!r} has {len(usable)} document(s) with text; adapting needs at least {MIN_DOCUMENTS}: "
            "each pseudo-query's negatives are mined from the other documents, and on fewer the adapter would learn "
            "them by heart. Use the bi-encoder as it is (or BM25) for so small a corpus, or add documents"
        )
    return usable


def run(args: AdaptArgs) -> dict:
    """Adapt ``args.model`` to ``args.corpus``; returns the record written to ``<output>/adapt.json``."""
    from ctxir.data.user_corpus import load_corpus_any
    from ctxir.encoders.models import set_threads

    # 0. the arguments checked before anything heavy is loaded
    if not args.corpus.strip():
        raise CtxirError(
            "--corpus is required: give a BEIR folder or a corpus file (.jsonl, .txt, .csv, .tsv)"
        )
    if not args.output.strip():
        raise CtxirError("--output is required: give the folder the adapter is written to")
    ones = ("queries_per_doc", "negatives", "mining_depth", "batch_size", "teacher_batch_size", "lora_rank")
    zeros = ("max_queries", "max_steps", "max_seq_length", "max_minutes")
    for name, least in [*dict.fromkeys((*ones, "save_steps"), 1).items(), *dict.fromkeys(zeros, 0).items()]:
        if getattr(args, name) < least:
            meaning = " (0 = no limit)" if least == 0 else ""
            raise CtxirError(
                f"--{name.replace('_', '-')} must be ≥ {least}{meaning}, got {getattr(args, name)!r}"
            )
    teacher = args.teacher.strip()
    if teacher.lower() not in ("", COMPLEMENT_TEACHER) and "/" not in teacher and not Path(teacher).exists():
        raise CtxirError(
            f"--teacher {args.teacher!r} is neither {COMPLEMENT_TEACHER!r}, a cross-encoder folder nor a Hub id "
            f"(owner/name): pass one of those, or '' for the shipped cross-encoder"
        )
    wants_generated = "generated" in [k.strip() for k in args.query_kinds.split(",")]
    if wants_generated and not args.generator.strip():
        raise CtxirError(
            "--query-kinds asks for 'generated' but --generator is empty: pass a sequence-to-sequence doc2query "
            "model (e.g. macavaney/doc2query-t5-base-msmarco), or leave 'generated' out"
        )
    if args.generator.strip() and not wants_generated:
        raise CtxirError(
            f"--generator {args.generator!r} is given but --query-kinds {args.query_kinds!r} has no 'generated': "
            "add it (e.g. --query-kinds generated), or leave --generator out"
        )
    set_threads(args.torch_threads)
    marks = {"start": time.monotonic()}  # when each step ended
    deadline = marks["start"] + 60 * args.max_minutes if args.max_minutes else None
    folder = WorkDir(args.output)

    _say(f"1. Reading the corpus {args.corpus!r}")
    try:
        corpus = load_corpus_any(args.corpus)
    except CtxirError as err:
        raise CtxirError(
            f"--corpus {args.corpus!r}: {err} (adapting needs {MIN_DOCUMENTS}+ documents with text)"
        ) from None
    corpus = usable_corpus(corpus, args.corpus)
    shaping = {k: v for k, v in asdict(args).items() if k not in _NOT_SHAPING}
    settings = {"corpus_fingerprint": corpus_fingerprint(corpus), **shaping}
    done = folder.record_json()
    if done.get("complete") and done.get("settings") == settings and not args.overwrite:
        _say(f"   {args.output!r} holds this adapter, complete: nothing to do (--overwrite starts again)")
        return done
    continued = folder.start(settings, args.overwrite)
    _say(f"   {len(corpus):,} documents" + ("; continuing the run in --output" if continued else ""))
    marks["read"] = time.monotonic()

    try:
        return _adapt(args, corpus, settings, folder, deadline, marks)
    except BudgetReached as err:
        raise CtxirError(
            f"--max-minutes {args.max_minutes!r} was reached before the first training step ({err}): no adapter "
            f"was written. What is done is kept in {str(folder.work)!r}: rerun the same command with a larger "
            "--max-minutes (or again) to continue from there"
        ) from None


def _adapt(args, corpus, settings, folder: WorkDir, deadline, marks: dict[str, float]) -> dict:
    from ctxir.adapt.negatives import mine_negatives, teacher_scores

    show = not args.quiet
    _say("2. Pseudo-queries from the corpus alone")
    if folder.queries.is_file():
        queries = [PseudoQuery(**row) for row in read_jsonl(folder.queries)]
    else:
        wanted = [k.strip() for k in args.query_kinds.split(",") if k.strip()]
        generated = _generated(args, corpus, show) if "generated" in wanted else None
        queries = pseudo_queries(corpus, args.queries_per_doc, wanted, args.max_queries, args.seed, generated)
        if not queries:
            raise CtxirError(
                f"--corpus {args.corpus!r}: no pseudo-query could be cut from its documents (--query-kinds "
                f"{args.query_kinds!r}): a query needs a title or sentence of 3+ words, and its document 8+ words "
                "besides; add text, or try --query-kinds span"
            )
        write_jsonl(folder.queries, (asdict(q) for q in queries))
    _say(f"   {len(queries):,} queries from {len({q.doc_id for q in queries}):,} documents:")
    _say("\n".join(describe(queries)))
    marks["queries"] = time.monotonic()
    _check_budget(deadline, "before mining negatives")

    _say(f"3. Negatives mined with BM25 and dense ({args.model}), top {args.mining_depth} of each")
    if folder.negatives.is_file():
        negatives = read_jsonl(folder.negatives)
    else:
        negatives = mine_negatives(
            corpus, queries, _encoder(args), args.mining_depth, args.negatives, args.seed, show
        )
        write_jsonl(folder.negatives, negatives)
    sources = Counter(source for row in negatives for _, source in row["negatives"])
    found = ", ".join(f"{n:,} {s}" for s, n in sorted(sources.items()))
    _say(f"   {sum(sources.values()):,} negatives ({found})")
    marks["negatives"] = time.monotonic()
    _check_budget(deadline, "before the teacher's scores")

    name = args.teacher.strip()
    if name.lower() == COMPLEMENT_TEACHER:
        from ctxir.adapt.negatives import CALIBRATION_ROWS, HybridTeacher, scored_texts

        teacher = HybridTeacher(corpus, _encoder(args), show_progress=show)
        by_qid = {q.qid: q for q in queries}  # its weights set on the first CALIBRATION_ROWS rows
        sample = [row for row in negatives if row["negatives"]][:CALIBRATION_ROWS]
        teacher.calibrate([scored_texts(by_qid[row["qid"]], row, corpus) for row in sample])
        dense_w, bm25_w = teacher.weights
        weights = f" (weights {dense_w:.3g}, {bm25_w:.3g}: each part's margins scaled to one spread)"
    else:
        from ctxir.rerank.registry import load_reranker

        teacher = load_reranker(kinds.CROSS_ENCODER, name, args.device, args.teacher_batch_size)
        weights = ""
    _say(f"4. Teacher scores: {teacher.model_name}{weights} on (query, positive) and (query, negative)")
    scores = teacher_scores(teacher, corpus, queries, negatives, folder.labels, deadline, show_progress=show)
    marks["teacher"] = time.monotonic()
    _check_budget(deadline, "before training")

    from ctxir.adapt import train
    from ctxir.encoders.bi_encoder import set_prompts

    # the plan takes the settings AdaptArgs shares with it by name (LoRA, optimiser, steps, checkpoints, seed, device)
    shared = {f.name: getattr(args, f.name) for f in fields(train.TrainPlan) if hasattr(args, f.name)}
    plan = train.TrainPlan(**shared, show_progress=not args.quiet)
    model = train.load_student(args.model, args.device, args.max_seq_length, plan)
    set_prompts(model, args.query_prompt, args.document_prompt)  # trained, saved and evaluated with them
    rows = train.training_rows(queries, corpus, negatives, scores)
    if not rows["anchor"]:
        raise CtxirError(
            f"--corpus {args.corpus!r}: no pseudo-query got a negative (BM25 and dense found no other document "
            "for any): the documents share too little text to adapt on; add documents"
        )
    scale = train.teacher_scale(model, rows, seed=args.seed)
    rows["label"] = [scale * label for label in rows["label"]]
    _say(f"5. Training a LoRA adapter (rank {args.lora_rank}), MarginMSE, on {len(rows['anchor']):,} rows")
    trained = train.train_adapter(model, rows, plan, folder.checkpoints, deadline)
    marks["train"] = time.monotonic()
    if trained["stopped_by_budget"]:
        _say(
            f"   --max-minutes {args.max_minutes:g} reached: stopped at step {trained['steps_done']} of "
            f"{trained['steps_planned']} (its checkpoint is kept: rerun the same command to continue)"
        )

    _say(f"6. Saving the adapter to {args.output!r}")
    size = train.save_adapter(model, folder.final, args.model)
    record = {
        "complete": trained["steps_done"] >= trained["steps_planned"],
        "base_model": args.model,
        "adapted_without_labels": True,
        "corpus": {
            "path": args.corpus,
            "documents": len(corpus),
            "fingerprint": settings["corpus_fingerprint"],
        },
        "teacher": teacher.model_name,
        "loss": "MarginMSELoss",
        "teacher_scale": round(scale, 6),
        "queries": {"total": len(queries), **Counter(q.kind for q in queries)},
        "query_examples": {k: ts for k in ALL_KINDS if (ts := [q.text for q in queries if q.kind == k][:3])},
        "training_rows": len(rows["anchor"]),
        "training": trained,
        "adapter_bytes": size,
        "settings": settings,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": {b: round(marks[b] - marks[a], 1) for a, b in pairwise(marks)},
    }
    record["seconds"]["total"] = round(time.monotonic() - marks["start"], 1)
    write_card(folder.final, record)
    complete = record["complete"]
    folder.finish(record, keep_work=args.keep_work or not complete)
    state = "complete" if complete else f"stopped by the budget at step {trained['steps_done']}"
    _say(f"   done ({state}): adapter {size / 1e6:.2f} MB, {record['seconds']['total']:.0f} s in all")
    _say(f"   use it: ctxir evaluate --model {args.output} ...   python app.py --bi-encoder {args.output}")
    return record


def _generated(args, corpus: Corpus, show: bool) -> dict[str, list[str]]:
    """doc_id → the generator's queries, for --max-queries documents drawn with --seed (0: all)."""
    import random

    from ctxir.adapt.generator import generate_queries, load_generator
    from ctxir.encoders.models import pick_device

    model, tokenizer = load_generator(args.generator)
    model.to(pick_device(args.device))  # "auto" finds a GPU as training does
    doc_ids = sorted(corpus)
    if args.max_queries and args.max_queries < len(doc_ids):
        doc_ids = sorted(random.Random(args.seed).sample(doc_ids, args.max_queries))
    per_doc = 1 if args.max_queries else args.queries_per_doc
    _say(f"   generating {per_doc} quer{'y' if per_doc == 1 else 'ies'} for each of {len(doc_ids):,} docs")
    from tqdm.auto import tqdm

    bar = functools.partial(tqdm, desc="   generating", unit="batch") if show else None
    texts = [doc_text(corpus[d]) for d in doc_ids]
    found = generate_queries(model, tokenizer, texts, per_doc, seed=args.seed, show=bar)
    return dict(zip(doc_ids, found, strict=True))


def _encoder(args: AdaptArgs):
    """The base ``BiEncoder`` with the run's prompts, as it mines negatives and teaches."""
    from ctxir.encoders.bi_encoder import BiEncoder

    return BiEncoder(
        args.model, device=args.device, query_prompt=args.query_prompt, document_prompt=args.document_prompt
    )


def _check_budget(deadline: float | None, where: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise BudgetReached(f"it ran out {where}")


def main(argv: list[str] | None = None) -> int:
    return cli_main(AdaptArgs, run, argv)
