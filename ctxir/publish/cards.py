"""Model cards built from a training run's ``metrics.json``: Hub metadata (YAML front matter) and body.

Every number on a card comes from ``metrics.json``; nothing is typed by hand. ``check_card`` re-derives the
metadata from ``metrics.json`` and refuses a card that disagrees, so a card edited after the fact, or a
``metrics.json`` replaced after rendering, cannot be published.

The card's ``license`` is derived from the licenses of the data the weights were trained on (and of the base
model, when its card states one): the most restrictive wins, and a combination that no single source license
covers (e.g. NonCommercial + ShareAlike) gets the Creative Commons license that carries every condition.

Templates live in ``model_cards/<type>.md`` (Jinja) and are rendered with ``huggingface_hub.ModelCard.from_template``.

Why not sentence-transformers' own card (written as README.md by ``save_pretrained``): its ``model-index`` is built
from the evaluators that ran inside the trainer (dev sets, training-time numbers), not from the test-set
evaluations in ``metrics.json`` next to their anchors; it knows nothing of dataset licenses; and the CLS-LR ranker
has no sentence-transformers card at all. One template family for all three model types keeps the cards
comparable and lets a single check (``check_card``) guard them. Staging replaces that README.md with ours.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxir.names import looks_like_hub_id
from ctxir.types import CtxirError

METRICS_FILE = "metrics.json"
MODEL_TYPES = ("bi-encoder", "cross-encoder", "cls-lr")
TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "model_cards"
TEMPLATES = {"bi-encoder": "bi_encoder.md", "cross-encoder": "cross_encoder.md", "cls-lr": "cls_lr.md"}
EVAL_TASKS = {  # metrics.json task → (model-index task type, pretty name); types follow sentence-transformers' cards
    "retrieval": ("information-retrieval", "Information Retrieval"),
    "sts": ("semantic-similarity", "Semantic Similarity"),
    "reranking": ("reranking", "Reranking"),
    "classification": ("text-classification", "Text Classification"),
}
REQUIRED_KEYS = (
    "model_type",
    "model_name",
    "base_model",
    "objective",
    "datasets",
    "config",
    "training",
    "evaluations",
    "versions",
    "created",
)
REQUIRED_TRAINING = (
    "steps",
    "epochs",
    "train_examples",
    "batch_size",
    "learning_rate",
    "wall_time_seconds",
    "device",
    "hardware",
    "seed",
)
REQUIRED_EVAL = ("dataset", "split", "task", "metric", "after")


# ---------------------------------------------------------------------------------------------- licenses


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


# ---------------------------------------------------------------------------------------------- datasets

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
}
_DATASET_ALIASES = {
    "agnews": "agnews",
    "agnewstopicclassification": "agnews",
    "scifact": "scifact",
    "beirscifact": "scifact",
    "stsb": "stsb",
    "stsbenchmark": "stsb",
    "stsbenchmarksts": "stsb",
    "sick": "sick",
    "sickr": "sick",
    "sicke": "sick",
    "snli": "snli",
    "msmarco": "msmarco",
    "msmarcosample": "msmarco",
    "msmarcopassage": "msmarco",
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


def dataset_info(name: str) -> DatasetInfo | None:
    """A metrics.json dataset name ('scifact', 'stsbenchmark', 'msmarco_sample', ...) → what the card says of it."""
    key = _DATASET_ALIASES.get(re.sub(r"[^a-z0-9]", "", str(name).lower()))
    return KNOWN_DATASETS.get(key) if key else None


# ---------------------------------------------------------------------------------------------- metrics.json


def load_metrics(path: str | Path) -> dict:
    """Read and check a ``metrics.json`` (a file, or the folder holding one) against the contract."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise CtxirError(
            f"{str(path)!r} does not exist: a model folder must hold the {METRICS_FILE} its training "
            "script wrote (the card's numbers come from it)"
        )
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CtxirError(
            f"{str(path)!r} is not valid JSON ({err}): re-run the training script to rewrite it"
        ) from err
    validate_metrics(metrics, source=str(path))
    return metrics


