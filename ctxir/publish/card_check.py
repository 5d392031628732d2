"""``check_card``: refuse a model card whose front matter or numbers are not what its ``metrics.json`` implies.

``check_card`` re-derives the metadata from ``metrics.json`` and refuses a card that disagrees, so a card edited
after the fact, or a ``metrics.json`` replaced after rendering, cannot be published.
"""

from __future__ import annotations

from pathlib import Path

from ctxir.publish.cards import eval_key, eval_results, format_number
from ctxir.publish.licenses import License
from ctxir.publish.metrics_file import METRICS_FILE, training_license
from ctxir.types import CtxirError


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
