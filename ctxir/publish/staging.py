"""Stage a training output into the folder that becomes the Hub repo, and validate that folder."""

from __future__ import annotations

import fnmatch
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctxir.adapt.work import RECORD_FILE
from ctxir.encoders.models import load_transformer, resolve_model
from ctxir.files import (
    disk_full,
    is_disk_full,
    is_pickle_file,
    read_json,
    write_atomic,
    write_checksums,
    write_json,
)
from ctxir.kinds import BI_ENCODER
from ctxir.names import CLS_LR_CONFIG, CLS_LR_WEIGHTS, looks_like_hub_id
from ctxir.publish.adapted import adapt_metrics, is_adapt_output, write_standalone_bi_encoder
from ctxir.publish.cards import CardInputs, check_card, render_card
from ctxir.publish.licenses import LICENSE_FILE, License
from ctxir.publish.metrics_file import (
    METRICS_FILE,
    license_text,
    load_metrics,
    training_license,
    validate_metrics,
)
from ctxir.publish.model_folder import (
    README,
    base_model_license,
    cls_lr_base_dir,
    detect_model_type,
    folder_license,
    model_facts,
    stored_base_license,
    transformer_dir,
)
from ctxir.publish.model_types import MODEL_TYPES
from ctxir.publish.standalone import (
    HUB_CODE_FILE,
    check_card_snippets,
    copy_side_files,
    has_ctxir_heads,
    needs_standalone,
    write_standalone_cls_lr,
    write_standalone_cross_encoder,
)
from ctxir.types import CtxirError

FIGURES_DIR = "figures"
# What SentenceTransformer / CrossEncoder / AutoModel / AutoTokenizer read from a model folder.
MODEL_FILE_PATTERNS = ("*.json", "*.safetensors", "vocab.txt", "merges.txt", "*.model", "tokenizer*")
# The CLS-LR ranker's body: AutoModel + AutoTokenizer only, so the repo does not also pose as a CrossEncoder.
ENCODER_FILE_PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json", "tokenizer*")
ENCODER_FILE_PATTERNS += ("special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json")
ENCODER_FILE_PATTERNS += ("merges.txt", "*.model")
FIGURE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".html")
# Left beside the model by a trainer, skipped without complaint; README.md is replaced by ctxir's card.
TRAINING_ARTIFACTS = ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth")
TRAINING_ARTIFACTS += ("trainer_state.json", "README.md")
SKIPPED_DIRS = ("checkpoint-*", "checkpoints", "runs", "logs", "eval", "wandb", "hub", ".*", "__pycache__")
# Marks ctxir's staging (re-staging may replace it), under .cache/huggingface/, which upload_folder never sends.
STAGING_MARKER = ".cache/huggingface/ctxir-staging.json"
LOAD_CHECK_TEXTS = ("the river bank", "money in the bank account")


@dataclass
class StagedRepo:
    folder: Path
    repo_id: str
    model_type: str
    license: str
    files: list[str] = field(default_factory=list)  # relative paths, sorted
    skipped: list[str] = field(default_factory=list)  # source files deliberately left out
    eval_count: int = 0


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def check_repo_id(repo_id: str) -> str:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    repo_id = (repo_id or "").strip()
    if repo_id.count("/") != 1:
        raise CtxirError(
            f"--repo-id {repo_id!r} must be 'owner/name' (your user or organisation, then the model "
            "name), e.g. 'ctxir/minilm-scifact-bi-encoder'"
        )
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise CtxirError(f"--repo-id {repo_id!r} is not a valid Hub id: {err}") from err
    return repo_id