def validate_metrics(metrics: Any, source: str = METRICS_FILE) -> None:
    """Raise ``CtxirError`` naming every way ``metrics`` breaks the metrics.json contract."""
    if not isinstance(metrics, dict):
        raise CtxirError(f"{source!r} must hold a JSON object, got {type(metrics).__name__}")
    problems = [f"missing key {k!r}" for k in REQUIRED_KEYS if k not in metrics]
    if metrics.get("model_type") not in MODEL_TYPES and "model_type" in metrics:
        problems.append(f"model_type {metrics['model_type']!r} is not one of {', '.join(MODEL_TYPES)}")
    training = metrics.get("training")
    if isinstance(training, dict):
        problems += [f"missing training.{k}" for k in REQUIRED_TRAINING if k not in training]
    elif "training" in metrics:
        problems.append("training must be an object")
    datasets = metrics.get("datasets")
    if "datasets" in metrics and (not isinstance(datasets, list) or not datasets):
        problems.append("datasets must be a non-empty list")
    elif isinstance(datasets, list):
        for i, d in enumerate(datasets or []):
            for k in ("name", "split", "role"):
                if not isinstance(d, dict) or k not in d:
                    problems.append(f"datasets[{i}] has no {k!r}")
            if isinstance(d, dict) and d.get("role") not in ("train", "eval"):
                problems.append(f"datasets[{i}].role is {d.get('role')!r}; use 'train' or 'eval'")
        if not any(isinstance(d, dict) and d.get("role") == "train" for d in datasets):
            problems.append("datasets lists no dataset with role 'train'")
    evaluations = metrics.get("evaluations")
    if not isinstance(evaluations, list) and "evaluations" in metrics:
        problems.append("evaluations must be a list")
    seen = set()
    for i, e in enumerate(evaluations if isinstance(evaluations, list) else []):
        missing = [k for k in REQUIRED_EVAL if not isinstance(e, dict) or k not in e]
        if missing:
            problems.append(f"evaluations[{i}] has no {', '.join(map(repr, missing))}")
            continue
        if e["task"] not in EVAL_TASKS:
            problems.append(f"evaluations[{i}].task {e['task']!r} is not one of {', '.join(EVAL_TASKS)}")
        if not _is_number(e["after"]):
            problems.append(f"evaluations[{i}].after is {e['after']!r}; it must be a finite number")
        for k in ("before", "anchor"):
            if e.get(k) is not None and not _is_number(e[k]):
                problems.append(f"evaluations[{i}].{k} is {e[k]!r}; use a number or null")
        ident = (e["dataset"], e["split"], e["task"], e["metric"], e.get("config"))
        if ident in seen:
            problems.append(f"evaluations[{i}] repeats {ident!r}: give each evaluation a distinct 'config'")
        seen.add(ident)
    if problems:
        raise CtxirError(f"{source!r} does not follow the metrics.json contract: " + "; ".join(problems))


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def training_license(metrics: dict, base_license: tuple[str, License] | None = None) -> tuple[License, str]:
    """The model's license from the licenses of its training data (role 'train') and its base model."""
    sources = []
    for d in metrics["datasets"]:
        if d.get("role") != "train":
            continue
        lic = parse_license(d.get("license"))
        if lic is None:
            what = (
                "has no license"
                if not d.get("license")
                else f"has license {d.get('license')!r}, which is not known"
            )
            raise CtxirError(
                f"training dataset {d.get('name')!r} in {METRICS_FILE} {what}: the model's license is derived from "
                f"its training data, so set datasets[].license to the data's license (e.g. "
                f"{', '.join(map(repr, KNOWN_LICENSE_EXAMPLES))}) and stage again"
            )
        info = dataset_info(d["name"])
        sources.append((f"{info.pretty if info else d['name']} ({d.get('split')})", lic))
    if base_license is not None:
        sources.append(base_license)
    return combine_licenses(sources)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower().replace("@", "_at_")).strip("_")


