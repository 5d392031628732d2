"""Data: read corpora, queries, qrels, sentence-pair sets (BEIR, STS, SICK, SNLI, user files) and labelled texts.

loaders.py       readers for every dataset format ctxir takes, and the file helpers every reader shares
general.py       SQuAD, WikiQA and MS MARCO triples as relevance sets, for training re-rankers
labelled.py      labelled texts for classification: ``Label``, (text, label) files, label files, train/test folders
demo.py          the packaged demo data: the demo corpus, its example queries, the app's preset texts (``ASSETS``)
"""

from ctxir.data.labelled import Label, load_folder, load_labelled, load_labels  # noqa: F401 -- public API
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
