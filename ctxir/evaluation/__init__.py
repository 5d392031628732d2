"""Evaluation: metrics, ``ctxir evaluate`` and fusion tuning (evaluate.py), ``ctxir compare`` (paired tests between
saved runs), ``ctxir report`` (the failure report: report.py, report_html.py) and the suite's table (suite.py)."""

from ctxir.evaluation.metrics import (  # noqa: F401 -- public API
    EvalResult,
    evaluate_run,
    format_table,
    paired_recall_at_k,
    paired_retrieval,
    paired_test,
    sts_correlation,
)
