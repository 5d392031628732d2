"""Evaluation: metrics, the evaluation CLI, tuning, system comparison, failure reports.

    metrics.py       nDCG/MRR/recall, paired tests, STS correlation (was ``ctxir.evaluation``)
    evaluate.py      ``python -m ctxir.evaluate`` (was ``ctxir.evaluate``)
    tuning.py        tune fusion weights on a dev split (was ``ctxir.tuning``)
    compare.py       compare saved systems' runs with paired tests (was ``ctxir.compare``)
    report.py        the HTML failure report, ``python -m ctxir.report`` (was ``ctxir.report``)

``ctxir.evaluation`` was one module before it became this package: it still gives every name that module had
(the same objects, from :mod:`ctxir.evaluation.metrics`), its private helpers too, so old imports keep working.
"""

from ctxir._moved import forward_names
from ctxir.evaluation.metrics import (  # noqa: F401 -- what the old ``ctxir.evaluation`` module held
    METRICS,
    EvalResult,
    compare_per_query,
    evaluate_run,
    format_table,
    paired_recall_at_k,
    sts_correlation,
)

# the old module's other names (imported helpers, private functions), from where they live now
__getattr__ = forward_names(__name__, "ctxir.evaluation.metrics")
