"""``check_card``: refuse a card that disagrees with its ``metrics.json``; ``row_problems``: figures that mislead."""

from __future__ import annotations

from pathlib import Path

from ctxir.publish.cards import eval_key, eval_results, format_number, lead_evaluation
from ctxir.publish.licenses import License
from ctxir.publish.metrics_file import METRICS_FILE, data_licenses, training_license
from ctxir.types import CtxirError

RERANKING_TASKS = ("reranking",)  # figures that depend on the first stage they re-order and its depth


def _what(e: dict) -> str:
    return f"{e['metric']} = {e['after']} ({e['dataset']} {e['split']}, {e.get('config') or 'no config'})"


def row_problems(metrics: dict) -> list[str]:
    """What makes metrics.json's figures mislead on a card, each named with its fix ([] = none).

    - The lead figure (``headline``, else the first: what the Hub shows) covers the whole split: no ``subset``.
    - A figure on fewer queries than another of its dataset and split names its ``subset`` and fills ``before``
      (the same queries without the model), so its level cannot pass for the model's.
    - An anchor cites ``anchor_name``, ``anchor_source`` and ``anchor_queries`` (for re-ranking also
      ``anchor_first_stage`` and ``anchor_depth``), and its row states ``queries`` (and ``depth``): both equal the
      anchor's, or the two numbers measure different things and may not stand side by side.
    """
    problems = []
    rows = metrics["evaluations"]
    lead = lead_evaluation(metrics)
    if lead is not None and lead.get("subset"):
        problems.append(
            f"the lead figure {_what(lead)} covers {lead['subset']!r}, not the whole split: mark the full test "
            "set's figure in the default mode headline: true"
        )
    most: dict = {}
    for e in rows:
        if e.get("queries"):
            k = (e["dataset"], e["split"])
            most[k] = max(most.get(k, 0), e["queries"])
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
        ranking = e["task"] in RERANKING_TASKS
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
    """Refuse a card whose front matter (license, library, model-index) or body figures are not what ``metrics``
    implies; returns the parsed front matter."""
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
    problems += [
        f"model-index lacks {k[4]!r} on {k[1]} {k[2]} (metrics.json has {expected[k]!r})"
        for k in expected.keys() - found.keys()
    ]
    problems += [
        f"model-index has {k[4]!r} on {k[1]} {k[2]} = {found[k]!r}, which metrics.json lacks"
        for k in found.keys() - expected.keys()
    ]
    for key in expected.keys() & found.keys():
        if not isinstance(found[key], (int, float)) or float(found[key]) != float(expected[key]):
            problems.append(
                f"model-index says {key[4]!r} on {key[1]} {key[2]} = {found[key]!r} but metrics.json "
                f"says {expected[key]!r}"
            )
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
