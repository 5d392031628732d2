"""ctxir — contextual-embedding information retrieval. One subpackage per step, each importing only from those
before it: data → encoders → retrieval → rerank → explain → evaluation → publish → app."""

# ruff: noqa: F401 -- every import is exported (__all__, below)
from types import ModuleType as _ModuleType

from ctxir.classify import CentroidClassifier, KnnClassifier, LogRegClassifier, Prediction, ZeroShotClassifier
from ctxir.data.beir import load_beir
from ctxir.data.labelled import Label, load_labelled
from ctxir.data.sentence_pairs import load_sick, load_snli, load_sts
from ctxir.data.user_corpus import load_corpus_any
from ctxir.encoders.bi_encoder import BiEncoder, EmbeddingCache, pool
from ctxir.encoders.internals import inspect_text
from ctxir.encoders.models import DEFAULT_BI_ENCODER, DEFAULT_CROSS_ENCODER, pick_device, resolve_model
from ctxir.evaluation.compare import compare_systems
from ctxir.evaluation.metrics import (
    EvalResult,
    evaluate_run,
    paired_recall_at_k,
    paired_retrieval,
    paired_test,
    sts_correlation,
)
from ctxir.explain.attention import cls_attention
from ctxir.explain.bi_encoder import explain_bi_encoder, mean_pooling_contributions
from ctxir.explain.rerankers import explain_cls_lr, explain_cross_encoder
from ctxir.rerank.cls_lr import ClsLrRanker
from ctxir.rerank.passages import Passages
from ctxir.rerank.pipeline import Pipeline, RankedHit, SearchResult, StageFusion
from ctxir.rerank.rankers import CrossEncoderReranker, Reranker
from ctxir.rerank.registry import (
    RERANKERS,
    RerankerKind,
    available_rerankers,
    load_reranker,
    rank,
    register_reranker,
)
from ctxir.retrieval.fusion import fuse, reciprocal_rank_fusion, weighted_score_fusion
from ctxir.retrieval.registry import FIRST_STAGES, FirstStageKind, register_first_stage
from ctxir.retrieval.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Retriever
from ctxir.types import Corpus, CtxirError, Hit, Internals, Qrels, Queries, Run

__version__ = "0.1.0"

# every name imported above (not the subpackages those imports load)
__all__ = sorted(n for n, v in globals().items() if not n.startswith("_") and not isinstance(v, _ModuleType))
