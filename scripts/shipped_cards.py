"""Refresh what the shipped models say about themselves from their own files: metrics.json's rows (from
evaluation.json and docs/bench/hub-user.json), the cards, checksums and LICENSES.md; ``--check``: exit 1 if
anything would change."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir import kinds  # noqa: E402
from ctxir.encoders.models import (  # noqa: E402
    ASSETS_MODELS,
    DEFAULT_BI_ENCODER,
    SHIPPED_BASES,
    SHIPPED_CLS_LR,
    SHIPPED_CROSS_ENCODER,
    SHIPPED_MODELS,
    SHIPPED_STS_CROSS_ENCODER,
)
from ctxir.files import file_sha256, write_checksums  # noqa: E402
from ctxir.publish.weights_terms import LICENSES_FILE, weights_terms_markdown  # noqa: E402

# (Hub id, model type, the base write_card names) as training/ship.py ships them
MODELS = tuple(
    (name, kinds.CLS_LR if name == SHIPPED_CLS_LR else kinds.CROSS_ENCODER, SHIPPED_BASES[name])
    for name in (SHIPPED_CROSS_ENCODER, SHIPPED_CLS_LR, SHIPPED_STS_CROSS_ENCODER)
)
HUB_USER = ROOT / "docs" / "bench" / "hub-user.json"
HUB_USER_CONFIG = "CrossEncoder(repo_id, trust_remote_code=True), sentence-transformers alone"
# the published peer each re-ranker's lead figure stands beside: the same protocol (BM25 top 100, SciFact test)
PEER = {
    "anchor": 0.688,
    "anchor_name": "cross-encoder/ms-marco-MiniLM-L6-v2",
    "anchor_source": "Thakur et al. 2021 (BEIR), Table 2, BM25 + CE (over BEIR's Elasticsearch BM25, 0.665)",
    "anchor_queries": 300,
    "anchor_first_stage": "bm25",
    "anchor_depth": 100,
}
# a row evaluation_rows writes (and only those): first stage and depth, the claims part, the mode
SUITE_ROW = re.compile(
    r"^(bm25|dense|hybrid) top \d+(, (seen|unseen)-abstract claims \(\d+\))?, "
    r"(re-ranker alone|fused with the first stage \(RRF\)|default: .*)$"
)


def suite_rows(evaluation: dict) -> list[dict]:
    """The suite's metrics.json rows of an evaluation.json, none marked headline (the hub-user row leads)."""
    from training.evaluate_reranker import evaluation_rows

    return [{k: v for k, v in e.items() if k != "headline"} for e in evaluation_rows(evaluation)]


def hub_user_row(name: str, record: dict) -> dict:
    """The lead metrics.json row of ``name`` from the hub-user record: what ``CrossEncoder(name)`` gets."""
    r = record["models"][name]
    how = f", BM25 top {r['depth']} re-ranked" if r["task"] == "reranking" else ", one order"
    row = {key: r[key] for key in ("dataset", "split", "task", "metric")} | {"before": r.get("before")}
    row |= {
        "after": r["value"],
        "config": HUB_USER_CONFIG + how,
        "queries": r.get("queries") or r.get("pairs"),
    }
    row |= {
        "headline": True,
        "source": f"`{record['command']}` in ctxir's repository (docs/bench/hub-user.json)",
        "protocol": r["protocol"],
    }
    if r["task"] == "reranking":
        row.update(first_stage=r["first_stage"], depth=r["depth"], **PEER)
    return row


def refresh_rows(folder: Path, name: str) -> None:
    """metrics.json's suite rows rebuilt from evaluation.json, training rows kept, the hub-user row first (headline)."""
    path = folder / "metrics.json"
    raw = path.read_text(encoding="utf-8")
    metrics = json.loads(raw)
    kept = [
        {k: v for k, v in e.items() if k != "headline"}
        for e in metrics["evaluations"]
        if not SUITE_ROW.match(str(e.get("config") or ""))
        and not str(e.get("config")).startswith(HUB_USER_CONFIG)
    ]
    evaluation = folder / "evaluation.json"
    suite = suite_rows(json.loads(evaluation.read_text(encoding="utf-8"))) if evaluation.is_file() else []
    lead = [hub_user_row(name, json.loads(HUB_USER.read_text(encoding="utf-8")))]
    key = (lead[0]["dataset"], lead[0]["metric"], lead[0]["queries"])
    for e in kept:  # the pair scorer's published anchor, on the same pairs, stands beside its lead too
        same = (e["dataset"], e["metric"], e.get("queries")) == key
        if same and e.get("anchor") is not None and "anchor" not in lead[0]:
            lead[0].update({k: v for k, v in e.items() if k.startswith("anchor")})
    metrics["evaluations"] = lead + kept + suite
    if name == SHIPPED_CLS_LR:  # its body is the cross-encoder: that model's training data is in its weights
        base = json.loads(
            (folder.parent / SHIPPED_MODELS[SHIPPED_CROSS_ENCODER].name / "metrics.json").read_text()
        )
        own = {d["name"] for d in metrics["datasets"]}
        earlier = [d for d in base["datasets"] if d["role"] == "train" and d["name"] not in own]
        metrics["datasets"] += [{**d, "stage": "earlier"} for d in earlier]
    ascii_only = raw.isascii()  # keep the file's own escaping, so an unchanged record stays byte-identical
    path.write_text(json.dumps(metrics, indent=2, ensure_ascii=ascii_only) + "\n", encoding="utf-8")


def refresh(dest: Path) -> None:
    """Steps 1–4 on the model folders under ``dest`` (laid out as ctxir/assets/models)."""
    from ctxir.publish.model_folder import base_model_license
    from training.ship import write_card

    shipped = []
    for name, kind, base in MODELS:
        folder = dest / SHIPPED_MODELS[name].name
        refresh_rows(folder, name)  # 1.
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
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if anything would")
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
