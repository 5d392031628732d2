"""What a trained model folder is: its kind, its base model and that model's license, the facts its card states."""

from __future__ import annotations

from pathlib import Path

from ctxir.encoders.models import resolve_model
from ctxir.evaluation.suite import suite_rows, suite_table
from ctxir.files import read_json
from ctxir.names import CLS_LR_CONFIG, looks_like_hub_id
from ctxir.publish.licenses import License, parse_license
from ctxir.publish.metrics_file import METRICS_FILE, load_metrics, training_license
from ctxir.publish.model_types import MODEL_TYPES
from ctxir.types import CtxirError

README = "README.md"  # the model card, in a model folder as in a Hub repo


def detect_model_type(folder: str | Path) -> str | None:
    """The name of the model type (``MODEL_TYPES``) whose saved files ``folder`` holds, or None."""
    folder = Path(folder)
    found = [kind for kind in MODEL_TYPES.values() if kind.detect(folder)]
    # a folder that carries its base holds that encoder's files too: it is the type that carries it
    found.sort(key=lambda kind: not kind.carries_base)
    return found[0].name if found else None


def transformer_dir(folder: Path) -> Path:
    """Where the transformer's config.json sits: the root (sentence-transformers ≥ 3) or the first module."""
    if (folder / "config.json").is_file():
        return folder
    for module in read_json(folder / "modules.json") or []:
        if (folder / module.get("path", "") / "config.json").is_file():
            return folder / module["path"]
    raise CtxirError(f"{str(folder)!r} holds no transformer (no config.json at its root or in its modules)")


def folder_license(folder: Path, what: str) -> tuple[str, License] | None:
    """A model folder's license as it states it: its metrics.json training data, else its card's metadata."""
    from huggingface_hub import metadata_load

    if (folder / METRICS_FILE).is_file():
        try:
            return (what, training_license(load_metrics(folder))[0])
        except CtxirError:
            return None
    if (folder / README).is_file():
        try:
            lic = parse_license((metadata_load(folder / README) or {}).get("license"))
        except Exception:  # an unparsable upstream card: treat as not stated
            lic = None
        return (what, lic) if lic is not None else None
    return None


def base_model_license(base: str) -> tuple[str, License] | None:
    """The base model's license (Hub id or folder), or None when it cannot be looked at here."""
    try:
        folder = Path(resolve_model(base))
    except CtxirError:
        return None  # not reachable here: the card lists only the data licenses
    return folder_license(folder, f"base model {base if looks_like_hub_id(base) else Path(base).name}")


def cls_lr_base_dir(src: Path) -> tuple[Path, str]:
    """(the encoder folder a CLS-LR ranker reads, how to name it)."""
    base = read_json(src / CLS_LR_CONFIG).get("base_model", "")
    if base == "." or (src / base).is_dir():
        folder = (src / base).resolve()
        return folder, folder.name
    return Path(resolve_model(base)), base if looks_like_hub_id(base) else Path(base).name


def stored_base_license(folder: Path, model_type: str, metrics: dict) -> tuple[str, License] | None:
    """The base license recorded at staging (CLS-LR), else re-derived from the base model."""
    if MODEL_TYPES[model_type].carries_base:
        stored = read_json(folder / CLS_LR_CONFIG).get("base_model_license")
        lic = parse_license(stored.get("license")) if stored else None
        return (stored["what"], lic) if lic else None
    return base_model_license(metrics["base_model"])


def model_facts(folder: str | Path, model_type: str) -> dict:
    """What the card's prose and usage snippets need to know about the model, read by loading it."""
    folder = Path(folder)
    result = read_json(folder / "evaluation.json")  # the suite's figures and the commands that wrote them
    result = result if isinstance(result, dict) else {}
    commands = result.get("commands") or ([result["command"]] if result.get("command") else [])
    try:
        return {
            **MODEL_TYPES[model_type].facts(folder),
            "suite": suite_markdown(folder),
            "suite_commands": [str(c) for c in commands],
        }
    except CtxirError:
        raise
    except Exception as err:  # a broken config or weights: the repo would be broken for its users too
        raise CtxirError(
            f"the {model_type} in {str(folder)!r} does not load ({type(err).__name__}: {err}): fix "
            "the training output (re-save it with save_pretrained) and stage again"
        ) from err


def suite_markdown(folder: Path) -> str | None:
    """The out-of-domain suite's table from the folder's evaluation.json, or None."""
    result = read_json(folder / "evaluation.json")
    if not isinstance(result, dict) or not suite_rows(result):
        return None
    return "\n".join(suite_table("", str(folder), result)[2:]).strip()  # the table, without the docs' heading
