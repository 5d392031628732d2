"""Put a trained cross-encoder, the CLS-LR ranker fitted on it and the pair scorer inside the ctxir package.

python training/ship.py --cross-encoder outputs/ce --cls-lr outputs/cls-lr
python training/ship.py --pair-scorer outputs/sts-lora
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python training/ship.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from ctxir import kinds
from ctxir.cli import flag
from ctxir.encoders.models import (
    ADAPTER_CONFIG,
    ASSETS_MODELS,
    DEFAULT_BI_ENCODER,
    SHIPPED_CLS_LR,
    SHIPPED_CROSS_ENCODER,
    SHIPPED_MODELS,
    SHIPPED_STS_CROSS_ENCODER,
    adapter_base,
    is_adapter,
    is_ctxir_modular,
    load_cross_encoder,
    top_layers_config,
)
from ctxir.files import disk_full, is_disk_full, read_json, write_atomic, write_checksums, write_json
from ctxir.names import CLS_LR_CONFIG, CLS_LR_WEIGHTS, TOP_LAYERS_CONFIG, TOP_LAYERS_WEIGHTS
from ctxir.publish.cards import CardInputs, render_card
from ctxir.publish.licenses import LICENSE_FILE
from ctxir.publish.metrics_file import license_text, training_license
from ctxir.publish.model_folder import base_model_license, cls_lr_base_dir, model_facts
from ctxir.rerank import ClsLrRanker
from ctxir.types import CtxirError
from training.common import cli_main

# What the loaders read; anything else in a training output (logs, checkpoints, card drafts) stays behind:
# a sentence-transformers folder's configs and tokenizer
MODEL_CONFIGS = (
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "metrics.json",
)
ADAPTER_FILES = (ADAPTER_CONFIG, "adapter_model.safetensors")
CROSS_ENCODER_FILES = (
    *(TOP_LAYERS_CONFIG, TOP_LAYERS_WEIGHTS, *MODEL_CONFIGS),
    *("fusion.json", "evaluation.json", "passages.json", "calibration.json"),
)
# the first 3 required
CLS_LR_FILES = (CLS_LR_CONFIG, CLS_LR_WEIGHTS, "metrics.json", "fusion.json", "evaluation.json")
# the pair scorer: its adapter, configs and tokenizer (its head's folder is copied as modules.json names it)
PAIR_SCORER_FILES = (*ADAPTER_FILES, *MODEL_CONFIGS, "pair_orders.json")
ALLOWED_SUFFIXES = (".json", ".safetensors", ".txt")
# what the shipped copies must score exactly as the trained ones do
RELEVANCE_PAIR = (
    "Do statins lower the risk of heart attack?",
    "Statin therapy reduced myocardial infarction in patients with high cholesterol.",
)
SIMILARITY_PAIR = ("A man is playing a guitar.", "Someone plays the guitar.")
CARD = "README.md"  # the model card, rendered from metrics.json (ctxir.publish.cards)


@dataclass
class ShipArgs:
    cross_encoder: str = flag("", "train_cross_encoder.py --train-layers output; with --cls-lr")
    cls_lr: str = flag("", "train_cls_lr.py output whose --base-model is that cross-encoder")
    pair_scorer: str = flag("", f"train_pair_scorer.py output: ships as {SHIPPED_STS_CROSS_ENCODER}")
    dest: str = flag(str(ASSETS_MODELS), "package folder (ctxir/assets/models)")
    max_mb: float = flag(10.0, "refuse if the package folder's models would exceed this size in all")


def _copy(src: Path, dest: Path, names: tuple[str, ...], required: tuple[str, ...]) -> None:
    """``names`` of ``src`` (``required`` ones checked), and a modular head's sub-folders that modules.json names."""
    missing = [n for n in required if not (src / n).is_file()]
    if missing:
        raise CtxirError(
            f"{str(src)!r} has no {', '.join(missing)}: pass the folder the training script wrote"
        )
    dest.mkdir(parents=True)
    for name in names:
        if (src / name).is_file():
            shutil.copy2(src / name, dest / name)
    for entry in read_json(src / "modules.json") or []:
        if entry.get("path"):
            shutil.copytree(src / entry["path"], dest / entry["path"])


def check_shippable(folder: Path, max_mb: float, kept: tuple[Path, ...] = ()) -> float:
    """Size in MB of ``folder`` + ``kept``; refuses other than JSON/safetensors/vocab, over ``max_mb``."""
    files = [p for p in folder.rglob("*") if p.is_file()] + list(kept)
    odd = [p.name for p in files if p.suffix not in ALLOWED_SUFFIXES and p.name not in (CARD, LICENSE_FILE)]
    if odd:
        raise CtxirError(f"refusing to ship {odd}: only JSON, safetensors and vocab.txt go into the package")
    size = sum(p.stat().st_size for p in files) / 1e6
    if size > max_mb:
        raise CtxirError(
            f"the shipped models take {size:.1f} MB, over --max-mb {max_mb:g}: train a smaller adapter "
            "(--lora-r) and publish larger models to the Hub with `ctxir hub push` instead"
        )
    return size


