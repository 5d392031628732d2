"""The datasets a card knows by name: how it calls them, their Hub copy, link and citation; the split names it says."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
# each training source's terms, as ctxir.publish.licenses.parse_license reads them (a training run writes them
# into metrics.json's datasets[].license; the card names each one)
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
EVAL_ONLY_NAMES = {
    "ctxir-demo": "ctxir's demo corpus",
    "medline": "Medline",
    "npl": "NPL",
    "lisa": "LISA",
}


def display_name(name: str) -> str:
    """How a card names a metrics.json dataset: its known name, else the suite's, else the name as written."""
    info = dataset_info(name)
    return info.pretty if info else EVAL_ONLY_NAMES.get(str(name), str(name))


def dataset_info(name: str) -> DatasetInfo | None:
    """A metrics.json dataset name ('scifact', 'stsbenchmark', 'msmarco_sample', ...) → what the card says of it."""
    key = _DATASET_ALIASES.get(re.sub(r"[^a-z0-9]", "", str(name).lower()))
    return KNOWN_DATASETS.get(key) if key else None
