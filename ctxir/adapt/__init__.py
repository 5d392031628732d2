"""``ctxir adapt``: adapt the bi-encoder to a corpus without labels (GPL's steps: pseudo-queries, mined negatives, a
teacher's margins, a LoRA adapter trained on them); cli.py runs the steps, work.py keeps the output folder."""

from ctxir.adapt.cli import MIN_DOCUMENTS, AdaptArgs, run  # noqa: F401 -- public API
from ctxir.adapt.queries import QUERY_KINDS, PseudoQuery, pseudo_queries  # noqa: F401 -- public API
from ctxir.adapt.work import RECORD_FILE  # noqa: F401 -- public API
