"""Stage a training output into the folder that becomes the Hub repo, and validate that folder."""

from __future__ import annotations

import fnmatch
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctxir.adapt.work import RECORD_FILE
from ctxir.encoders.models import is_adapter, load_transformer, resolve_model
from ctxir.files import (
    disk_full,
    is_disk_full,
    read_json,
    refuse_pickles,
    write_atomic,
    write_checksums,
    write_json,
)
from ctxir.kinds import BI_ENCODER
from ctxir.names import CLS_LR_CONFIG, CLS_LR_WEIGHTS, looks_like_hub_id
from ctxir.publish import model_folder, standalone
from ctxir.publish.adapted import adapt_metrics, is_adapt_output, write_standalone_bi_encoder
from ctxir.publish.cards import CardInputs, check_card, render_card
from ctxir.publish.licenses import LICENSE_FILE, License
from ctxir.publish.metrics_file import METRICS_FILE, license_text, load_metrics, training_license
from ctxir.publish.model_types import MODEL_TYPES
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


def _check_model_type(folder: Path, metrics: dict) -> str:
    model_type, found = metrics["model_type"], model_folder.detect_model_type(folder)
    if found != model_type:
        raise CtxirError(
            f"{METRICS_FILE} says model_type {model_type!r} but {str(folder)!r} holds "
            f"{'a ' + found if found else 'no model sentence-transformers or ctxir can load'}: "
            "point --model-dir at the folder the training script saved"
        )
    return model_type


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
        metrics = adapt_metrics(src, repo_id, corpus_license, evaluation)  # render_card validates it
    else:
        for flag, value in (("--corpus-license", corpus_license), ("--evaluation", evaluation)):
            if value:
                raise CtxirError(
                    f"{flag} {value!r} is for a folder `ctxir adapt` wrote; {str(src)!r} is a training output, "
                    f"whose {METRICS_FILE} states its data's licenses and its evaluations: leave {flag} out"
                )
        metrics = load_metrics(src)
    model_type = _check_model_type(src, metrics)
    carries_base = MODEL_TYPES[model_type].carries_base
    # a model that carries its base (CLS-LR): that encoder's folder, whose license is the base's; a bundled
    # encoder (".") left its metrics.json behind: ask the base the run names
    base_dir, base_name = model_folder.cls_lr_base_dir(src) if carries_base else (None, "")
    if base_dir in (None, src):
        base_license = model_folder.base_model_license(metrics["base_model"])
    else:
        base_license = model_folder.folder_license(base_dir, f"base model {base_name}")
    training_license(metrics, base_license)  # refuse early: unknown training-data license
    if carries_base and not base_model_id:
        raise CtxirError(
            f"the {model_type} in {str(src)!r} reads the encoder {metrics['base_model']!r}, a training folder: "
            "pass --base-model-id with that encoder's Hub id (e.g. the pushed cross-encoder it reads)"
        )
    base_model_id = check_base_model(base_model_id or str(metrics["base_model"]), repo_id)

    # 2. refuse pickles before anything is copied; trainer leftovers and work folders are left out
    skipped, kept = [], []
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        in_skipped_dir = any(_matches(part, SKIPPED_DIRS) for part in rel.parts[:-1])
        if in_skipped_dir or (len(rel.parts) == 1 and _matches(rel.name, TRAINING_ARTIFACTS)):
            skipped.append(rel.as_posix())
        else:
            kept.append(rel.as_posix())
    refuse_pickles(src, kept)
    # <model-dir>/figures/*, figures beside the model, and any passed explicitly
    found = [
        *(p for p in src.iterdir() if p.suffix.lower() in FIGURE_SUFFIXES),
        *(src / FIGURES_DIR).glob("*"),
    ]
    for fig in [*figures, *found]:
        if not Path(fig).expanduser().is_file() or Path(fig).suffix.lower() not in FIGURE_SUFFIXES:
            raise CtxirError(f"--figures {str(fig)!r} is not a {'/'.join(FIGURE_SUFFIXES)} file")
    figure_paths = sorted({*found, *(Path(f).expanduser().resolve() for f in figures)})

    # 3. an empty staging folder, marked as ctxir's (a previous staging there is replaced, anything else refused),
    # assembled beside the destination and swapped in whole: a full disk or a kill leaves the previous staging
    default = src.parent / "hub" / repo_id.replace("/", "--")  # beside the training outputs (git-ignored)
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
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        write_json(work / STAGING_MARKER, {"source": str(src), "repo_id": repo_id}, indent=None)

        # 4. copy the model; an adapter, or ctxir's heads, over a base only ctxir resolves: merged, the full body
        merged = not carries_base and (standalone.has_ctxir_heads(src) or is_adapter(src))
        if carries_base:
            _stage_cls_lr(src, work, base_dir, base_license)
        elif merged:
            write = (
                write_standalone_bi_encoder
                if model_type == BI_ENCODER
                else standalone.write_standalone_cross_encoder
            )
            write(src, work)
            standalone.copy_side_files(src, work)
        else:
            _copy_matching(src, work, MODEL_FILE_PATTERNS, exclude=(METRICS_FILE, "trainer_state.json"))
            # each module's folder (Normalize & co. may save none)
            for path in [m["path"] for m in read_json(src / "modules.json") or [] if m.get("path")]:
                if (src / path).is_dir():
                    _copy_matching(src / path, work / path, MODEL_FILE_PATTERNS, recursive=True)
        if adapted:
            write_json(work / RECORD_FILE, metrics["adapt"])  # the side file's copy, the corpus by name only

        # 5. the figures
        for fig in figure_paths:
            (work / FIGURES_DIR).mkdir(exist_ok=True)
            shutil.copy2(fig, work / FIGURES_DIR / fig.name)

        # 6. the card, under the repo's own name, its base the Hub id it was trained from; a merged bi-encoder is
        # read off the staged folder: a plain SentenceTransformer (its adapter would need peft)
        metrics["model_name"] = repo_id.split("/")[-1]
        write_json(work / METRICS_FILE, metrics)
        facts = model_folder.model_facts(src if merged and model_type != BI_ENCODER else work, model_type)
        hub_code = standalone.HUB_CODE_FILE if (work / standalone.HUB_CODE_FILE).is_file() else None
        inputs = CardInputs(
            repo_id=repo_id,
            base_model_id=base_model_id,
            base_license=base_license,
            facts={**facts, "merged": merged, "hub_code": hub_code},
            figures=[f"{FIGURES_DIR}/{fig.name}" for fig in figure_paths if fig.suffix.lower() != ".html"],
        )
        write_atomic(work / model_folder.README, render_card(metrics, inputs).content)
        # sources whose terms differ: their terms listed
        if training_license(metrics, base_license)[0].link == LICENSE_FILE:
            write_atomic(work / LICENSE_FILE, license_text(metrics, base_license))
        write_checksums(work)  # last: what a download of the repo is checked against when loaded

        # 7. validated (its card's snippets run as a Hub reader would), then swapped in; the old one removed last
        report = validate(work, base_license=base_license, repo_id=repo_id)
        old = dest.with_name(f".{dest.name}.old.tmp")
        shutil.rmtree(old, ignore_errors=True)
        if dest.exists():
            dest.rename(old)
        work.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as err:
        if is_disk_full(err):
            raise disk_full(dest, err) from err
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if adapted:  # the adapter's own files and the run's work files: replaced by the merged model
        skipped = sorted({*skipped, *(f for f in _files(src) if f.startswith(("work/", "adapter_")))})
    report.folder, report.repo_id, report.skipped = dest, repo_id, skipped
    return report


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
    if standalone.has_ctxir_heads(base_dir):  # that cross-encoder standalone, the ranker as its last head
        standalone.write_standalone_cls_lr(src, base_dir, dest)
        standalone.copy_side_files(src, dest)  # the ranker's own records (fusion, evaluation): ctxir reads
    else:  # a plain base encoder: its transformer body (AutoModel + tokenizer) copied beside the ranker
        body = model_folder.transformer_dir(base_dir)
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
    refuse_pickles(folder, files)
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
    model_type = _check_model_type(folder, metrics)
    if base_license is False:
        base_license = model_folder.stored_base_license(folder, model_type, metrics)
    meta = check_card(folder / model_folder.README, metrics, base_license)
    # 4. it loads back and gives finite scores, as users and ctxir load it: afresh, not from ctxir's caches
    resolve_model.cache_clear()
    load_transformer.cache_clear()
    try:
        scores = MODEL_TYPES[model_type].load_scores(resolve_model(str(folder)), LOAD_CHECK_TEXTS)
    except CtxirError:
        raise
    except Exception as err:  # any loader failure means the repo would be broken for its users
        raise CtxirError(f"the staged {model_type} in {str(folder)!r} does not load back: {err}") from err
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0 or not np.isfinite(scores).all():
        raise CtxirError(f"the staged {model_type} in {str(folder)!r} loads but gives non-finite scores")
    # 5. the card's snippets run from the repo as `hf download` leaves it, those without ctxir where it is absent
    repo_id = repo_id or read_json(folder / STAGING_MARKER, strict=False).get("repo_id")
    if repo_id:
        standalone.check_card_snippets(folder, repo_id)
    return StagedRepo(
        folder=folder,
        repo_id=repo_id or "",
        model_type=model_type,
        license=meta["license"],
        files=files,
        eval_count=len(metrics["evaluations"]),
    )