def eval_results(metrics: dict) -> list:
    """metrics.json ``evaluations`` → huggingface_hub ``EvalResult``s (the card's ``model-index``)."""
    # lazy: the Hub client is needed only to download or upload
    from huggingface_hub import EvalResult

    out = []
    for e in metrics["evaluations"]:
        info = dataset_info(e["dataset"])
        task_type, task_name = EVAL_TASKS[e["task"]]
        out.append(
            EvalResult(
                task_type=task_type,
                task_name=task_name,
                dataset_type=info.hub_id if info and info.hub_id else slug(e["dataset"]),
                dataset_name=info.pretty if info else str(e["dataset"]),
                dataset_split=str(e["split"]),
                metric_type=slug(e["metric"]),
                # The evaluated configuration sits in the metric name: one dataset/split can carry several
                # configurations (first stage alone, re-ranked) of the same metric.
                metric_name=f"{e['metric']} ({e['config']})" if e.get("config") else str(e["metric"]),
                metric_value=float(e["after"]),
            )
        )
    return out


def _eval_key(r) -> tuple:
    return (r.task_type, r.dataset_type, r.dataset_split, r.metric_type, r.metric_name)


# ---------------------------------------------------------------------------------------------- the card


@dataclass
class CardInputs:
    """Everything a card says that does not come from metrics.json: the Hub id and facts read off the model."""

    repo_id: str
    base_model_id: str | None = None  # Hub id for `base_model:`; None leaves it out (a local base path)
    base_license: tuple[str, License] | None = None  # (what, license) of the base model, when its card says
    facts: dict = field(default_factory=dict)  # model facts gathered by ctxir.hub.model_facts
    figures: list[str] = field(default_factory=list)  # paths relative to the repo root
    language: str = "en"


def pipeline_tag(model_type: str, facts: Mapping) -> str:
    if model_type == "bi-encoder":
        return "sentence-similarity"
    if model_type == "cross-encoder":
        return "text-ranking" if facts.get("num_labels", 1) == 1 else "text-classification"
    # CLS-LR scores (query, document) pairs for ranking: that is what text-ranking means on the Hub.
    return "text-ranking"


def card_data(metrics: dict, inputs: CardInputs):
    """The card's YAML front matter as a ``huggingface_hub.ModelCardData``."""
    # lazy: the Hub client is needed only to download or upload
    from huggingface_hub import ModelCardData

    model_type = metrics["model_type"]
    lic, _ = training_license(metrics, inputs.base_license)
    train = [d for d in metrics["datasets"] if d.get("role") == "train"]
    hub_datasets = []
    for d in train:
        info = dataset_info(d["name"])
        if info and info.hub_id and info.hub_id not in hub_datasets:
            hub_datasets.append(info.hub_id)
    tags = {
        "bi-encoder": [
            "sentence-transformers",
            "feature-extraction",
            "sentence-similarity",
            "dense-retrieval",
        ],
        "cross-encoder": ["sentence-transformers", "cross-encoder", "reranker", "text-ranking"],
        "cls-lr": ["reranker", "logistic-regression", "cls-features", "text-ranking"],
    }[model_type]
    tags = [*tags, "ctxir", *(dataset_info(d["name"]).key for d in train if dataset_info(d["name"]))]
    kwargs = {}
    if lic.hub_id == "other":
        kwargs = {"license_name": lic.slug, "license_link": lic.link}
    return ModelCardData(
        language=inputs.language,
        license=lic.hub_id,
        library_name="ctxir" if model_type == "cls-lr" else "sentence-transformers",
        pipeline_tag=pipeline_tag(model_type, inputs.facts),
        base_model=inputs.base_model_id,
        datasets=hub_datasets or None,
        tags=tags,
        metrics=sorted({slug(e["metric"]) for e in metrics["evaluations"]}) or None,
        model_name=metrics["model_name"],
        eval_results=eval_results(metrics) or None,
        **kwargs,
    )


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "–"
    return f"{float(x):.{digits}f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _base_display(base: str, base_model_id: str | None) -> str:
    """How the body names the base model: its Hub id, else a local folder's name (not the trainer's path)."""
    if base_model_id:
        return base_model_id
    if looks_like_hub_id(base):
        return base
    return f"{Path(base).name} (a local training output)"


