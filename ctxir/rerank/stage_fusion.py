"""``StageFusion``: how a re-ranker's scores are fused with the first stage's over the re-ranked candidates.

Its own module so that both the pipeline (which fuses) and the re-ranker registry (which gives each loaded re-ranker
its ``stage_fusion``, read from the model folder's fusion.json) import it, and neither imports the other back.
``ctxir.rerank.pipeline.StageFusion`` and ``ctxir.StageFusion`` are this same class.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ctxir.files import read_json, verify_checksums
from ctxir.retrieval.fusion import DEFAULT_RRF_K, FUSIONS, fuse, scored_only
from ctxir.types import CtxirError, Hit


@dataclass(frozen=True)
class StageFusion:
    """Final score = fusion of (first-stage, re-ranker) over the re-ranked candidates.

    method "weighted": weights · min–max-normalised scores; "rrf": Σ weight / (k + rank). A first-stage weight of 0
    is plain re-ranking.

    >>> first = [Hit("a", 12.0), Hit("b", 9.0), Hit("c", 4.0)]  # BM25's top 3
    >>> reranked = [Hit("b", 0.9), Hit("a", 0.2)]  # the re-ranker scored the top 2: c is out
    >>> [(h.doc_id, h.score) for h in StageFusion("weighted", (0.5, 1.0)).fuse(first, reranked)]
    [('b', 1.0), ('a', 0.5)]
    >>> StageFusion("weighted", (1.0, 0.0))
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: stage fusion weights (1.0, 0.0) must be (first stage ≥ 0, re-ranker > 0)

    A stronger first stage earns more say: ``by_first_stage`` holds the weights chosen for each first stage by name
    (fusion.json's "first_stages"); ``for_first_stage`` picks them, and any other stage keeps ``weights``.

    >>> fusion = StageFusion("rrf", (1.5, 1.0), by_first_stage=(("hybrid", (3.0, 1.0)),))
    >>> fusion.for_first_stage("hybrid").describe(), fusion.for_first_stage("dense").describe()
    ('RRF k=60, weights 3:1 (first stage : re-ranker)', 'RRF k=60, weights 1.5:1 (first stage : re-ranker)')
    """

    method: str = "weighted"
    weights: tuple[float, float] = (1.0, 1.0)  # (first stage, re-ranker)
    k: float = DEFAULT_RRF_K
    chosen_on: str = field(default="", compare=False)  # where the settings come from, for the record
    by_first_stage: tuple[tuple[str, tuple[float, float]], ...] = ()  # ((first stage, weights), …)

    def __post_init__(self):
        if self.method not in FUSIONS:
            raise CtxirError(
                f"stage fusion method {self.method!r} is not known: use one of {', '.join(FUSIONS)}"
            )
        for weights in (self.weights, *(w for _, w in self.by_first_stage)):
            if len(weights) != 2 or min(weights) < 0 or weights[1] <= 0:
                raise CtxirError(f"stage fusion weights {weights!r} must be (first stage ≥ 0, re-ranker > 0)")

    def for_first_stage(self, name: str | None) -> StageFusion:
        """The settings a fusion over first stage ``name`` uses: the weights chosen for it, else ``weights``
        (``name`` None: these settings as they are, every stage's weights kept)."""
        if name is None:
            return self
        chosen = dict(self.by_first_stage).get(name)
        if chosen is None:
            return replace(self, by_first_stage=())
        return replace(
            self,
            weights=tuple(chosen),
            by_first_stage=(),
            chosen_on=f"{self.chosen_on} (weights chosen for the {name} first stage)".strip(),
        )

    @classmethod
    def from_tuning(cls, best: dict) -> StageFusion:
        """From ``ctxir.evaluation.tuning.tune_stage_fusion``'s result (or its JSON record)."""
        return cls(
            best["fusion"],
            tuple(best["weights"]),
            best["k"] if best.get("k") is not None else DEFAULT_RRF_K,
            chosen_on=str(best.get("chosen_on", "")),
        )

    @classmethod
    def default(cls) -> StageFusion:
        """The fused mode's settings when a re-ranker's folder has no fusion.json: RRF, k=60, equal weights.

        Untuned on purpose: on three other-domain collections a weight chosen on SciFact did not hold, while RRF
        k=60 with equal weights beat BM25 on all three."""
        return cls("rrf", (1.0, 1.0), DEFAULT_RRF_K, chosen_on="ctxir's default, not tuned")

    @classmethod
    def from_file(cls, path) -> StageFusion:
        """A fusion.json (training/ship.py puts it in the cross-encoder's folder): method "rrf"|"weighted",
        weights [first stage, re-ranker], k, chosen_on."""

        verify_checksums(Path(path).parent, only=path)  # in a shipped folder: the file as it was shipped
        try:
            data = read_json(path)
            by_stage = tuple(
                (str(name), tuple(float(w) for w in chosen["weights"]))
                for name, chosen in sorted((data.get("first_stages") or {}).items())
            )
            return cls(
                data["method"],
                tuple(float(w) for w in data["weights"]),
                float(data.get("k") or DEFAULT_RRF_K),
                chosen_on=str(data.get("chosen_on", "")),
                by_first_stage=by_stage,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise CtxirError(
                f"{str(path)!r} is not a fusion.json ({type(err).__name__}: {err}): expected "
                '{"method": "rrf"|"weighted", "weights": [first stage, re-ranker], "k": 60, '
                '"chosen_on": "...", optionally "first_stages": {"hybrid": {"weights": [...]}}}'
            ) from err

    def record(self) -> dict:
        """JSON-able: what a results file or the app's answer says about the fused mode."""
        record = {
            "method": self.method,
            "weights": list(self.weights),
            "k": self.k if self.method == "rrf" else None,
            "chosen_on": self.chosen_on,
        }
        if self.by_first_stage:
            record["first_stages"] = {name: {"weights": list(w)} for name, w in self.by_first_stage}
        return record

    def describe(self) -> str:
        """One phrase for people: 'RRF k=60, weights 1:1'."""
        weights = ":".join(f"{w:g}" for w in self.weights)
        return (
            f"RRF k={self.k:g}" if self.method == "rrf" else "weighted scores"
        ) + f", weights {weights} (first stage : re-ranker)"

    def fuse(self, first: list[Hit], reranked: list[Hit]) -> list[Hit]:
        return fuse([scored_only(first, reranked), reranked], self.method, self.k, self.weights)
