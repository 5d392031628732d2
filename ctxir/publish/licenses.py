"""Licences as the Hub names them, the training sources a card knows, and the licence a model trained on them carries."""

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
# Hub license ids for common permissive licenses (no NC/SA/ND conditions), and their other spellings
_PERMISSIVE = {"apache-2.0": "Apache 2.0", "mit": "MIT", "bsd-3-clause": "BSD 3-Clause", "cc0-1.0": "CC0 1.0"}
_PERMISSIVE |= {"bsd-2-clause": "BSD 2-Clause", "openrail": "OpenRAIL", "unlicense": "Unlicense"}
_SPELLINGS = {"apache-2": "apache-2.0", "apache": "apache-2.0", "apache-license-2.0": "apache-2.0"}
# the Creative Commons licenses the Hub has an id for
_CC_HUB_IDS = set(
    "by-2.0 by-2.5 by-3.0 by-4.0 by-sa-3.0 by-sa-4.0 by-nc-2.0 by-nc-3.0 by-nc-4.0 by-nd-4.0 by-nc-nd-3.0 "
    "by-nc-nd-4.0 by-nc-sa-2.0 by-nc-sa-3.0 by-nc-sa-4.0".replace("by-", "cc-by-").split()
)
KNOWN_LICENSE_EXAMPLES = ("CC BY-NC 2.0", "CC BY-SA 4.0", "CC BY-NC-SA 3.0", "MS MARCO terms", "apache-2.0")
KNOWN_LICENSE_EXAMPLES += ("Microsoft Research Data License", "mit")


def parse_license(text: str | None) -> License | None:
    """'CC BY-NC 2.0' / 'cc-by-nc-2.0' / 'MS MARCO terms (non-commercial research)' / 'apache-2.0' → License."""
    if not text or not str(text).strip():
        return None
    low = str(text).strip().lower()
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
    slug = _SPELLINGS.get(slug, slug)
    return License(slug, _PERMISSIVE[slug]) if slug in _PERMISSIVE else None


