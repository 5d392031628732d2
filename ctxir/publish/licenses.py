"""Licenses as the Hub names them, and the one a model trained on several sources carries.

The card's ``license`` comes from the data the weights were trained on (and the base model, when its card states
one): their shared license, or ``other`` with a file listing each source's terms where they differ.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ctxir.types import CtxirError


@dataclass(frozen=True)
class License:
    """A license as the Hub names it, and its conditions."""

    hub_id: str  # the card's `license:` value, e.g. "cc-by-nc-2.0", or "other"
    name: str  # human name, e.g. "CC BY-NC 2.0"
    conditions: frozenset[str] = frozenset()  # subset of {"NC", "SA", "ND", "RESEARCH"}
    link: str | None = None
    slug: str | None = None  # `license_name:` for hub_id == "other"


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


# `license_link` of a model whose sources' terms differ: the file in its repo that lists them (``license_file``).
LICENSE_FILE = "LICENSE.md"
SOURCES_TERMS = License(
    "other",
    "the terms of each training source (LICENSE.md)",
    frozenset(),
    LICENSE_FILE,
    "training-data-terms",
)


def allowed_use(sources: Sequence[tuple[str, License]]) -> str:
    """One plain sentence of what use ``sources`` [(what, License)] allow together."""
    union = frozenset().union(*(lic.conditions for _, lic in sources))
    use = (
        "non-commercial research use only"
        if "RESEARCH" in union
        else "non-commercial use only"
        if "NC" in union
        else "any use, commercial included, with attribution"
    )
    sentence = f"Together these terms allow {use}"
    share_alike = [what for what, lic in sources if "SA" in lic.conditions]
    if share_alike:
        sentence += f"; what you share must also keep the share-alike terms of {', '.join(share_alike)}"
    if "ND" in union:
        sentence += "; no-derivatives terms apply to what you change and share"
    return sentence + (". Commercial use is not allowed." if union & {"NC", "RESEARCH"} else ".")


def combine_licenses(sources: Sequence[tuple[str, License]]) -> tuple[License, str]:
    """The license a model trained on ``sources`` [(what, License)] carries, and a sentence of what they allow.

    The one license every source shares (permissive ones aside), else ``other`` linked to ``LICENSE_FILE``, which
    lists each source's terms: no combined license is invented."""
    if not sources:
        raise CtxirError("no training data license to derive the model license from")
    licenses = {lic for _, lic in sources}
    restricted = {lic for lic in licenses if lic.conditions or lic.hub_id == "other"}
    if len(licenses) == 1:
        chosen = next(iter(licenses))
    elif len(restricted) == 1:  # one restricted source's terms, the rest permissive: those terms cover all
        chosen = next(iter(restricted))
    else:
        # what they allow together, for the card's "Not for"
        chosen = replace(SOURCES_TERMS, conditions=frozenset().union(*(lic.conditions for lic in licenses)))
    return chosen, allowed_use(sources)


def license_file(sources: Sequence[tuple[str, License]]) -> str:
    """``LICENSE_FILE``'s text: each source with its terms and link, then what they allow together."""
    lines = ["# Terms of this model's training sources", ""]
    lines += [f"- {what}: {lic.name}" + (f" ({lic.link})" if lic.link else "") for what, lic in sources]
    return "\n".join([*lines, "", allowed_use(sources), ""])
