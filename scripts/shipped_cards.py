"""Refresh what the shipped models say about themselves from their own files: cards, suite rows, terms, checksums.

    python scripts/shipped_cards.py            # rewrite; prints what changed
    python scripts/shipped_cards.py --check    # exit 1 (and name the files) if anything would change

For each folder under ``ctxir/assets/models``: 1. the metrics.json rows of the out-of-domain suite are rebuilt from
its evaluation.json (``training.evaluate_reranker.evaluation_rows``: what each figure covers, the headline, the
tie-only fused mode named as such), the training run's own rows kept; 2. the card (README.md) is rendered from
metrics.json as ``training/ship.py`` renders it (``write_card``); 3. checksums.json is rewritten (metrics.json is a
file loaders read). Then ``LICENSES.md`` states each model's weights' terms (``ctxir.publish.weights_terms``). No
figure is typed: every number comes from the JSON files the training and evaluation commands wrote.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ctxir import kinds  # noqa: E402
from ctxir.encoders.models import (  # noqa: E402
    ASSETS_MODELS,
    DEFAULT_BI_ENCODER,
    SHIPPED_CLS_LR,
    SHIPPED_CROSS_ENCODER,
    SHIPPED_MODELS,
    SHIPPED_STS_CROSS_ENCODER,
)
from ctxir.files import file_sha256, write_checksums  # noqa: E402
from ctxir.publish.weights_terms import LICENSES_FILE, weights_terms_markdown  # noqa: E402

# (Hub id, model type, the base write_card names) as training/ship.py ships them
MODELS = (
    (SHIPPED_CROSS_ENCODER, kinds.CROSS_ENCODER, DEFAULT_BI_ENCODER),
    (SHIPPED_CLS_LR, kinds.CLS_LR, SHIPPED_CROSS_ENCODER),
    (SHIPPED_STS_CROSS_ENCODER, kinds.CROSS_ENCODER, DEFAULT_BI_ENCODER),
)
# a row evaluation_rows writes (and only those): first stage and depth, the claims part, the mode
SUITE_ROW = re.compile(
    r"^(bm25|dense|hybrid) top \d+(, (seen|unseen)-abstract claims \(\d+\))?, "
    r"(re-ranker alone|fused with the first stage \(RRF\)|default: .*)$"
)


def refresh_rows(folder: Path) -> None:
    """metrics.json with the suite's rows rebuilt from evaluation.json (training rows kept, in their order)."""
    from training.evaluate_reranker import evaluation_rows

    evaluation = folder / "evaluation.json"
    if not evaluation.is_file():
        return
    path = folder / "metrics.json"
    raw = path.read_text(encoding="utf-8")
    metrics = json.loads(raw)
    kept = [e for e in metrics["evaluations"] if not SUITE_ROW.match(str(e.get("config") or ""))]
    metrics["evaluations"] = kept + evaluation_rows(json.loads(evaluation.read_text(encoding="utf-8")))
    ascii_only = raw.isascii()  # keep the file's own escaping, so an unchanged record stays byte-identical
    path.write_text(json.dumps(metrics, indent=2, ensure_ascii=ascii_only) + "\n", encoding="utf-8")


def refresh(dest: Path) -> None:
    """Steps 1–4 on the model folders under ``dest`` (laid out as ctxir/assets/models)."""
    from ctxir.publish.model_folder import base_model_license
    from training.ship import write_card

    shipped = []
    for name, kind, base in MODELS:
        folder = dest / SHIPPED_MODELS[name].name
        refresh_rows(folder)  # 1.
        write_checksums(folder)  # 3. first: the card's facts come from loading the folder, which checks them
        write_card(folder, name, kind, base)  # 2.
        shipped.append((name, folder, base_model_license(DEFAULT_BI_ENCODER)))
    (dest / LICENSES_FILE).write_text(weights_terms_markdown(shipped), encoding="utf-8")  # 4.


def snapshot(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if anything would change"
    )
    args = parser.parse_args(argv)
    before = snapshot(ASSETS_MODELS)
    with tempfile.TemporaryDirectory() as tmp:
        # rendered in a copy laid out as the package (ctxir/assets/models), then copied back file by file
        work = Path(tmp) / "ctxir" / "assets" / "models"
        shutil.copytree(ASSETS_MODELS, work)
        refresh(work)
        after = snapshot(work)
        changed = sorted(k for k in after if before.get(k) != after[k])
        if not args.check:
            for rel in changed:
                (ASSETS_MODELS / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(work / rel, ASSETS_MODELS / rel)
    for rel in changed:
        print(f"{'would change' if args.check else 'wrote'} {ASSETS_MODELS.relative_to(ROOT) / rel}")
    if not changed:
        print("the shipped cards, rows, terms and checksums are up to date")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
