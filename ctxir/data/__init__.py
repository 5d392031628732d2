"""Data: read corpora, queries, qrels and sentence-pair sets (BEIR, STS, SICK, SNLI, user files).

    loaders.py       readers for every dataset format ctxir takes (was ``ctxir.data``)

``ctxir.data`` was one module before it became this package: it still gives every name that module had
(the same objects, from :mod:`ctxir.data.loaders`), its private helpers too, so old imports keep working.
"""

from ctxir._moved import forward_names
from ctxir.data.loaders import (  # noqa: F401 -- what the old ``ctxir.data`` module held
    NLI_LABELS,
    USER_CORPUS_SUFFIXES,
    NliPair,
    PathLike,
    SickPair,
    load_beir,
    load_corpus,
    load_corpus_any,
    load_pairs,
    load_qrels,
    load_queries,
    load_sick,
    load_snli,
    load_sts,
    load_user_corpus,
)

# the old module's other names (imported helpers, private functions), from where they live now
__getattr__ = forward_names(__name__, "ctxir.data.loaders")