def check_base_model(base: str, repo_id: str) -> str:
    """``base`` as the card's ``base_model``: a Hub id other than ``repo_id`` (a Hub reader cannot follow a folder)."""
    if Path(base).expanduser().is_dir() or not looks_like_hub_id(base):
        raise CtxirError(
            f"the base model {base!r} is a local folder, which a Hub reader cannot follow: pass --base-model-id with "
            "the Hub id it was trained from (e.g. 'sentence-transformers/all-MiniLM-L6-v2', or the pushed "
            "cross-encoder a CLS-LR ranker reads)"
        )
    check_repo_id(base)
    if base == repo_id:
        raise CtxirError(
            f"the base model {base!r} is the repo's own id (a warm start from an earlier version of it): pass "
            "--base-model-id with the Hub id its first stage was trained from (e.g. "
            "'sentence-transformers/all-MiniLM-L6-v2')"
        )
    return base


def _base_model_license(src: Path, metrics: dict) -> tuple[Path | None, str]:
    """(the base encoder folder of a model that carries its base (CLS-LR), else None; the base model's license)."""
    if not MODEL_TYPES[metrics["model_type"]].carries_base:
        return None, base_model_license(metrics["base_model"])
    base_dir, base_name = cls_lr_base_dir(src)
    if base_dir == src:  # a bundled encoder (".") left its metrics.json behind: ask the base the run names
        return base_dir, base_model_license(metrics["base_model"])
    return base_dir, folder_license(base_dir, f"base model {base_name}")


def _copy_model(src: Path, dest: Path, model_type: str, base_dir: Path | None, base_license: str) -> None:
    """Copy the model's files (a sentence-transformers model: its files and module folders) into ``dest``."""
    if MODEL_TYPES[model_type].carries_base:
        _stage_cls_lr(src, dest, base_dir, base_license)
        return
    # an adapter, or ctxir's heads, over a base only ctxir resolves: merged, the full body (+ the heads' code)
    if needs_standalone(src):
        write = write_standalone_bi_encoder if model_type == BI_ENCODER else write_standalone_cross_encoder
        write(src, dest)
        copy_side_files(src, dest)
        return
    _copy_matching(src, dest, MODEL_FILE_PATTERNS, exclude=(METRICS_FILE, "trainer_state.json"))
    for module in read_json(src / "modules.json") or []:
        if module.get("path") and (src / module["path"]).is_dir():  # Normalize & co. may save no folder
            _copy_matching(src / module["path"], dest / module["path"], MODEL_FILE_PATTERNS, recursive=True)


