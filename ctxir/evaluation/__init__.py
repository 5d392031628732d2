"""Evaluation: metrics, the evaluation CLI, tuning, system comparison, failure reports.

    metrics.py       nDCG/MRR/recall, paired tests, STS correlation (was ``ctxir.evaluation``)
    evaluate.py      ``python -m ctxir.evaluate`` (was ``ctxir.evaluate``)
    tuning.py        tune fusion weights on a dev split (was ``ctxir.tuning``)
    compare.py       compare saved systems' runs with paired tests (was ``ctxir.compare``)
    report.py        the HTML failure report, ``python -m ctxir.report`` (was ``ctxir.report``)

``ctxir.evaluation`` was one module before it became this package: it still gives every name that module had
(the same objects, from :mod:`ctxir.evaluation.metrics`), its private helpers too, so old imports keep working.
"""

from ctxir.evaluation.metrics import (  # noqa: F401 -- what the old ``ctxir.evaluation`` module held
    METRICS,
    EvalResult,
    compare_per_query,
    evaluate_run,
    format_table,
    paired_recall_at_k,
    sts_correlation,
)


def __getattr__(name: str):
    # The old module's other names (imported helpers, private functions), from the module that holds them now.
    import ctxir.evaluation.metrics as module

    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