def _template_context(metrics: dict, inputs: CardInputs) -> dict:
    lic, license_reason = training_license(metrics, inputs.base_license)
    training = metrics["training"]
    rows = []
    for e in metrics["evaluations"]:
        info = dataset_info(e["dataset"])
        delta = None if e.get("before") is None else e["after"] - e["before"]
        rows.append(
            {
                "dataset": info.pretty if info else e["dataset"],
                "split": e["split"],
                "task": e["task"],
                "metric": e["metric"],
                "config": e.get("config") or "–",
                "before": _fmt(e.get("before")),
                "after": _fmt(e["after"]),
                "delta": "–" if delta is None else f"{delta:+.4f}",
                "anchor": _fmt(e.get("anchor")),
                "anchor_name": e.get("anchor_name") or "–",
            }
        )
    datasets = []
    citations = [SBERT_CITATION] if metrics["model_type"] != "cls-lr" else []
    for d in metrics["datasets"]:
        info = dataset_info(d["name"])
        lic_d = parse_license(d.get("license"))
        split = SPLIT_NAMES.get(d["split"], d["split"])
        if d.get("stage") == "earlier":  # learned in the stage this run continued from (--init-from)
            split += " — in the earlier stage this model continues"
        datasets.append(
            {
                "name": info.pretty if info else d["name"],
                "split": split,
                "role": d["role"],
                "license": lic_d.name if lic_d else (d.get("license") or "not stated"),
                "num_examples": d.get("num_examples", "–"),
                "url": info.url if info else None,
            }
        )
        if info and info.citation not in citations:
            citations.append(info.citation)
            if info.key == "scifact" and BEIR_CITATION not in citations:
                citations.append(BEIR_CITATION)
    wall = float(training["wall_time_seconds"])
    return {
        "m": metrics,
        "repo_id": inputs.repo_id,
        "facts": inputs.facts,
        "figures": inputs.figures,
        "model_name": metrics["model_name"],
        "base_model": _base_display(metrics["base_model"], inputs.base_model_id),
        "base_model_id": inputs.base_model_id,
        "objective": metrics["objective"],
        "training": training,
        "wall_time": f"{wall:.0f} s ({wall / 60:.1f} min)",
        "eval_rows": rows,
        "datasets": datasets,
        "license": lic,
        "license_reason": license_reason,
        "citations": citations,
        "versions": metrics.get("versions", {}),
        "config_json": json.dumps(metrics.get("config", {}), indent=2),
        "extra": metrics.get("extra") or {},
        "created": metrics.get("created"),
        "train_names": ", ".join(dict.fromkeys(d["name"] for d in datasets if d["role"] == "train")),
        "commercial_ok": not (lic.conditions & {"NC", "RESEARCH"}),
        # Trained only on sentence-pair similarity data (STS-B, SICK, SNLI) → a similarity model, else retrieval.
        "purpose": "similarity"
        if all(
            (dataset_info(d["name"]) or DatasetInfo("", "", None, "", "")).key in ("stsb", "sick", "snli")
            for d in metrics["datasets"]
            if d.get("role") == "train"
        )
        else "retrieval",
    }


def render_card(metrics: dict, inputs: CardInputs, template_dir: str | Path | None = None):
    """Render the ``huggingface_hub.ModelCard`` for a run (validated metrics, model facts, Hub id)."""
    # lazy: the Hub client is needed only to download or upload
    from huggingface_hub import ModelCard

    validate_metrics(metrics)
    template = Path(template_dir or TEMPLATE_DIR) / TEMPLATES[metrics["model_type"]]
    if not template.is_file():
        raise CtxirError(
            f"card template {str(template)!r} is missing: it ships in the repository's model_cards/"
        )
    return ModelCard.from_template(
        card_data(metrics, inputs), template_path=str(template), **_template_context(metrics, inputs)
    )


