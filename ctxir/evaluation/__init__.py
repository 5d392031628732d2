"""Evaluation: metrics, the evaluation CLI, tuning, system comparison, failure reports.

metrics.py       nDCG/MRR/recall, paired tests, STS correlation
evaluate.py      ``ctxir evaluate``: retrieve, re-rank, score a collection
evaluate_args.py ``EvaluateArgs``: its arguments
tuning.py        tune fusion weights on a dev split
compare.py       compare saved systems' runs with paired tests
report.py        the failure report's data: worst queries, pairs to explain, meta, its files
report_html.py   the failure report as HTML (templates/report.html.j2), attribution colours
report_cli.py    ``ctxir report``: a report from a saved results JSON
"""

from ctxir.evaluation.metrics import (  # noqa: F401 -- public API
    METRICS,
    EvalResult,
    compare_per_query,
    evaluate_run,
    format_table,
    paired_recall_at_k,
    paired_retrieval,
    paired_test,
    sts_correlation,
)