def stage(
    model_dir: str | Path,
    repo_id: str,
    staging_dir: str | Path | None = None,
    base_model_id: str | None = None,
    figures: list[str] | tuple[str, ...] = (),
    corpus_license: str | None = None,
    evaluation: str | None = None,
) -> StagedRepo:
    """Build the folder that becomes the Hub repo, render its card, and validate it."""
    # 1. read the run
    src = Path(model_dir).expanduser().resolve()
    if not src.is_dir():
        raise CtxirError(
            f"--model-dir {str(model_dir)!r} is not a folder: pass the output folder of a training "
            "script (it holds the model files and metrics.json)"
        )
    repo_id = check_repo_id(repo_id)
    adapted = is_adapt_output(src)
    if adapted:
        metrics = adapt_metrics(src, repo_id, corpus_license, evaluation)
        validate_metrics(metrics, source=f"the metrics derived from {str(src / 'adapt.json')!r}")
    else:
        for flag, value in (("--corpus-license", corpus_license), ("--evaluation", evaluation)):
            if value:
                raise CtxirError(
                    f"{flag} {value!r} is for a folder `ctxir adapt` wrote; {str(src)!r} is a training output, "
                    f"whose {METRICS_FILE} states its data's licenses and its evaluations: leave {flag} out"
                )
        metrics = load_metrics(src)
    model_type = metrics["model_type"]
    found = detect_model_type(src)
    if found != model_type:
        raise CtxirError(
            f"{METRICS_FILE} says model_type {model_type!r} but {str(src)!r} holds "
            f"{'a ' + found if found else 'no model sentence-transformers or ctxir can load'}: "
            "point --model-dir at the folder the training script saved"
        )
    base_dir, base_license = _base_model_license(src, metrics)
    training_license(metrics, base_license)  # refuse early: unknown training-data license
    if MODEL_TYPES[model_type].carries_base and not base_model_id:
        raise CtxirError(
            f"the {model_type} in {str(src)!r} reads the encoder {metrics['base_model']!r}, a training folder: "
            "pass --base-model-id with that encoder's Hub id (e.g. the pushed cross-encoder it reads)"
        )
    base_model_id = check_base_model(base_model_id or str(metrics["base_model"]), repo_id)

    # 2. refuse pickles before anything is copied
    skipped = _publishable_files(src)

    for fig in figures:
        if not Path(fig).expanduser().is_file() or Path(fig).suffix.lower() not in FIGURE_SUFFIXES:
            raise CtxirError(f"--figures {fig!r} is not a {'/'.join(FIGURE_SUFFIXES)} file")

    # 3. assembled beside the destination and swapped in whole: a full disk or a kill leaves the previous staging
    dest = _fresh_staging_dir(src, repo_id, staging_dir)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        (work / STAGING_MARKER).parent.mkdir(parents=True, exist_ok=True)
        write_json(work / STAGING_MARKER, {"source": str(src), "repo_id": repo_id}, indent=None)

        # 4. copy the model
        _copy_model(src, work, model_type, base_dir, base_license)
        if adapted:
            write_json(work / RECORD_FILE, metrics["adapt"])  # the side file's copy, the corpus by name only

        # 5. figures: <model-dir>/figures/*, figures beside the model, and any passed explicitly
        staged_figures = _stage_figures(src, work, figures)

        # 6. the card, under the repo's own name, its base the Hub id it was trained from
        metrics["model_name"] = repo_id.split("/")[-1]
        write_json(work / METRICS_FILE, metrics)
        inputs = CardInputs(
            repo_id=repo_id,
            base_model_id=base_model_id,
            base_license=base_license,
            facts=_card_facts(src, work, model_type),
            figures=staged_figures,
        )
        write_atomic(work / README, render_card(metrics, inputs).content)
        # sources whose terms differ: their terms listed
        if training_license(metrics, base_license)[0].link == LICENSE_FILE:
            write_atomic(work / LICENSE_FILE, license_text(metrics, base_license))
        write_checksums(work)  # last: what a download of the repo is checked against when loaded

        # 7. validated (its card's snippets run as a Hub reader would) before it replaces the previous staging
        report = validate(work, base_license=base_license, repo_id=repo_id)
        _swap_in(work, dest)
    except OSError as err:
        if is_disk_full(err):
            raise disk_full(dest, err) from err
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if adapted:  # the adapter's own files and the run's work files: replaced by the merged model
        skipped = sorted(
            {*skipped, *(f for f in _files(src) if f.startswith("work/") or f.startswith("adapter_"))}
        )
    report.folder, report.repo_id, report.skipped = Path(dest).expanduser().resolve(), repo_id, skipped
    return report


def _card_facts(src: Path, staged: Path, model_type: str) -> dict:
    """What the card states of the model, with whether it is ``merged`` and its ``hub_code`` file."""
    merged = not MODEL_TYPES[model_type].carries_base and needs_standalone(src)
    # a merged bi-encoder is read off the staged folder: a plain SentenceTransformer (its adapter would need peft)
    facts = model_facts(src if merged and model_type != BI_ENCODER else staged, model_type)
    hub_code = HUB_CODE_FILE if (staged / HUB_CODE_FILE).is_file() else None
    return {**facts, "merged": merged, "hub_code": hub_code}


def _publishable_files(src: Path) -> list[str]:
    """Refuse a folder holding pickle files (before anything is copied); → the files left out of the upload."""
    skipped, pickles = [], []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if any(_matches(part, SKIPPED_DIRS) for part in rel.parts[:-1]) or not path.is_file():
            if path.is_file():
                skipped.append(rel.as_posix())
            continue
        if len(rel.parts) == 1 and _matches(rel.name, TRAINING_ARTIFACTS):
            skipped.append(rel.as_posix())
        elif is_pickle_file(path):
            pickles.append(rel.as_posix())
    if pickles:
        raise CtxirError(
            f"{str(src)!r} contains pickle files ({', '.join(pickles)}): pickle runs code when loaded, "
            "so it is never published. Re-save the model with safetensors (save_pretrained does by "
            "default) and delete the pickle files, then stage again"
        )
    return skipped


