"""``StageFusion``: a re-ranker's scores fused with the first stage's over the re-ranked candidates."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ctxir.checks import check_choice
from ctxir.files import read_json, verify_checksums
from ctxir.retrieval.fusion import DEFAULT_RRF_K, FUSIONS, fuse, scored_only
from ctxir.types import CtxirError, Hit

# RRF first-stage weight at which the re-ranker only breaks the first stage's ties (k = 60, depth 200: w > 845)
TIE_BREAK_WEIGHT = 1000.0


def orders_ties_only(method: str, weights) -> bool:
    """True for RRF with the first stage's weight ≥ ``TIE_BREAK_WEIGHT`` × the re-ranker's: it orders only ties.

    >>> orders_ties_only("rrf", [1000.0, 1.0]), orders_ties_only("rrf", [8.0, 1.0]), orders_ties_only("weighted", [1e4, 1])
    (True, False, False)
    """
    return method == "rrf" and weights[0] >= TIE_BREAK_WEIGHT * weights[1]


@dataclass(frozen=True)
class StageFusion:
    """Final score = "weighted" (min–max-normalised scores) or "rrf" fusion of (first stage, re-ranker).

    ``by_first_stage``: ((name, weights[, method]), …) chosen per first stage (fusion.json's "first_stages").

    >>> first = [Hit("a", 12.0), Hit("b", 9.0), Hit("c", 4.0)]  # BM25's top 3
    >>> reranked = [Hit("b", 0.9), Hit("a", 0.2)]  # the re-ranker scored the top 2: c is out
    >>> [(h.doc_id, h.score) for h in StageFusion("weighted", (0.5, 1.0)).fuse(first, reranked)]
    [('b', 1.0), ('a', 0.5)]
    >>> StageFusion("weighted", (1.0, 0.0))
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: stage fusion weights (1.0, 0.0) must be (first stage ≥ 0, re-ranker > 0)
    >>> fusion = StageFusion("rrf", (1.5, 1.0), by_first_stage=(("hybrid", (3.0, 1.0)),))
    >>> fusion.for_first_stage("hybrid").describe(), fusion.for_first_stage("dense").describe()
    ('RRF k=60, weights 3:1 (first stage : re-ranker)', 'RRF k=60, weights 1.5:1 (first stage : re-ranker)')
    """

    method: str = "weighted"
    weights: tuple[float, float] = (1.0, 1.0)  # (first stage, re-ranker)
    k: float = DEFAULT_RRF_K
    chosen_on: str = field(default="", compare=False)  # where the settings come from, for the record
    by_first_stage: tuple[tuple, ...] = ()  # ((first stage, weights[, method]), …)

    def __post_init__(self):
        for method in (self.method, *(entry[2] for entry in self.by_first_stage if len(entry) > 2)):
            check_choice(method, "stage fusion method", FUSIONS)
        for weights in (self.weights, *(entry[1] for entry in self.by_first_stage)):
            if len(weights) != 2 or min(weights) < 0 or weights[1] <= 0:
                raise CtxirError(f"stage fusion weights {weights!r} must be (first stage ≥ 0, re-ranker > 0)")

    def for_first_stage(self, name: str | None) -> StageFusion:
        """The settings for first stage ``name``: the weights chosen for it, else ``weights`` (None: as they are)."""
        if name is None:
            return self
        chosen = next((entry for entry in self.by_first_stage if entry[0] == name), None)
        if chosen is None:
            return replace(self, by_first_stage=())
        return replace(
            self,
            method=chosen[2] if len(chosen) > 2 else self.method,
            weights=tuple(chosen[1]),
            by_first_stage=(),
            chosen_on=f"{self.chosen_on} (weights chosen for the {name} first stage)".strip(),
        )

    @classmethod
    def from_tuning(cls, best: dict) -> StageFusion:
        """From ``ctxir.evaluation.evaluate.tune_stage_fusion``'s result (or its JSON record)."""
        return cls(
            best["fusion"],
            tuple(best["weights"]),
            best["k"] if best.get("k") is not None else DEFAULT_RRF_K,
            chosen_on=str(best.get("chosen_on", "")),
        )

    @classmethod
    def default(cls) -> StageFusion:
        """RRF, k=60, equal weights: the fused mode of a re-ranker whose folder has no fusion.json (untuned)."""
        return cls("rrf", (1.0, 1.0), DEFAULT_RRF_K, chosen_on="ctxir's default, not tuned")

    @classmethod
    def from_file(cls, path) -> StageFusion:
        """A fusion.json (checked against its folder's checksums.json)."""
        verify_checksums(Path(path).parent, only=path)
        try:
            data = read_json(path)
            by_stage = tuple(
                (str(name), tuple(float(w) for w in chosen["weights"]))
                + ((str(chosen["method"]),) if chosen.get("method") else ())
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
                '"chosen_on": "...", optionally "first_stages": {"hybrid": {"weights": [...], "method": "rrf"}}}'
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
            record["first_stages"] = {
                entry[0]: {"weights": list(entry[1]), **({"method": entry[2]} if len(entry) > 2 else {})}
                for entry in self.by_first_stage
            }
        return record

    @property
    def keeps_first_stage(self) -> bool:
        """True where the re-ranker only breaks the first stage's ties."""
        return orders_ties_only(self.method, self.weights)

    def describe(self) -> str:
        """One phrase for people: 'RRF k=60, weights 1:1'."""
        weights = ":".join(f"{w:g}" for w in self.weights)
        text = {"rrf": f"RRF k={self.k:g}", "weighted": "weighted scores"}[self.method]
        text += f", weights {weights} (first stage : re-ranker)"
        if self.keeps_first_stage:
            text += ": the first stage's order, the re-ranker only breaks its ties"
        return text

    def fuse(self, first: list[Hit], reranked: list[Hit]) -> list[Hit]:
        return fuse(
            [scored_only(first, reranked), reranked], self.method, self.k, self.weights, shared_ties=True
        )
