"""Data readers: BEIR folders, user corpora, sentence-pair sets (STS, SICK, SNLI), relevance sets for training
(general.py), labelled texts and the packaged demo data; every bad input a ``CtxirError`` naming the file and line."""

from ctxir.data.beir import load_beir, load_corpus, load_qrels, load_queries, write_beir  # noqa: F401 -- public API
from ctxir.data.labelled import load_labelled, load_labels  # noqa: F401 -- public API
from ctxir.data.sentence_pairs import load_sick, load_snli, load_sts  # noqa: F401 -- public API
from ctxir.data.user_corpus import load_corpus_any, load_user_corpus  # noqa: F401 -- public API