def _fresh_staging_dir(src: Path, repo_id: str, staging_dir: str | Path | None) -> Path:
    """An empty staging folder, marked as ctxir's; a previous staging there is replaced, anything else refused."""
    # default: beside the training outputs (outputs/ is git-ignored)
    default = src.parent / "hub" / repo_id.replace("/", "--")
    dest = Path(staging_dir).expanduser().resolve() if staging_dir else default
    if dest == src or src in dest.parents or dest in src.parents:
        raise CtxirError(
            f"--staging-dir {str(dest)!r} overlaps the model folder {str(src)!r}: choose a separate "
            "folder (the default is <model-dir>/../hub/<owner>--<name>)"
        )
    if dest.exists() and any(dest.iterdir()) and not (dest / STAGING_MARKER).is_file():
        raise CtxirError(
            f"--staging-dir {str(dest)!r} exists and is not a previous staging: empty it or choose another folder"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    return dest


def _swap_in(work: Path, dest: Path) -> None:
    """``work`` becomes ``dest``; a previous staging there is removed only once the new one is in place."""
    old = dest.with_name(f".{dest.name}.old.tmp")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    work.rename(dest)
    shutil.rmtree(old, ignore_errors=True)


def _stage_figures(src: Path, dest: Path, figures) -> list[str]:
    """Copy <model-dir>/figures/*, figures beside the model and ``figures`` → the image paths the card shows."""
    figure_paths = sorted(
        {
            *(p for p in src.iterdir() if p.suffix.lower() in FIGURE_SUFFIXES),
            *((src / FIGURES_DIR).glob("*") if (src / FIGURES_DIR).is_dir() else ()),
            *(Path(f).expanduser().resolve() for f in figures),
        }
    )
    staged_figures = []
    for fig in figure_paths:
        if not fig.is_file() or fig.suffix.lower() not in FIGURE_SUFFIXES:
            raise CtxirError(f"figure {str(fig)!r} is not a {'/'.join(FIGURE_SUFFIXES)} file")
        (dest / FIGURES_DIR).mkdir(exist_ok=True)
        shutil.copy2(fig, dest / FIGURES_DIR / fig.name)
        if fig.suffix.lower() != ".html":
            staged_figures.append(f"{FIGURES_DIR}/{fig.name}")
    return staged_figures


def _copy_matching(src: Path, dest: Path, patterns, exclude=(), recursive: bool = False) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.iterdir()):
        if path.is_file() and _matches(path.name, patterns) and path.name not in exclude:
            shutil.copy2(path, dest / path.name)
        elif path.is_dir() and recursive and not _matches(path.name, SKIPPED_DIRS):
            _copy_matching(path, dest / path.name, patterns, exclude, recursive)


