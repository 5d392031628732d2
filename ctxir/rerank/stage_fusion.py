"""``StageFusion``: a re-ranker's scores fused with the first stage's over the re-ranked candidates."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ctxir.files import read_json, verify_checksums
from ctxir.rerank.calibration import CALIBRATION_FILE, Calibration, calibration_for
from ctxir.retrieval.fusion import (
    DEFAULT_RRF_K,
    FUSIONS,
    fuse,
    scored_only,
    sorted_hits,
    weighted_score_fusion,
)
from ctxir.types import CtxirError, Hit

STAGE_FUSIONS = (*FUSIONS, "calibrated")
# RRF first-stage weight at which the re-ranker only breaks the first stage's ties: at k = 60 that needs w > 261 for
# a re-rank depth of 100 and w > 845 for 200
TIE_BREAK_WEIGHT = 1000.0


def orders_ties_only(method: str, weights) -> bool:
    """True for RRF with the first stage's weight ≥ ``TIE_BREAK_WEIGHT`` × the re-ranker's: it orders only ties.

    >>> orders_ties_only("rrf", [1000.0, 1.0]), orders_ties_only("rrf", [8.0, 1.0]), orders_ties_only("weighted", [1e4, 1])
    (True, False, False)
    """
    return method == "rrf" and weights[0] >= TIE_BREAK_WEIGHT * weights[1]


@dataclass(frozen=True)
class StageFusion:
    """Final score = fusion of (first-stage, re-ranker) over the re-ranked candidates.

    "weighted": weights · min–max-normalised scores; "rrf": Σ weight / (k + rank), a first stage's equal scores sharing
    one rank; "calibrated": first-stage weight · min–max score + re-ranker weight · sigmoid(scale · score + bias).
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
    calibration: tuple[float, float] | None = None

    def __post_init__(self):
        methods = (self.method, *(entry[2] for entry in self.by_first_stage if len(entry) > 2))
        for method in methods:
            if method not in STAGE_FUSIONS:
                raise CtxirError(
                    f"stage fusion method {method!r} is not known: use one of {', '.join(STAGE_FUSIONS)}"
                )
        if "calibrated" in methods and self.calibration is None:
            raise CtxirError(
                "stage fusion method 'calibrated' needs the re-ranker's calibration (scale, bias): fit one with "
                "`python -m training.calibrate --model <folder>`, or use method 'rrf'"
            )
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
        """A fusion.json; "calibrated" reads the same folder's calibration.json."""

        verify_checksums(Path(path).parent, only=path)
        try:
            data = read_json(path)
            by_stage = tuple(
                (str(name), tuple(float(w) for w in chosen["weights"]))
                + ((str(chosen["method"]),) if chosen.get("method") else ())
                for name, chosen in sorted((data.get("first_stages") or {}).items())
            )
            methods = {data["method"], *(entry[2] for entry in by_stage if len(entry) > 2)}
            calibration = None
            if "calibrated" in methods:
                found = calibration_for(str(Path(path).parent))
                if found is None:
                    raise CtxirError(
                        f"{str(path)!r} fuses by calibrated probability ('calibrated') but its folder has no "
                        f"{CALIBRATION_FILE}: fit one with `python -m training.calibrate --model {str(Path(path).parent)!r}`"
                    )
                calibration = (found.scale, found.bias)
            return cls(
                data["method"],
                tuple(float(w) for w in data["weights"]),
                float(data.get("k") or DEFAULT_RRF_K),
                chosen_on=str(data.get("chosen_on", "")),
                by_first_stage=by_stage,
                calibration=calibration,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise CtxirError(
                f"{str(path)!r} is not a fusion.json ({type(err).__name__}: {err}): expected "
                '{"method": "rrf"|"weighted"|"calibrated", "weights": [first stage, re-ranker], "k": 60, '
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
        if self.calibration is not None:
            record["calibration"] = {"scale": self.calibration[0], "bias": self.calibration[1]}
        return record

    @property
    def keeps_first_stage(self) -> bool:
        """True where the re-ranker only breaks the first stage's ties."""
        return orders_ties_only(self.method, self.weights)

    def describe(self) -> str:
        """One phrase for people: 'RRF k=60, weights 1:1'."""
        weights = ":".join(f"{w:g}" for w in self.weights)
        text = {
            "rrf": f"RRF k={self.k:g}",
            "weighted": "weighted scores",
            "calibrated": "the first stage's min–max score + the re-ranker's calibrated probability",
        }[self.method] + f", weights {weights} (first stage : re-ranker)"
        if self.keeps_first_stage:
            text += ": the first stage's order, the re-ranker only breaks its ties"
        return text

    def fuse(self, first: list[Hit], reranked: list[Hit]) -> list[Hit]:
        if self.method == "calibrated":
            return calibrated_fusion(scored_only(first, reranked), reranked, self.weights, self.calibration)
        return fuse(
            [scored_only(first, reranked), reranked], self.method, self.k, self.weights, shared_ties=True
        )


def calibrated_fusion(
    first: list[Hit], reranked: list[Hit], weights: tuple[float, float], calibration: tuple[float, float]
) -> list[Hit]:
    """weights[0] · first stage's min–max score + weights[1] · sigmoid(scale · re-ranker score + bias), best first.

    >>> first = [Hit("a", 12.0), Hit("b", 9.0), Hit("c", 6.0)]  # normalised: a 1, b 0.5, c 0
    >>> reranked = [Hit("c", 2.0), Hit("b", 0.0), Hit("a", -2.0)]  # probabilities 0.881, 0.5, 0.119
    >>> [(h.doc_id, round(h.score, 3)) for h in calibrated_fusion(first, reranked, (1.0, 1.0), (1.0, 0.0))]
    [('a', 1.119), ('b', 1.0), ('c', 0.881)]
    """
    probabilities = Calibration(*calibration).probabilities([h.score for h in reranked])  # (candidates,)
    fused = {h.doc_id: weights[1] * float(p) for h, p in zip(reranked, probabilities, strict=True)}
    if weights[0] > 0 and first:
        for hit in weighted_score_fusion([first], [weights[0]]):
            fused[hit.doc_id] = fused.get(hit.doc_id, 0.0) + hit.score
    return sorted_hits(fused)
