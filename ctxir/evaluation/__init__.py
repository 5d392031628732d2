"""Evaluation: metrics, ``ctxir evaluate``, ``ctxir compare``, ``ctxir report`` and the suite's table."""

from ctxir.evaluation.metrics import (  # noqa: F401 -- public API
    EvalResult,
    evaluate_run,
    format_table,
    paired_recall_at_k,
    paired_retrieval,
    paired_test,
    sts_correlation,
)
