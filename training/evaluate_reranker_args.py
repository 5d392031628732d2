"""The arguments of ``training/evaluate_reranker.py`` (``--help`` lists them all; a recipe YAML gives the same names)
and their checks (``check_args``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxir.evaluation.suite import STAGES as SUITE_STAGES
from ctxir.types import CtxirError
from training.common import DEFAULT_DATA_DIR, SQUAD_DEV_QUERIES
from training.fusion_choice import FUSION_METHODS, FUSION_RULES

EVALUATION_FILE = "evaluation.json"
FUSION_FILE = "fusion.json"
FUSION_DEV_PARTS = ("scifact", "squad", "squad-topics")  # --fusion-dev: dev_claims builds each
METRICS = ("nDCG@10", "MRR@10")
# the out-of-domain suite (--suite): SciFact test, the MS MARCO sample, the app's demo corpus and three classic
# collections of other domains (../shared/data/classic, evaluation only: nothing is chosen on them)
COLLECTIONS = ("scifact", "msmarco", "demo", "med", "npl", "lisa")
COLLECTION_NAMES = {
    "scifact_test": ("scifact", "test"),
    "msmarco": ("msmarco", "sample"),
    "demo": ("ctxir-demo", "demo"),
    "med": ("medline", "test"),
    "npl": ("npl", "test"),
    "lisa": ("lisa", "test"),
}


@dataclass
class EvaluateRerankerArgs:
    model: str = field(
        metadata={
            "help": "re-ranker folder: a cross-encoder (train_cross_encoder.py output or a "
            "shipped one) or a CLS-LR ranker (train_cls_lr.py output)"
        }
    )
    kind: str = field(
        default="auto",
        metadata={
            "help": "the re-ranker kind (ctxir.rerank.registry: cross-encoder, cls-lr, ...); auto = cls-lr for a folder "
            "with cls_lr_config.json, else cross-encoder"
        },
    )
    dev_from: str = field(
        default="",
        metadata={
            "help": "folder whose metrics.json names the held-out training claims (extra.heldout_query_ids) the fusion "
            "is chosen on (default --model; a CLS-LR ranker: the cross-encoder it was trained on)"
        },
    )
    data_dir: str = field(default=DEFAULT_DATA_DIR, metadata={"help": "benchmark data root (../shared/data)"})
    choose_fusion: bool = field(
        default=False,
        metadata={
            "help": "choose the fused mode on the model's held-out training claims and write <model>/fusion.json"
        },
    )
    fusion_depth: int = field(
        default=20, metadata={"help": "BM25 candidates per claim when choosing the fusion"}
    )
    fusion_first_stages: str = field(
        default="bm25,dense,hybrid",
        metadata={
            "help": "first stages whose fusion weight is chosen, each on its own candidates of the same claims (BM25's "
            "is fusion.json's top level, the others go under first_stages; the app and the CLI use the one "
            "of the first stage in use, else BM25's)"
        },
    )
    fusion_dev: str = field(
        default="scifact",
        metadata={
            "help": "dev queries the passages and the fused mode are chosen on, a comma list: scifact (the model's "
            "held-out training claims, metrics.json's heldout_query_ids), squad (--fusion-dev-queries SQuAD "
            "questions of ../shared/data/general that the model did not train on, over SQuAD's paragraphs), "
            "squad-topics (a SQuAD paragraph's first words as a long topical query, its article's other "
            "paragraphs relevant: a task none of ctxir's re-rankers trains on, where a first stage can be the stronger); each "
            "part counts equally (the mean of their nDCG@10), so no one collection decides"
        },
    )
    fusion_dev_queries: int = field(
        default=SQUAD_DEV_QUERIES, metadata={"help": "--fusion-dev squad: questions drawn (seeded)"}
    )
    fusion_dev_topics: int = field(
        default=2,
        metadata={
            "help": "--fusion-dev squad-topics: paragraphs drawn (seeded) from each SQuAD article, each one's first "
            "--topic-words words a query for the article's other paragraphs"
        },
    )
    topic_words: int = field(
        default=50, metadata={"help": "--fusion-dev squad-topics: words of a query (a statement of a topic)"}
    )
    fusion_rule: str = field(
        default="mean",
        metadata={
            "help": "how a fusion weight is chosen over the --fusion-dev parts: mean (the best mean nDCG@10 of the "
            "parts) or worst-part (the best smallest gain over the first stage of any part: a weight the dev "
            "parts where the re-ranker is weak also accept, the way the suite's must is stated per collection)"
        },
    )
    fusion_methods: str = field(
        default="rrf",
        metadata={
            "help": "stage fusions the choice tries, comma list of rrf (rank fusion, FIRST_STAGE_WEIGHTS) and "
            "calibrated (the first stage's min–max score + the re-ranker's probability from the model's "
            "calibration.json, CALIBRATED_WEIGHTS); each first stage gets the best of all of them by --fusion-rule"
        },
    )
    fusion_min_gain: float = field(
        default=0.0,
        metadata={
            "help": "a first stage whose best fused dev nDCG@10 beats it alone by less than this gets the grid's largest "
            "first-stage weight instead (the re-ranker then only breaks its near-ties): a weight is trusted only "
            "for a dev gain larger than checkpoints' spread on the same claims (0 = always the best weight)"
        },
    )
    fusion_max_loss: float = field(
        default=0.005,
        metadata={
            "help": "a fused mode more than this nDCG@10 below its first stage on any dev part is not chosen: the "
            "choice moves to larger first-stage weights (up to ctxir.rerank.stage_fusion.TIE_BREAK_WEIGHT: the "
            "re-ranker orders only the first stage's ties) until one holds, else to the one that loses least. The "
            "suite's must (fused ≥ first stage − 0.005), asked of dev; a negative value turns it off"
        },
    )
    choose_passages: bool = field(
        default=False,
        metadata={
            "help": "cross-encoder: choose on the same held-out claims (alone, nDCG@10) between reading each document's "
            "first max-length tokens and its best window (MaxP, --passage-words/--passage-stride), write "
            "<model>/passages.json; done before the fusion is chosen, which then uses the choice"
        },
    )
    passage_words: int = field(
        default=70,
        metadata={"help": "MaxP window, words (70 ≈ 100 tokens: a 128-token model's room beside a claim)"},
    )
    passage_stride: int = field(default=50, metadata={"help": "MaxP: a new window every N words"})
    read_tokens: int = field(
        default=0,
        metadata={
            "help": "--choose-passages: tokens each (query, window) pair is read with, kept in passages.json (0 = the "
            "model's own max length; 512 reads a paragraph-long query beside a whole window, where the 128 tokens "
            "the top layers trained on cut both)"
        },
    )
    depths: str = field(
        default="20",
        metadata={
            "help": "BM25 depths re-ranked on SciFact test, e.g. 20,100 ('' = evaluate nothing, only choose: "
            "--choose-passages, --choose-fusion)"
        },
    )
    collections: str = field(
        default="scifact,msmarco,demo",
        metadata={
            "help": "what to evaluate: scifact (test, seen/unseen split), msmarco (sample), demo (the app's corpus), "
            "med, npl, lisa (classic collections of other domains)"
        },
    )
    other_first_stages: str = field(
        default="bm25,hybrid",
        metadata={
            "help": "first stages re-ranked at --other-depth on every collection but SciFact's BM25 (which uses --depths); "
            "hybrid encodes the corpus with all-MiniLM-L6-v2 once, cached, and fuses each part's top 100 as the "
            "app does"
        },
    )
    suite: bool = field(
        default=False,
        metadata={
            "help": "the out-of-domain suite that decides shipping: every collection, first stages bm25, dense and "
            "hybrid, top 20 (sets --collections, --other-first-stages and --depths)"
        },
    )
    other_depth: int = field(default=20, metadata={"help": "candidates re-ranked on msmarco and demo"})
    max_queries: int = field(default=0, metadata={"help": "first N test queries per collection (0 = all)"})
    batch_size: int = 32
    device: str = "auto"
    torch_threads: int = field(default=1, metadata={"help": "CPU threads for torch (0 = torch's default)"})
    rerank_backend: str = field(
        default="torch",
        metadata={
            "help": "a cross-encoder's scoring backend: torch, onnx or onnx-int8 (ctxir.rerank.RERANK_BACKENDS; "
            "onnx-int8 is the app's default)"
        },
    )
    output: str = field(default="", metadata={"help": f"default <model>/{EVALUATION_FILE}"})
    scores_dir: str = field(
        default="",
        metadata={
            "help": "keep each query's scores in this folder as they are computed: a killed run resumes where it "
            "stopped, and several runs of the same command on one machine share the work (each claims a query "
            "before scoring it); one folder per model ('' = keep nothing)"
        },
    )
    update_metrics: bool = field(
        default=True,
        metadata={
            "help": "also add the nDCG@10 rows to <model>/metrics.json's evaluations (what the model card shows)"
        },
    )


def comma_list(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


def check_args(args: EvaluateRerankerArgs) -> tuple[list[int], list[str]]:
    """(--depths, --collections), checked before any model loads."""
    if args.suite:
        args.collections, args.other_first_stages, args.depths = (
            ",".join(COLLECTIONS),
            ",".join(SUITE_STAGES),
            "20",
        )
    depths = sorted({int(d) for d in args.depths.split(",") if d.strip()})
    if any(d < 10 for d in depths):
        raise CtxirError(f"--depths {args.depths!r}: every depth must be ≥ 10 (nDCG@10 needs ten candidates)")
    from ctxir.rerank.pipeline import FIRST_STAGES

    for kind in comma_list(args.fusion_first_stages) + comma_list(args.other_first_stages):
        if kind not in FIRST_STAGES:
            raise CtxirError(
                f"first stage {kind!r} (--fusion-first-stages / --other-first-stages) is not known: "
                f"use {', '.join(FIRST_STAGES)}, comma-separated"
            )
    for part in comma_list(args.fusion_dev):
        if part not in FUSION_DEV_PARTS:
            raise CtxirError(
                f"--fusion-dev names {part!r}: use a comma list of {', '.join(FUSION_DEV_PARTS)}"
            )
    for method in comma_list(args.fusion_methods):
        if method not in FUSION_METHODS:
            raise CtxirError(
                f"--fusion-methods names {method!r}: use a comma list of {', '.join(FUSION_METHODS)}"
            )
    if args.fusion_rule not in FUSION_RULES:
        raise CtxirError(
            f"--fusion-rule {args.fusion_rule!r} is not known: use one of {', '.join(FUSION_RULES)}"
        )
    collections = [c.strip() for c in args.collections.split(",") if c.strip()]
    for c in collections:
        if c not in COLLECTIONS:
            raise CtxirError(f"--collections names {c!r}: use a comma list of {', '.join(COLLECTIONS)}")
    if not depths and not (args.choose_passages or args.choose_fusion):
        # '' is how the choosing recipes say "evaluate nothing"; alone it would run nothing and exit 0
        raise CtxirError(
            f"--depths {args.depths!r} evaluates nothing (it is for a run that only chooses, with "
            "--choose-passages or --choose-fusion): to evaluate other collections without SciFact's test figures, "
            f"leave scifact out of --collections (now {args.collections!r}) and --depths at its default"
        )
    return depths, collections
