"""Model cards rendered from a run's ``metrics.json`` with ``model_cards/<type>.md``, and ``check_card``, which
refuses a card that disagrees with it (sentence-transformers' own card knows no test-set anchors or data licenses)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxir.names import looks_like_hub_id
from ctxir.publish import licenses
from ctxir.publish.licenses import License, dataset_info, display_name
from ctxir.publish.metrics_file import (
    EVAL_TASKS,
    METRICS_FILE,
    data_licenses,
    training_license,
    validate_metrics,
)
from ctxir.publish.model_types import MODEL_TYPES, SENTENCE_TRANSFORMERS
from ctxir.types import CtxirError

# model_cards/ at the checkout's top; an installed wheel carries it as ctxir/model_cards (setup.py)
_PACKAGED = Path(__file__).resolve().parents[1] / "model_cards"
TEMPLATE_DIR = _PACKAGED if _PACKAGED.is_dir() else _PACKAGED.parents[1] / "model_cards"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower().replace("@", "_at_")).strip("_")


def lead_evaluation(metrics: dict) -> dict | None:
    """The evaluation the card leads with (first in ``model-index``): ``headline``, else the first."""
    rows = metrics["evaluations"]
    return next((e for e in rows if e.get("headline")), rows[0] if rows else None)


def ordered_evaluations(metrics: dict) -> list[dict]:
    """metrics.json's evaluations, the lead one first, the rest in their order."""
    lead = lead_evaluation(metrics)
    return [lead, *(e for e in metrics["evaluations"] if e is not lead)] if lead else []


def eval_results(metrics: dict) -> list:
    """The card's ``model-index``: the lead, then the other figures on its dataset and split over all its queries (≤ 10)."""
    from huggingface_hub import EvalResult

    lead = lead_evaluation(metrics)
    rest = [
        e
        for e in metrics["evaluations"]
        if e is not lead
        and (e["dataset"], e["split"]) == (lead["dataset"], lead["split"])
        and not e.get("subset")
        and e.get("queries") == lead.get("queries")
    ]
    out = []
    for e in [lead, *rest][:10] if lead else []:
        info = dataset_info(e["dataset"])
        task_type, task_name = EVAL_TASKS[e["task"]]
        out.append(
            EvalResult(
                task_type=task_type,
                task_name=task_name,
                dataset_type=info.hub_id if info and info.hub_id else slug(e["dataset"]),
                dataset_name=display_name(e["dataset"]),
                dataset_split=str(e["split"]),
                metric_type=slug(e["metric"]),
                # one dataset/split can carry several configurations (first stage alone, re-ranked) of a metric
                metric_name=f"{e['metric']} ({e['config']})" if e.get("config") else str(e["metric"]),
                metric_value=float(e["after"]),
            )
        )
    return out


def eval_key(r) -> tuple:
    return (r.task_type, r.dataset_type, r.dataset_split, r.metric_type, r.metric_name)


@dataclass
class CardInputs:
    """Everything a card says that does not come from metrics.json: the Hub id and facts read off the model."""

    repo_id: str
    base_model_id: str | None = None  # Hub id for `base_model:`; None leaves it out
    base_license: tuple[str, License] | None = None  # (what, license) of the base model, when its card says
    facts: dict = field(default_factory=dict)  # ctxir.publish.model_folder.model_facts
    figures: list[str] = field(default_factory=list)  # paths relative to the repo root


def card_data(metrics: dict, inputs: CardInputs):
    """The card's YAML front matter as a ``huggingface_hub.ModelCardData``."""
    from huggingface_hub import ModelCardData

    model_type = MODEL_TYPES[metrics["model_type"]]
    lic, _ = training_license(metrics, inputs.base_license)
    train = [
        info for d in metrics["datasets"] if d.get("role") == "train" and (info := dataset_info(d["name"]))
    ]
    hub_datasets = list(dict.fromkeys(info.hub_id for info in train if info.hub_id))
    adapt_tags = ("ctxir-adapt", "unsupervised-domain-adaptation") if metrics.get("adapt") else ()
    tags = [*model_type.tags, "ctxir", *adapt_tags, *(info.key for info in train)]
    kwargs = {"license_name": lic.slug, "license_link": lic.link} if lic.hub_id == "other" else {}
    return ModelCardData(
        language="en",
        license=lic.hub_id,
        # a staged repo that carries its heads' code loads with sentence-transformers, whatever trained it
        library_name=SENTENCE_TRANSFORMERS if inputs.facts.get("hub_code") else model_type.library,
        pipeline_tag=model_type.pipeline_tag(inputs.facts),
        base_model=inputs.base_model_id,
        datasets=hub_datasets or None,
        tags=tags,
        metrics=sorted({slug(e["metric"]) for e in metrics["evaluations"]}) or None,
        model_name=metrics["model_name"],
        eval_results=eval_results(metrics) or None,
        # the Hub's `license` is one id (the combination above); each training source's own terms, for the record
        data_licenses=data_licenses(metrics),
        **kwargs,
    )