def _stage_cls_lr(src: Path, dest: Path, base_dir: Path, base_license: tuple[str, License] | None) -> None:
    """Ranker weights + config, and the encoder it reads copied beside them (config base_model = ".")."""
    config = read_json(src / CLS_LR_CONFIG)
    base = config.get("base_model", "")
    if has_ctxir_heads(base_dir):  # that cross-encoder standalone, the ranker as its last head
        write_standalone_cls_lr(src, base_dir, dest)
        copy_side_files(src, dest)  # the ranker's own records (fusion, evaluation): ctxir reads them
    else:  # a plain base encoder: its transformer body (AutoModel + tokenizer) copied beside the ranker
        body = transformer_dir(base_dir)
        if not any(p.suffix == ".safetensors" and p.name != CLS_LR_WEIGHTS for p in body.iterdir()):
            raise CtxirError(
                f"the CLS-LR base model {base!r} ({str(body)!r}) has no .safetensors weights: re-save it "
                "with save_pretrained (safetensors is the default) before publishing"
            )
        _copy_matching(body, dest, ENCODER_FILE_PATTERNS, exclude=(CLS_LR_WEIGHTS,))
        shutil.copy2(src / CLS_LR_WEIGHTS, dest / CLS_LR_WEIGHTS)
    if "base_model_source" not in config:
        # A local path would publish the trainer's directory layout: keep the folder name (or the Hub id).
        local = base == "." or (src / base).is_dir() or Path(base).expanduser().exists()
        config["base_model_source"] = base_dir.name if local else base
    config["base_model"] = "."  # ClsLrRanker.load: "." = the encoder lives in this folder
    if base_license is not None:
        config["base_model_license"] = {"what": base_license[0], "license": base_license[1].name}
    write_json(dest / CLS_LR_CONFIG, config)


def validate(
    folder: str | Path, base_license: tuple[str, License] | bool | None = False, repo_id: str | None = None
) -> StagedRepo:
    """Refuse a staged folder that is not safe and complete to publish; → what it holds."""
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise CtxirError(f"{str(folder)!r} is not a folder: pass the staged folder `push --dry-run` printed")
    files = list(filter_repo_objects(_files(folder), ignore_patterns=DEFAULT_IGNORE_PATTERNS))
    # 1. nothing a loader would unpickle
    pickles = [f for f in files if is_pickle_file(folder / f)]
    if pickles:
        raise CtxirError(
            f"{str(folder)!r} contains pickle files ({', '.join(pickles)}): they are never published "
            "(loading a pickle can run code). Delete them; weights must be .safetensors"
        )
    # 2. exactly what upload_folder sends and `hf download` returns
    hidden = [f for f in files if any(part.startswith(".") for part in f.split("/"))]
    if hidden:
        raise CtxirError(
            f"{str(folder)!r} contains hidden files ({', '.join(hidden)}), which a model repo does not "
            "need: stage into a fresh folder"
        )
    if not any(f.endswith(".safetensors") for f in files):
        raise CtxirError(f"{str(folder)!r} has no .safetensors weights")
    # 3. the card agrees with metrics.json
    metrics = load_metrics(folder)
    model_type = metrics["model_type"]
    found = detect_model_type(folder)
    if found != model_type:
        raise CtxirError(
            f"{METRICS_FILE} says {model_type!r} but {str(folder)!r} holds {found or 'no known model'}"
        )
    if base_license is False:
        base_license = stored_base_license(folder, model_type, metrics)
    meta = check_card(folder / README, metrics, base_license)
    # 4. it loads back and produces finite scores, the way users and ctxir will load it
    _load_check(folder, model_type)
    # 5. the card's snippets run from the repo as `hf download` leaves it, those without ctxir where it is absent
    repo_id = repo_id or read_json(folder / STAGING_MARKER, strict=False).get("repo_id")
    if repo_id:
        check_card_snippets(folder, repo_id)
    return StagedRepo(
        folder=folder,
        repo_id=repo_id or "",
        model_type=model_type,
        license=meta["license"],
        files=files,
        eval_count=len(metrics["evaluations"]),
    )


def _load_check(folder: Path, model_type: str) -> None:
    # A re-staged folder at the same path must be loaded afresh, not from ctxir's per-process caches.
    resolve_model.cache_clear()
    load_transformer.cache_clear()
    path = resolve_model(str(folder))
    try:
        scores = MODEL_TYPES[model_type].load_scores(path, LOAD_CHECK_TEXTS)
    except CtxirError:
        raise
    except Exception as err:  # any loader failure means the repo would be broken for its users
        raise CtxirError(f"the staged {model_type} in {str(folder)!r} does not load back: {err}") from err
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0 or not np.isfinite(scores).all():
        raise CtxirError(f"the staged {model_type} in {str(folder)!r} loads but gives non-finite scores")
