"""``ctxir adapt``: adapt the bi-encoder to a user's corpus without labels (GPL-style, no query generator).

queries.py    pseudo-queries cut from the documents: titles, keyword terms, sentences (inverse cloze), word spans (cropping)
negatives.py  hard negatives mined with BM25 and dense on the same corpus; the teacher's scores of them
train.py      the LoRA adapter trained by sentence-transformers' trainer (MarginMSELoss / MNRL); the time budget
work.py       the output folder: work files a rerun continues from, the unfinished marker, adapt.json
cli.py        ``AdaptArgs`` and ``run``: the command's numbered steps
"""

from ctxir.adapt.cli import MIN_DOCUMENTS, AdaptArgs, run  # noqa: F401 -- public API
from ctxir.adapt.queries import QUERY_KINDS, PseudoQuery, pseudo_queries  # noqa: F401 -- public API
from ctxir.adapt.work import INCOMPLETE_MARKER, RECORD_FILE  # noqa: F401 -- public API