def write_card(folder: Path, name: str, model_type: str, base: str) -> None:
    """``folder/README.md``: the card ``ctxir hub push`` would publish, rendered from ``folder/metrics.json``."""
    metrics = read_json(folder / "metrics.json")
    metrics["model_name"] = name.split("/")[-1]  # the shipped model, not the training output folder
    license_of_base = base_model_license(DEFAULT_BI_ENCODER if model_type == kinds.CLS_LR else base)
    inputs = CardInputs(
        repo_id=name,
        base_model_id=base if "/" in base and not Path(base).exists() else None,
        base_license=license_of_base,
        facts=model_facts(folder, model_type),
    )
    write_atomic(folder / CARD, render_card(metrics, inputs).content)
    # sources of differing terms: each one's listed
    if training_license(metrics, license_of_base)[0].link == LICENSE_FILE:
        write_atomic(folder / LICENSE_FILE, license_text(metrics, license_of_base))


def _same_score(trained: Path, shipped: Path, pair: tuple[str, str], what: str, files: str) -> float:
    """The shipped copy's score of ``pair``, which must be the trained model's (each loaded afresh, as a user would)."""
    scores = []
    for folder in (trained, shipped):
        load_cross_encoder.cache_clear()
        scores.append(float(np.ravel(load_cross_encoder(str(folder), "cpu").predict([pair]))[-1]))
    if abs(scores[0] - scores[1]) > 1e-5:
        raise CtxirError(
            f"the shipped {what} scores {scores[1]:.6f} where the trained one scores {scores[0]:.6f}: "
            f"a file is missing from {files}"
        )
    return scores[1]


def _check_base(base: str) -> None:
    if Path(base).exists():
        raise CtxirError(
            f"the adapter's base is the local folder {base!r}: ship adapters over a Hub id (such as "
            "'sentence-transformers/all-MiniLM-L6-v2', packaged offline) so they load anywhere"
        )


def _stage_rerankers(args: ShipArgs, work: Path) -> dict:
    """The relevance cross-encoder and the CLS-LR ranker fitted on it, checked and assembled under ``work``."""
    # 1. check what was trained
    ce_src, cls_src = Path(args.cross_encoder), Path(args.cls_lr)
    top_layers = top_layers_config(ce_src)
    if not top_layers:
        raise CtxirError(
            f"--cross-encoder {args.cross_encoder!r} holds no trained top layers ({TOP_LAYERS_CONFIG}): train it "
            "with `train_cross_encoder.py --head segment-cosine --train-layers 2`; full models are too large to "
            "ship and go to the Hub"
        )
    base = top_layers["base_model"]
    _check_base(base)
    cls_config = read_json(cls_src / CLS_LR_CONFIG)
    cls_base = cls_config.get("base_model", "")
    # the ranker names its cross-encoder as a folder relative to itself (train_cls_lr.py), a path or a Hub id
    if not cls_base or cls_lr_base_dir(cls_src)[0].resolve() != ce_src.resolve():
        raise CtxirError(
            f"--cls-lr {args.cls_lr!r} reads {cls_base!r}, not --cross-encoder {args.cross_encoder!r}: "
            "fit the CLS-LR ranker on the cross-encoder you ship (train_cls_lr.py --base-model)"
        )
    # 2. assemble both
    ce_dest, cls_dest = (work / SHIPPED_MODELS[name].name for name in (SHIPPED_CROSS_ENCODER, SHIPPED_CLS_LR))
    _copy(ce_src, ce_dest, CROSS_ENCODER_FILES, (TOP_LAYERS_CONFIG, TOP_LAYERS_WEIGHTS, "metrics.json"))
    _copy(cls_src, cls_dest, CLS_LR_FILES, CLS_LR_FILES[:3])
    cls_config["base_model"] = SHIPPED_CROSS_ENCODER  # by name: resolves to the packaged adapter
    write_json(cls_dest / CLS_LR_CONFIG, cls_config)
    check_shippable(work, args.max_mb)
    # 3. the shipped copies must score exactly as the trained ones do (the CLS-LR one once it is in place)
    shipped = _same_score(ce_src, ce_dest, RELEVANCE_PAIR, kinds.CROSS_ENCODER, "CROSS_ENCODER_FILES")
    cls_trained = ClsLrRanker.load(cls_src, device="cpu").score_pairs(RELEVANCE_PAIR[0], [RELEVANCE_PAIR[1]])
    # 4. model cards, from each model's metrics.json; 5. last: each file's size and sha256, checked on loading
    write_card(ce_dest, SHIPPED_CROSS_ENCODER, kinds.CROSS_ENCODER, base)
    write_card(cls_dest, SHIPPED_CLS_LR, kinds.CLS_LR, SHIPPED_CROSS_ENCODER)
    write_checksums(ce_dest)
    write_checksums(cls_dest)
    return {"cross_encoder_score": shipped, "cls_lr_trained_score": float(cls_trained[0])}


