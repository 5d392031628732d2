"""The first-stage registry: one ``FirstStageKind`` per first stage.

>>> list(FIRST_STAGES), FIRST_STAGES["hybrid"].fuses
(['bm25', 'dense', 'hybrid'], True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ctxir import kinds
from ctxir.checks import LiveChoices, check_choice
from ctxir.retrieval.fusion import DEFAULT_RRF_K
from ctxir.retrieval.retrievers import BM25Retriever, DenseRetriever, HybridRetriever, Retriever
from ctxir.types import CtxirError


@dataclass(frozen=True)
class HybridSettings:
    """How "hybrid" fuses its first stages: ``HybridRetriever``'s fusion, k, weights (BM25 first) and depth."""

    fusion: str = "rrf"
    k: float = DEFAULT_RRF_K
    weights: Sequence[float] | None = None
    depth: int = 100


@dataclass
class StageParts:
    """What first stages over one ``corpus`` are built from, each part built once, when first asked for."""

    corpus: Any
    encoders: Sequence = ()
    bm25_options: dict = field(default_factory=dict)
    hybrid: HybridSettings = field(default_factory=HybridSettings)
    index: str | None = None
    show_progress: bool = False
    built: dict[Any, Any] = field(default_factory=dict)

    def part(self, key, make: Callable[[], Any]):
        """The part called ``key``, made by ``make()`` the first time it is asked for."""
        if key not in self.built:
            self.built[key] = make()
        return self.built[key]

    def bm25(self) -> BM25Retriever:
        return self.part(
            "bm25",
            lambda: BM25Retriever(self.corpus, show_progress=self.show_progress, **(self.bm25_options or {})),
        )

    def dense(self, i: int = 0) -> DenseRetriever:
        """The dense retriever of the ``i``-th bi-encoder."""
        return self.part(
            ("dense", i),
            lambda: DenseRetriever(
                self.corpus, self.encoders[i], index=self.index or "auto", show_progress=self.show_progress
            ),
        )


@dataclass(frozen=True)
class FirstStageKind:
    """One first stage, ``name`` its key everywhere; ``uses_bm25`` / ``uses_bi_encoder``: what its ranking is made
    of; ``fuses``: it fuses several rankings (``--extra-models``, weights, ``--tune-on``).

    >>> from ctxir.retrieval import BM25Retriever
    >>> lexical = FirstStageKind("bm25-plain", "plain bm25", "word matches, unstemmed",
    ...                          build=lambda parts: BM25Retriever(parts.corpus, stemmer=None), uses_bm25=True)
    >>> retriever = lexical.build(StageParts({"d1": {"title": "", "text": "Otters swim in rivers."}}))
    >>> [h.doc_id for h in retriever.query("otters")], retriever.config["stemmer"]
    (['d1'], None)
    """

    name: str  # "bm25"
    label: str  # how the page names it
    ranks_by: str  # what its score is, as the API's documentation says it: "word matches"
    build: Callable[[StageParts], Retriever]  # the shared parts → this stage over their corpus
    uses_bm25: bool = False
    uses_bi_encoder: bool = False
    fuses: bool = False


def _build_hybrid(parts: StageParts) -> Retriever:
    dense = [parts.dense(i) for i in range(len(parts.encoders))]
    return HybridRetriever([parts.bm25(), *dense], **asdict(parts.hybrid))  # fusion, k, weights, depth


BM25 = FirstStageKind(kinds.BM25, "bm25", "word matches", StageParts.bm25, uses_bm25=True)
DENSE = FirstStageKind(
    kinds.DENSE, "dense", "the bi-encoder's cosine", StageParts.dense, uses_bi_encoder=True
)
HYBRID = FirstStageKind(
    kinds.HYBRID, "hybrid", "both, fused", _build_hybrid, uses_bm25=True, uses_bi_encoder=True, fuses=True
)

# name → kind, in the order they are offered
FIRST_STAGES: dict[str, FirstStageKind] = {kind.name: kind for kind in (BM25, DENSE, HYBRID)}
# the app's and ``ctxir evaluate``'s first stage when none is chosen: the suite's best alone
DEFAULT_FIRST_STAGE = HYBRID.name


def register_first_stage(kind: FirstStageKind) -> FirstStageKind:
    """Add (or replace) a first stage; everything that reads the registry offers it from then on.

    >>> from dataclasses import replace
    >>> register_first_stage(replace(BM25, name="bm 25"))
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: first stage name 'bm 25' must be letters, digits and '-' (it names result columns and flags)
    """
    if not kind.name or not kind.name.replace("-", "").isalnum():
        raise CtxirError(
            f"first stage name {kind.name!r} must be letters, digits and '-' (it names result columns and flags)"
        )
    FIRST_STAGES[kind.name] = kind
    return kind


def first_stage_choices() -> tuple[str, ...]:
    """Every registered first stage's name."""
    return tuple(FIRST_STAGES)


def get_first_stage(name: str) -> FirstStageKind:
    """The first stage called ``name``; a clear error listing the choices otherwise."""
    return FIRST_STAGES[check_choice(name, "first stage", first_stage_choices())]


def fusing_first_stages() -> list[str]:
    """The first stages that fuse several rankings."""
    return [name for name, kind in FIRST_STAGES.items() if kind.fuses]


FIRST_STAGE_CHOICES = LiveChoices(first_stage_choices)  # live: every registered first stage
