"""Licenses as the Hub names them, and the one a model trained on several sources must carry (the most restrictive).

The card's ``license`` is derived from the licenses of the data the weights were trained on (and of the base
model, when its card states one): the most restrictive wins, and a combination that no single source license
covers (e.g. NonCommercial + ShareAlike) gets the Creative Commons license that carries every condition.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxir.types import CtxirError


@dataclass(frozen=True)
class License:
    """A license as the Hub names it, plus the conditions used to compare restrictiveness."""

    hub_id: str  # the card's `license:` value, e.g. "cc-by-nc-2.0", or "other"
    name: str  # human name, e.g. "CC BY-NC 2.0"
    conditions: frozenset[str] = frozenset()  # subset of {"NC", "SA", "ND", "RESEARCH"}
    link: str | None = None
    slug: str | None = None  # `license_name:` for hub_id == "other"

    @property
    def restrictiveness(self) -> int:
        weights = {"RESEARCH": 8, "NC": 4, "SA": 2, "ND": 1}
        return sum(weights[c] for c in self.conditions)


AG_CORPUS_TERMS = License(
    "other",
    "AG's corpus terms (non-commercial research only)",
    frozenset({"NC", "RESEARCH"}),
    "http://groups.di.unipi.it/~gulli/AG_corpus_of_news_articles.html",
    "ag-corpus-terms",
)
MSMARCO_TERMS = License(
    "other",
    "MS MARCO terms (non-commercial research only)",
    frozenset({"NC", "RESEARCH"}),
    "https://microsoft.github.io/msmarco/",
    "ms-marco-terms",
)
WIKIQA_TERMS = License(
    "other",
    "Microsoft Research Data License (WikiQA: research and technology development only, not in a commercial "
    "product; redistributed under the same terms)",
    frozenset({"NC", "RESEARCH", "SA"}),
    "https://www.microsoft.com/en-us/download/details.aspx?id=52419",
    "msr-data-license-wikiqa",
)
# Hub license ids for common permissive licenses (no NC/SA/ND conditions).
_PERMISSIVE = {
    "apache-2.0": "Apache 2.0",
    "mit": "MIT",
    "bsd-3-clause": "BSD 3-Clause",
    "bsd-2-clause": "BSD 2-Clause",
    "cc0-1.0": "CC0 1.0",
    "openrail": "OpenRAIL",
    "unlicense": "Unlicense",
}
_CC_HUB_IDS = {
    "cc-by-2.0",
    "cc-by-2.5",
    "cc-by-3.0",
    "cc-by-4.0",
    "cc-by-sa-3.0",
    "cc-by-sa-4.0",
    "cc-by-nc-2.0",
    "cc-by-nc-3.0",
    "cc-by-nc-4.0",
    "cc-by-nd-4.0",
    "cc-by-nc-nd-3.0",
    "cc-by-nc-nd-4.0",
    "cc-by-nc-sa-2.0",
    "cc-by-nc-sa-3.0",
    "cc-by-nc-sa-4.0",
}
KNOWN_LICENSE_EXAMPLES = (
    "CC BY-NC 2.0",
    "CC BY-SA 4.0",
    "CC BY-NC-SA 3.0",
    "MS MARCO non-commercial research only",
    "Microsoft Research Data License",
    "apache-2.0",
    "mit",
)


def parse_license(text: str | None) -> License | None:
    """'CC BY-NC 2.0' / 'cc-by-nc-2.0' / 'MS MARCO terms (non-commercial research)' / 'apache-2.0' → License."""
    if not text or not str(text).strip():
        return None
    low = str(text).strip().lower()
    if "ag's corpus" in low or "ag news" in low:
        return AG_CORPUS_TERMS
    if "microsoft research data license" in low or "wikiqa" in low:
        return WIKIQA_TERMS
    if "ms marco" in low or "msmarco" in low or "research only" in low or "non-commercial research" in low:
        return MSMARCO_TERMS
    match = re.fullmatch(r"cc[\s_-]*by((?:[\s_-]*(?:nc|sa|nd))*)[\s_-]*v?(\d\.\d)(?:\s+international)?", low)
    if match:
        parts = re.findall(r"nc|sa|nd", match.group(1))
        order = [p for p in ("nc", "nd", "sa") if p in parts]  # the Hub spells them by-nc-nd / by-nc-sa
        hub_id = "-".join(["cc", "by", *order, match.group(2)])
        if hub_id not in _CC_HUB_IDS:
            return None
        name = "CC BY" + ("-" + "-".join(p.upper() for p in order) if order else "") + " " + match.group(2)
        return License(
            hub_id,
            name,
            frozenset(p.upper() for p in order),
            f"https://creativecommons.org/licenses/{'-'.join(['by', *order])}/{match.group(2)}/",
        )
    slug = re.sub(r"[\s_]+", "-", low)
    if slug in _PERMISSIVE:
        return License(slug, _PERMISSIVE[slug])
    if slug in ("apache-2", "apache", "apache-license-2.0"):
        return License("apache-2.0", "Apache 2.0")
    return None


def combine_licenses(sources: Sequence[tuple[str, License]]) -> tuple[License, str]:
    """The license a model trained on ``sources`` [(what, License)] must carry, and a sentence saying why."""
    if not sources:
        raise CtxirError("no training data license to derive the model license from")
    union = frozenset().union(*(lic.conditions for _, lic in sources))
    strictest = max(sources, key=lambda s: s[1].restrictiveness)[1]
    listed = "; ".join(f"{what}: {lic.name}" for what, lic in sources)
    if strictest.conditions >= union:
        chosen = strictest
        why = (
            f"The model derives from sources under these terms — {listed}. The most restrictive, "
            f"{chosen.name}, applies to the model as a whole"
        )
    elif "RESEARCH" in union:
        chosen = MSMARCO_TERMS
        why = (
            f"The model derives from sources under these terms — {listed}. Their conditions together "
            f"({', '.join(sorted(union))}) allow non-commercial research use only, so the model is released "
            f"for that use only, and every other condition ({', '.join(sorted(union - {'RESEARCH', 'NC'}))}) "
            "still applies"
        )
    else:
        order = [p for p in ("NC", "ND", "SA") if p in union]
        chosen = parse_license("CC BY-" + "-".join(order) + " 4.0")
        assert chosen is not None  # by-nc-sa / by-nc-nd / by-nd / by-sa 4.0 are all Hub ids
        why = (
            f"The model derives from sources under these terms — {listed}. No single one of them carries "
            f"every condition ({', '.join(order)}), so the model uses {chosen.name}, which carries them all"
        )
    if chosen.conditions & {"NC", "RESEARCH"}:
        why += ". Commercial use is not allowed"
    return chosen, why + "."
