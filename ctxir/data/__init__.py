"""Data: read corpora, queries, qrels and sentence-pair sets (BEIR, STS, SICK, SNLI, user files).

loaders.py       readers for every dataset format ctxir takes
"""

from ctxir.data.loaders import (  # noqa: F401 -- public API
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