def format_number(x: Any) -> str:
    if x is None:
        return "–"
    return f"{float(x):.4f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _anchor_is(e: dict) -> str:
    """The card's "Anchor is" cell: what the anchor is, where it comes from, what it re-ranked, over how many."""
    if e.get("anchor") is None:
        return "–"
    parts = [e.get("anchor_name") or "unnamed"]
    if e.get("anchor_first_stage"):
        parts.append(f"over {e['anchor_first_stage']} top {e.get('anchor_depth') or '?'}")
    if e.get("anchor_queries"):
        parts.append(f"{e['anchor_queries']} {'pairs' if e['task'] == 'sts' else 'queries'}")
    if e.get("anchor_source"):
        parts.append(f"source: {e['anchor_source']}")
    return "; ".join(parts)


def _eval_collections(metrics: dict) -> tuple[list[str], list[str]]:
    """(evaluated collections its training data came from, those it never trained on), as the card names them."""
    train: dict[str, list[str]] = {}
    for d in metrics["datasets"]:
        if d.get("role") == "train":
            info = dataset_info(d["name"])
            train.setdefault(info.key if info else str(d["name"]), []).append(str(d["split"]))
    seen, trained, never = set(), [], []
    for e in metrics["evaluations"]:
        if e["task"] not in ("reranking", "retrieval"):
            continue
        info = dataset_info(e["dataset"])
        key = info.key if info else str(e["dataset"])
        if (key, e["split"]) in seen:
            continue
        seen.add((key, e["split"]))
        shown = display_name(e["dataset"])
        # not "demo demo"
        name = shown if str(e["split"]).lower() in shown.lower() else f"{shown} {e['split']}"
        if key in train:
            trained.append(f"{name} (it trained on {display_name(e['dataset'])} {', '.join(train[key])})")
        else:
            never.append(name)
    return trained, never


def lead_summary(metrics: dict) -> dict | None:
    """The lead figure beside the first stage it re-ranks and its published peer, and where the model is worse."""
    lead = lead_evaluation(metrics)
    if lead is None:
        return None
    rows = [("this model, as the snippet below runs it", lead["after"], lead.get("source") or METRICS_FILE)]
    if lead["task"] == "reranking" and lead.get("before") is not None:
        stage = {"bm25": "BM25"}.get(lead.get("first_stage"), lead.get("first_stage"))
        rows.append((f"{stage} alone (the candidates it re-ranks)", lead["before"], "the same run"))
    if lead.get("anchor") is not None:
        rows.append((lead["anchor_name"], lead["anchor"], lead.get("anchor_source") or "–"))
    worse = [
        f"{value - lead['after']:.4f} below {name.split(' (')[0]}"
        for name, value, _ in rows[1:]
        if lead["after"] < value
    ]
    below_bm25 = sorted(
        {
            display_name(e["dataset"])
            for e in metrics["evaluations"]
            if e.get("first_stage") == "bm25"
            and str(e.get("config", "")).endswith("re-ranker alone")
            and not e.get("subset")
            and e.get("before") is not None
            and e["after"] < e["before"]
        }
    )
    sentences = []
    if worse:
        sentences.append(f"Run this way it is {' and '.join(worse)}.")
    if below_bm25:
        sentences.append(
            f"Alone over BM25's top 20 it is below BM25 on {', '.join(below_bm25)} (the suite below); "
            "there, fuse it with the first stage or keep BM25."
        )
    return {
        "metric": lead["metric"],
        "dataset": display_name(lead["dataset"]),
        "split": lead["split"],
        "protocol": lead.get("protocol"),
        "rows": [{"system": n, "value": format_number(v), "source": src} for n, v, src in rows],
        "worse": " ".join(sentences),
    }


