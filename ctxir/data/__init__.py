"""Data: read corpora, queries, qrels, sentence-pair sets (BEIR, STS, SICK, SNLI, user files) and labelled texts.

reading.py         the file helpers every reader shares: checked paths, UTF-8 text, numbered lines, file:line errors
beir.py            BEIR folders: corpus.jsonl, queries.jsonl, qrels
sentence_pairs.py  STS Benchmark, paired-retrieval files, SICK, SNLI
user_corpus.py     a user's corpus file (.txt/.jsonl/.csv/.tsv), or a BEIR folder
general.py         SQuAD, WikiQA and MS MARCO triples as relevance sets, for training re-rankers
labelled.py        labelled texts for classification: ``Label``, (text, label) files, label files, train/test folders
demo.py            the packaged demo data: the demo corpus, its example queries, the app's preset texts (``ASSETS``)
"""

from ctxir.data.beir import load_beir, load_corpus, load_qrels, load_queries, write_beir  # noqa: F401 -- public API
from ctxir.data.labelled import Label, load_folder, load_labelled, load_labels  # noqa: F401 -- public API
from ctxir.data.reading import PathLike  # noqa: F401 -- public API
from ctxir.data.sentence_pairs import (  # noqa: F401 -- public API
    NLI_LABELS,
    NliPair,
    SickPair,
    load_pairs,
    load_sick,
    load_snli,
    load_sts,
)
from ctxir.data.user_corpus import USER_CORPUS_SUFFIXES, load_corpus_any, load_user_corpus  # noqa: F401 -- public API