def _stage_pair_scorer(args: ShipArgs, work: Path) -> dict:
    """The sentence-pair (STS) cross-encoder — LoRA adapter + segment-cosine head — checked and assembled."""
    src = Path(args.pair_scorer)
    # 1. check what was trained: an adapter with ctxir's head and a measured STS-B test Spearman
    if not is_adapter(src) or not is_ctxir_modular(src):
        raise CtxirError(
            f"--pair-scorer {args.pair_scorer!r} is not a LoRA adapter ({ADAPTER_CONFIG}) with ctxir's "
            "segment-cosine head (named in modules.json): pass the folder `python "
            "training/train_pair_scorer.py` wrote"
        )
    base = adapter_base(src)
    _check_base(base)
    rows = read_json(src / "metrics.json").get("evaluations", [])
    if not any(
        (e.get("dataset"), e.get("split"), e.get("metric")) == ("stsb", "test", "spearman") for e in rows
    ):
        raise CtxirError(
            f"--pair-scorer {args.pair_scorer!r} has no STS-B test Spearman in its metrics.json: pass "
            "the folder of a finished train_pair_scorer.py run (it measures it; the card reports it)"
        )
    # 2. assemble it; 3. it must score exactly as the trained one does; 4. its card; 5. last: its checksums
    out = work / SHIPPED_MODELS[SHIPPED_STS_CROSS_ENCODER].name
    _copy(src, out, PAIR_SCORER_FILES, (*ADAPTER_FILES, "modules.json", "metrics.json"))
    shipped = _same_score(src, out, SIMILARITY_PAIR, "pair scorer", "PAIR_SCORER_FILES")
    write_card(out, SHIPPED_STS_CROSS_ENCODER, kinds.CROSS_ENCODER, base)
    write_checksums(out)
    return {"pair_scorer_score": shipped}


def run(args: ShipArgs) -> dict:
    # 0. what to ship: the re-rankers (a cross-encoder + the CLS-LR ranker read from it), the pair scorer, or all
    if not (args.cross_encoder or args.cls_lr or args.pair_scorer):
        raise CtxirError(
            "nothing to ship: pass --cross-encoder DIR --cls-lr DIR (the re-rankers), --pair-scorer DIR "
            "(the sentence-pair scorer), or all three"
        )
    if bool(args.cross_encoder) != bool(args.cls_lr):
        raise CtxirError(
            f"--cross-encoder {args.cross_encoder!r} and --cls-lr {args.cls_lr!r} ship together (the "
            "CLS-LR ranker reads that cross-encoder): pass both, or neither (with --pair-scorer)"
        )
    # 1–5. check and assemble each model in a fresh folder beside the destination
    dest = Path(args.dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".ship-", dir=dest.parent))
    report: dict = {"dest": str(dest)}
    try:
        if args.cross_encoder:
            report.update(_stage_rerankers(args, work))
        if args.pair_scorer:
            report.update(_stage_pair_scorer(args, work))
        # 6. the size cap counts what the package folder holds afterwards; then swap in each shipped folder whole
        shipped = {p.name for p in work.iterdir()}
        kept = tuple(
            p for p in dest.rglob("*") if p.is_file() and p.relative_to(dest).parts[0] not in shipped
        )
        size = check_shippable(work, args.max_mb, kept)
        dest.mkdir(exist_ok=True)
        for folder in sorted(work.iterdir()):
            if (dest / folder.name).exists():
                shutil.rmtree(dest / folder.name)
            folder.rename(dest / folder.name)
    except OSError as err:  # a full disk while copying: the package folder is unchanged
        if is_disk_full(err):
            raise disk_full(work, err) from err
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["size_mb"] = round(size, 3)
    if args.cross_encoder:  # 7. the shipped CLS-LR ranker reads the shipped cross-encoder, now in place
        cls_trained = report.pop("cls_lr_trained_score")
        ranker = ClsLrRanker.load(dest / SHIPPED_MODELS[SHIPPED_CLS_LR].name, device="cpu")
        cls_shipped = float(ranker.score_pairs(RELEVANCE_PAIR[0], [RELEVANCE_PAIR[1]])[0])
        if abs(cls_trained - cls_shipped) > 1e-4:
            raise CtxirError(
                f"the shipped CLS-LR ranker scores {cls_shipped:.6f}, the trained one {cls_trained:.6f}"
            )
        report["cls_lr_score"] = cls_shipped
    print(f"shipped {', '.join(sorted(shipped))} into {dest} ({size:.2f} MB in all)")
    return report


def main(argv: list[str] | None = None) -> int:
    return cli_main(ShipArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