def _template_context(metrics: dict, inputs: CardInputs) -> dict:
    lic, license_reason = training_license(metrics, inputs.base_license)
    training = metrics["training"]
    rows = []
    for e in ordered_evaluations(metrics):
        delta = None if e.get("before") is None else e["after"] - e["before"]
        rows.append(
            {
                "dataset": display_name(e["dataset"]),
                "split": e["split"],
                "task": e["task"],
                "metric": e["metric"],
                "config": e.get("config") or "–",
                # how many queries the figure averages, and which when not the whole split
                "queries": "–"
                if e.get("queries") is None
                else f"{e['queries']} ({e.get('subset') or 'all'})",
                "before": format_number(e.get("before")),
                "after": format_number(e["after"]),
                "delta": "–" if delta is None else f"{delta:+.4f}",
                "anchor": format_number(e.get("anchor")),
                "anchor_name": _anchor_is(e),
            }
        )
    datasets = []
    citations = (
        [licenses.SBERT_CITATION]
        if MODEL_TYPES[metrics["model_type"]].library == SENTENCE_TRANSFORMERS
        else []
    )
    for d in metrics["datasets"]:
        info = dataset_info(d["name"])
        lic_d = licenses.parse_license(d.get("license"))
        split = licenses.SPLIT_NAMES.get(d["split"], d["split"])
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
            if info.key == "scifact" and licenses.BEIR_CITATION not in citations:
                citations.append(licenses.BEIR_CITATION)
    wall = float(training["wall_time_seconds"])
    trained_on, never_trained_on = _eval_collections(metrics)
    train_keys = [
        getattr(dataset_info(d["name"]), "key", None) for d in metrics["datasets"] if d.get("role") == "train"
    ]
    stages = training.get("stages") or []
    name = inputs.repo_id.split("/")[-1]
    base = metrics["base_model"]  # by its Hub id, else a local folder's name (not the trainer's path)
    if not (inputs.base_model_id or looks_like_hub_id(base)):
        base = f"{Path(base).name} (a local training output)"
    return {
        "summary": lead_summary(metrics),
        "stages": stages,
        "stages_time": f"{sum(st['wall_time_seconds'] for st in stages) / 3600:.1f} h" if stages else None,
        "stages_steps": sum(st["steps"] for st in stages),
        "data_terms": data_licenses(metrics),
        "base_license": inputs.base_license,
        "m": metrics,
        "repo_id": inputs.repo_id,
        "facts": inputs.facts,
        "figures": inputs.figures,
        "model_name": name,
        "base_model": inputs.base_model_id or base,
        "base_model_id": inputs.base_model_id,
        "objective": metrics["objective"],
        "training": training,
        "wall_time": f"{wall:.0f} s ({wall / 60:.1f} min)",
        "eval_rows": rows,
        "lead": lead_evaluation(metrics),
        "eval_trained_on": trained_on,
        "eval_never_trained_on": never_trained_on,
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
        # trained only on sentence-pair similarity data (STS-B, SICK, SNLI) → a similarity model, else retrieval
        "purpose": "similarity" if set(train_keys) <= {"stsb", "sick", "snli"} else "retrieval",
    }


def render_card(metrics: dict, inputs: CardInputs):
    """Render the ``huggingface_hub.ModelCard`` for a run (validated metrics, model facts, Hub id)."""
    from huggingface_hub import ModelCard

    validate_metrics(metrics)
    context = _template_context(metrics, inputs)
    name = MODEL_TYPES[metrics["model_type"]].template
    if metrics.get("adapt"):  # a bi-encoder `ctxir adapt` made: its own card (no labels, a corpus, a teacher)
        from ctxir.publish.adapted import ADAPTED_TEMPLATE, adapted_context

        name, context = ADAPTED_TEMPLATE, {**context, **adapted_context(metrics)}
    template = TEMPLATE_DIR / name
    if not template.is_file():
        raise CtxirError(f"card template {str(template)!r} is missing: it ships in model_cards/")
    return ModelCard.from_template(card_data(metrics, inputs), template_path=str(template), **context)


def _what(e: dict) -> str:
    return f"{e['metric']} = {e['after']} ({e['dataset']} {e['split']}, {e.get('config') or 'no config'})"