def check_card(card_path: str | Path, metrics: dict, base_license: tuple[str, License] | None = None) -> dict:
    """Refuse a card whose front matter is not what ``metrics`` implies; returns the parsed front matter.

    Checks: YAML parses; license present and equal to the one derived from the training data; library_name and
    pipeline_tag present; every ``model-index`` value equals the ``after`` value in metrics.json (and nothing
    extra); every evaluation's number appears in the body table.
    """
    # lazy: the Hub client is needed only to download or upload
    from huggingface_hub import ModelCard, metadata_load
    from huggingface_hub.repocard_data import model_index_to_eval_results

    card_path = Path(card_path)
    if not card_path.is_file():
        raise CtxirError(f"{str(card_path)!r} is missing: stage the model so its card is rendered")
    try:
        meta = metadata_load(card_path)
        card = ModelCard.load(card_path)
    except Exception as err:  # yaml.YAMLError, ValueError: the Hub would reject the card the same way
        raise CtxirError(f"the YAML front matter of {str(card_path)!r} does not parse: {err}") from err
    if not meta:
        raise CtxirError(
            f"{str(card_path)!r} has no YAML front matter (--- ... ---): re-render it with "
            "ctxir.publish.cards"
        )
    problems = []
    expected_license, _ = training_license(metrics, base_license)
    if not meta.get("license"):
        problems.append(f"no license (expected {expected_license.hub_id!r}, derived from the training data)")
    elif meta["license"] != expected_license.hub_id:
        problems.append(
            f"license is {meta['license']!r} but the training data requires {expected_license.hub_id!r}"
        )
    if expected_license.hub_id == "other" and not (meta.get("license_name") and meta.get("license_link")):
        problems.append("license 'other' needs license_name and license_link")
    for key in ("library_name", "pipeline_tag"):
        if not meta.get(key):
            problems.append(f"no {key}")
    expected = {_eval_key(r): r.metric_value for r in eval_results(metrics)}
    found: dict = {}
    if meta.get("model-index"):
        try:
            name, results = model_index_to_eval_results(meta["model-index"])
        except (KeyError, TypeError) as err:
            problems.append(f"model-index is malformed ({err!r})")
            results, name = [], metrics["model_name"]
        if name != metrics["model_name"]:
            problems.append(f"model-index name is {name!r}, metrics.json says {metrics['model_name']!r}")
        found = {_eval_key(r): r.metric_value for r in results}
    for key in expected.keys() - found.keys():
        problems.append(
            f"model-index lacks {key[4]!r} on {key[1]} {key[2]} (metrics.json has {expected[key]!r})"
        )
    for key in found.keys() - expected.keys():
        problems.append(
            f"model-index has {key[4]!r} on {key[1]} {key[2]} = {found[key]!r}, which metrics.json lacks"
        )
    for key in expected.keys() & found.keys():
        if not isinstance(found[key], (int, float)) or float(found[key]) != float(expected[key]):
            problems.append(
                f"model-index says {key[4]!r} on {key[1]} {key[2]} = {found[key]!r} but metrics.json "
                f"says {expected[key]!r}"
            )
    for e in metrics["evaluations"]:
        if _fmt(float(e["after"])) not in card.text:
            problems.append(
                f"the body has no {e['metric']} = {_fmt(float(e['after']))} ({e['dataset']} {e['split']})"
            )
    if problems:
        raise CtxirError(
            f"model card {str(card_path)!r} disagrees with {METRICS_FILE}: "
            + "; ".join(problems)
            + ". Re-render it (stage again) instead of editing numbers by hand"
        )
    return meta