# `license_link` of a model whose sources' terms differ: the file in its repo that lists them (``license_text``).
LICENSE_FILE = "LICENSE.md"
SOURCES_TERMS = License(
    "other", "the terms of each training source (LICENSE.md)", link=LICENSE_FILE, slug="training-data-terms"
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
    """(the one license ``sources`` [(what, License)] share, permissive ones aside, else ``SOURCES_TERMS``, what they
    allow): no combined license is invented."""
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


# a split name a training script writes → what the card's Data table says of it
SPLIT_NAMES = {
    "train-silver": "train sentences re-paired, silver labels (a teacher bi-encoder's cosine on the gold "
    "scale; training/silver_pairs.py)"
}


# BibTeX of the training sources and of the work a card cites, by key
_BIBTEX = r"""
@inproceedings{wadden-etal-2020-fact,
  title = {Fact or Fiction: Verifying Scientific Claims},
  author = {Wadden, David and Lin, Shanchuan and Lo, Kyle and Wang, Lucy Lu and van Zuylen, Madeleine and Cohan, Arman and Hajishirzi, Hannaneh},
  booktitle = {EMNLP},
  year = {2020}
}

@inproceedings{cer-etal-2017-semeval,
  title = {SemEval-2017 Task 1: Semantic Textual Similarity Multilingual and Crosslingual Focused Evaluation},
  author = {Cer, Daniel and Diab, Mona and Agirre, Eneko and Lopez-Gazpio, I{\~n}igo and Specia, Lucia},
  booktitle = {SemEval-2017},
  year = {2017}
}

@article{bajaj2016msmarco,
  title = {MS MARCO: A Human Generated MAchine Reading COmprehension Dataset},
  author = {Bajaj, Payal and others},
  journal = {arXiv:1611.09268},
  year = {2016}
}

@inproceedings{rajpurkar-etal-2016-squad,
  title = {SQuAD: 100,000+ Questions for Machine Comprehension of Text},
  author = {Rajpurkar, Pranav and Zhang, Jian and Lopyrev, Konstantin and Liang, Percy},
  booktitle = {EMNLP},
  year = {2016}
}

@inproceedings{yang-etal-2015-wikiqa,
  title = {WikiQA: A Challenge Dataset for Open-Domain Question Answering},
  author = {Yang, Yi and Yih, Wen-tau and Meek, Christopher},
  booktitle = {EMNLP},
  year = {2015}
}

@inproceedings{thakur2021beir,
  title = {BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of Information Retrieval Models},
  author = {Thakur, Nandan and Reimers, Nils and R{\"u}ckl{\'e}, Andreas and Srivastava, Abhishek and Gurevych, Iryna},
  booktitle = {NeurIPS Datasets and Benchmarks},
  year = {2021}
}

@inproceedings{reimers-2019-sentence-bert,
  title = {Sentence-BERT: Sentence Embeddings using Siamese BERT-Networks},
  author = {Reimers, Nils and Gurevych, Iryna},
  booktitle = {EMNLP-IJCNLP},
  year = {2019}
}
"""
CITATIONS = {entry.split("{", 1)[1].split(",", 1)[0]: entry for entry in _BIBTEX.strip().split("\n\n")}
BEIR_CITATION = CITATIONS["thakur2021beir"]
SBERT_CITATION = CITATIONS["reimers-2019-sentence-bert"]


@dataclass(frozen=True)
class DatasetInfo:
    key: str
    pretty: str
    hub_id: str | None  # the Hub copy of the same data, for the card's `datasets:` list
    url: str
    citation: str  # BibTeX


# key | card name | Hub copy | link | citation key | other spellings (as dataset_info normalises names)
_DATASETS = """
scifact | SciFact (BEIR) | BeIR/scifact | https://github.com/allenai/scifact | wadden-etal-2020-fact | beirscifact
stsb | STS Benchmark | mteb/stsbenchmark-sts | https://ixa2.si.ehu.eus/stswiki/index.php/STSbenchmark | cer-etal-2017-semeval | stsbenchmark stsbenchmarksts
msmarco | MS MARCO (passage sample) | microsoft/ms_marco | https://microsoft.github.io/msmarco/ | bajaj2016msmarco | msmarcosample msmarcopassage
squad | SQuAD v1.1 (questions → their Wikipedia paragraphs) | rajpurkar/squad | https://rajpurkar.github.io/SQuAD-explorer/ | rajpurkar-etal-2016-squad | squadv11
wikiqa | WikiQA (Bing questions → answer sentences) | microsoft/wiki_qa | https://www.microsoft.com/en-us/download/details.aspx?id=52419 | yang-etal-2015-wikiqa |
"""
_ROWS = [[cell.strip() for cell in line.split("|")] for line in _DATASETS.strip().splitlines()]
KNOWN_DATASETS = {
    key: DatasetInfo(key, name, hub, url, CITATIONS[cite]) for key, name, hub, url, cite, _ in _ROWS
}
_DATASET_ALIASES = {alias: row[0] for row in _ROWS for alias in (row[0], *row[5].split())}
# each training source's terms, as parse_license reads them: a training run writes them into datasets[].license
DATA_LICENSES = {
    "scifact": "CC BY-NC 2.0",
    "stsb": "CC BY-SA 4.0",
    "msmarco": "MS MARCO terms (non-commercial research only)",
    "squad": "CC BY-SA 4.0",
    "wikiqa": "Microsoft Research Data License (WikiQA)",
    "wikiqa-topics": "Microsoft Research Data License (WikiQA)",  # made from WikiQA train's summaries
}


# evaluation-only collections (the out-of-domain suite, training/evaluate_reranker.py): how a card names them
EVAL_ONLY_NAMES = {"ctxir-demo": "ctxir's demo corpus", "medline": "Medline", "npl": "NPL", "lisa": "LISA"}


def display_name(name: str) -> str:
    """How a card names a metrics.json dataset: its known name, else the suite's, else the name as written."""
    info = dataset_info(name)
    return info.pretty if info else EVAL_ONLY_NAMES.get(str(name), str(name))


def dataset_info(name: str) -> DatasetInfo | None:
    """A metrics.json dataset name ('scifact', 'stsbenchmark', 'msmarco_sample', ...) → what the card says of it."""
    key = _DATASET_ALIASES.get(re.sub(r"[^a-z0-9]", "", str(name).lower()))
    return KNOWN_DATASETS.get(key) if key else None