def row_problems(metrics: dict) -> list[str]:
    """What makes metrics.json's figures mislead on a card (subsets unnamed, anchors uncited or on other queries)."""
    problems = []
    rows = metrics["evaluations"]
    lead = lead_evaluation(metrics)
    if lead is not None and lead.get("subset"):
        problems.append(
            f"the lead figure {_what(lead)} covers {lead['subset']!r}, not the whole split: mark the full test "
            "set's figure in the default mode headline: true"
        )
    most: dict = {}  # (dataset, split) → the most queries a figure on it covers
    for e in (e for e in rows if e.get("queries")):
        most[e["dataset"], e["split"]] = max(most.get((e["dataset"], e["split"]), 0), e["queries"])
    for e in rows:
        full = most.get((e["dataset"], e["split"]), 0)
        if e.get("queries") and e["queries"] < full and not e.get("subset"):
            problems.append(
                f"{_what(e)} covers {e['queries']} of {full} queries but names no subset: say which (subset)"
            )
        if (e.get("subset") or (e.get("queries") and e["queries"] < full)) and e.get("before") is None:
            problems.append(
                f"{_what(e)} covers a subset but has no before: measure the start on the same queries"
            )
        if e.get("anchor") is None:
            continue
        ranking = e["task"] == "reranking"  # its figures depend on the first stage and depth
        cited = ("anchor_name", "anchor_source", "anchor_queries") + (
            ("anchor_first_stage", "anchor_depth") if ranking else ()
        )
        missing = [k for k in cited if not e.get(k)]
        if missing:
            problems.append(f"the anchor {e['anchor']} beside {_what(e)} cites no {', '.join(missing)}")
        own = ("queries", "depth") if ranking else ("queries",)
        for k in own:
            if e.get(k) is None:
                problems.append(f"{_what(e)} has an anchor but states no {k} to hold it to")
            elif e.get(f"anchor_{k}") is not None and e[k] != e[f"anchor_{k}"]:
                problems.append(
                    f"{_what(e)} is on {k} {e[k]} but its anchor {e['anchor']} ({e.get('anchor_name')}) on "
                    f"{k} {e[f'anchor_{k}']}: drop the anchor or measure the row on the anchor's {k}"
                )
    return problems


def check_card(card_path: str | Path, metrics: dict, base_license: tuple[str, License] | None = None) -> dict:
    """Refuse a card whose front matter or figures disagree with ``metrics``; → its front matter."""
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
    problems += [f"no {key}" for key in ("library_name", "pipeline_tag") if not meta.get(key)]
    if meta.get("data_licenses") != data_licenses(metrics):
        problems.append(
            f"data_licenses is {meta.get('data_licenses')!r}, but the training data's own terms are "
            f"{data_licenses(metrics)!r}"
        )
    problems += row_problems(metrics)
    if metrics.get("adapt"):  # `ctxir adapt`'s model: the card says how, on what and with what it was adapted
        from ctxir.publish.adapted import adapted_card_problems

        problems += adapted_card_problems(metrics, card.text)
    expected = {eval_key(r): r.metric_value for r in eval_results(metrics)}
    found: dict = {}
    if meta.get("model-index"):
        try:
            name, results = model_index_to_eval_results(meta["model-index"])
        except (KeyError, TypeError) as err:
            problems.append(f"model-index is malformed ({err!r})")
            results, name = [], metrics["model_name"]
        if name != metrics["model_name"]:
            problems.append(f"model-index name is {name!r}, metrics.json says {metrics['model_name']!r}")
        found = {eval_key(r): r.metric_value for r in results}
        lead = eval_results(metrics)[:1]
        if results and lead and eval_key(results[0]) != eval_key(lead[0]):
            problems.append(
                f"model-index leads with {results[0].metric_name!r} = {results[0].metric_value!r}; metrics.json's "
                f"lead figure is {lead[0].metric_name!r} = {lead[0].metric_value!r}"
            )
    for k in expected.keys() | found.keys():
        where = f"{k[4]!r} on {k[1]} {k[2]}"
        if k not in found:
            problems.append(f"model-index lacks {where} (metrics.json has {expected[k]!r})")
        elif k not in expected:
            problems.append(f"model-index has {where} = {found[k]!r}, which metrics.json lacks")
        elif not isinstance(found[k], (int, float)) or float(found[k]) != float(expected[k]):
            problems.append(f"model-index says {where} = {found[k]!r} but metrics.json says {expected[k]!r}")
    for e in metrics["evaluations"]:
        if format_number(float(e["after"])) not in card.text:
            problems.append(
                f"the body has no {e['metric']} = {format_number(float(e['after']))} ({e['dataset']} {e['split']})"
            )
    if problems:
        raise CtxirError(
            f"model card {str(card_path)!r} disagrees with {METRICS_FILE}: "
            + "; ".join(problems)
            + ". Re-render it (stage again) instead of editing numbers by hand"
        )
    return meta
