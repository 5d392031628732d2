"""What licence a model carries: licences as the Hub names them, the datasets a card knows (their terms, Hub copy,
link, citation), and the one licence a model trained on several sources carries."""

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
# the Creative Commons licenses the Hub has an id for: variant → versions
_CC_VERSIONS = {
    "": ("2.0", "2.5", "3.0", "4.0"),
    "sa-": ("3.0", "4.0"),
    "nc-": ("2.0", "3.0", "4.0"),
    "nd-": ("4.0",),
    "nc-nd-": ("3.0", "4.0"),
    "nc-sa-": ("2.0", "3.0", "4.0"),
}
_CC_HUB_IDS = {f"cc-by-{variant}{v}" for variant, versions in _CC_VERSIONS.items() for v in versions}
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


# a split name a training script writes → what the card's Data table says of it
SPLIT_NAMES = {
    "train-silver": "train sentences re-paired, silver labels (a teacher bi-encoder's cosine on the gold "
    "scale; training/silver_pairs.py)"
}


@dataclass(frozen=True)
class DatasetInfo:
    key: str
    pretty: str
    hub_id: str | None  # the Hub copy of the same data, for the card's `datasets:` list
    url: str
    citation: str  # BibTeX


KNOWN_DATASETS = {
    "agnews": DatasetInfo(
        "agnews",
        "AG News",
        "fancyzhx/ag_news",
        "http://groups.di.unipi.it/~gulli/AG_corpus_of_news_articles.html",
        "@inproceedings{zhang-2015-character,\n  title = {Character-level Convolutional Networks for Text "
        "Classification},\n  author = {Zhang, Xiang and Zhao, Junbo and LeCun, Yann},\n  booktitle = "
        "{NeurIPS},\n  year = {2015}\n}",
    ),
    "scifact": DatasetInfo(
        "scifact",
        "SciFact (BEIR)",
        "BeIR/scifact",
        "https://github.com/allenai/scifact",
        "@inproceedings{wadden-etal-2020-fact,\n  title = {Fact or Fiction: Verifying Scientific "
        "Claims},\n  author = {Wadden, David and Lin, Shanchuan and Lo, Kyle and Wang, Lucy Lu and "
        "van Zuylen, Madeleine and Cohan, Arman and Hajishirzi, Hannaneh},\n  booktitle = {EMNLP},"
        "\n  year = {2020}\n}",
    ),
    "stsb": DatasetInfo(
        "stsb",
        "STS Benchmark",
        "mteb/stsbenchmark-sts",
        "https://ixa2.si.ehu.eus/stswiki/index.php/STSbenchmark",
        "@inproceedings{cer-etal-2017-semeval,\n  title = {SemEval-2017 Task 1: Semantic Textual "
        "Similarity Multilingual and Crosslingual Focused Evaluation},\n  author = {Cer, Daniel and "
        "Diab, Mona and Agirre, Eneko and Lopez-Gazpio, I{\\~n}igo and Specia, Lucia},\n  booktitle = "
        "{SemEval-2017},\n  year = {2017}\n}",
    ),
    "sick": DatasetInfo(
        "sick",
        "SICK",
        "mteb/sickr-sts",
        "https://marcobaroni.org/composes/sick.html",
        "@inproceedings{marelli-etal-2014-sick,\n  title = {A SICK cure for the evaluation of "
        "compositional distributional semantic models},\n  author = {Marelli, Marco and Menini, "
        "Stefano and Baroni, Marco and Bentivogli, Luisa and Bernardi, Raffaella and Zamparelli, "
        "Roberto},\n  booktitle = {LREC},\n  year = {2014}\n}",
    ),
    "snli": DatasetInfo(
        "snli",
        "SNLI",
        "stanfordnlp/snli",
        "https://nlp.stanford.edu/projects/snli/",
        "@inproceedings{bowman-etal-2015-large,\n  title = {A large annotated corpus for learning "
        "natural language inference},\n  author = {Bowman, Samuel R. and Angeli, Gabor and Potts, "
        "Christopher and Manning, Christopher D.},\n  booktitle = {EMNLP},\n  year = {2015}\n}",
    ),
    "msmarco": DatasetInfo(
        "msmarco",
        "MS MARCO (passage sample)",
        "microsoft/ms_marco",
        "https://microsoft.github.io/msmarco/",
        "@article{bajaj2016msmarco,\n  title = {MS MARCO: A Human Generated MAchine Reading "
        "COmprehension Dataset},\n  author = {Bajaj, Payal and others},\n  journal = "
        "{arXiv:1611.09268},\n  year = {2016}\n}",
    ),
    "squad": DatasetInfo(
        "squad",
        "SQuAD v1.1 (questions → their Wikipedia paragraphs)",
        "rajpurkar/squad",
        "https://rajpurkar.github.io/SQuAD-explorer/",
        "@inproceedings{rajpurkar-etal-2016-squad,\n  title = {SQuAD: 100,000+ Questions for Machine "
        "Comprehension of Text},\n  author = {Rajpurkar, Pranav and Zhang, Jian and Lopyrev, Konstantin and "
        "Liang, Percy},\n  booktitle = {EMNLP},\n  year = {2016}\n}",
    ),
    "wikiqa": DatasetInfo(
        "wikiqa",
        "WikiQA (Bing questions → answer sentences)",
        "microsoft/wiki_qa",
        "https://www.microsoft.com/en-us/download/details.aspx?id=52419",
        "@inproceedings{yang-etal-2015-wikiqa,\n  title = {WikiQA: A Challenge Dataset for Open-Domain "
        "Question Answering},\n  author = {Yang, Yi and Yih, Wen-tau and Meek, Christopher},\n  booktitle = "
        "{EMNLP},\n  year = {2015}\n}",
    ),
}
# other spellings of a KNOWN_DATASETS key, as dataset_info normalises names (lowercase letters and digits)
_OTHER_SPELLINGS = {
    "agnews": ("agnewstopicclassification",),
    "scifact": ("beirscifact",),
    "stsb": ("stsbenchmark", "stsbenchmarksts"),
    "sick": ("sickr", "sicke"),
    "msmarco": ("msmarcosample", "msmarcopassage"),
    "squad": ("squadv11",),
}
_DATASET_ALIASES = {alias: key for key in KNOWN_DATASETS for alias in (key, *_OTHER_SPELLINGS.get(key, ()))}
# each training source's terms, as parse_license reads them: a training run writes them into datasets[].license
DATA_LICENSES = {
    "scifact": "CC BY-NC 2.0",
    "stsb": "CC BY-SA 4.0",
    "sick": "CC BY-NC-SA 3.0",
    "snli": "CC BY-SA 4.0",
    "msmarco": "MS MARCO terms (non-commercial research only)",
    "agnews": "AG's corpus terms (non-commercial research only)",
    "squad": "CC BY-SA 4.0",
    "wikiqa": "Microsoft Research Data License (WikiQA)",
    "wikiqa-topics": "Microsoft Research Data License (WikiQA)",  # made from WikiQA train's summaries
}
BEIR_CITATION = (
    "@inproceedings{thakur2021beir,\n  title = {BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation "
    "of Information Retrieval Models},\n  author = {Thakur, Nandan and Reimers, Nils and R{\\\"u}ckl{\\'e}, "
    "Andreas and Srivastava, Abhishek and Gurevych, Iryna},\n  booktitle = {NeurIPS Datasets and "
    "Benchmarks},\n  year = {2021}\n}"
)
SBERT_CITATION = (
    "@inproceedings{reimers-2019-sentence-bert,\n  title = {Sentence-BERT: Sentence Embeddings using "
    "Siamese BERT-Networks},\n  author = {Reimers, Nils and Gurevych, Iryna},\n  booktitle = {EMNLP-IJCNLP},"
    "\n  year = {2019}\n}"
)


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
