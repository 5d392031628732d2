"""What a Hub user's own code gets from each shipped model (the figure each card leads with), into
docs/bench/hub-user.json: each model staged, laid into a temporary Hugging Face cache and loaded by repo id with
plain sentence-transformers where ``import ctxir`` fails."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECORD = ROOT / "docs" / "bench" / "hub-user.json"
DATA = ROOT.parent / "shared" / "data"
DEPTH = 100
PROTOCOL = {
    "reranking": "CrossEncoder(repo_id, trust_remote_code=True).rank(query, documents) over BM25's top 100 on "
    'SciFact test, documents as "title text" (BEIR\'s protocol), nDCG@10',
    "sts": "CrossEncoder(repo_id, trust_remote_code=True).predict(pairs) on STS-B test, each pair in the order "
    "given, Spearman against the gold scores",
}

# Runs where ctxir cannot be imported: each repo loaded by id as its card loads it.
USER_SCRIPT = """
import json, sys
try:
    import ctxir  # noqa: F401
    sys.exit("ctxir is importable: the figure would not be a Hub user's")
except ModuleNotFoundError:
    pass
import torch
from sentence_transformers import CrossEncoder

torch.set_num_threads(2)
job = json.load(open(sys.argv[1], encoding="utf-8"))
out = {}
for repo_id, task in job["models"].items():
    model = CrossEncoder(repo_id, trust_remote_code=True, device="cpu")
    if task == "sts":
        out[repo_id] = [float(s) for s in model.predict([tuple(p) for p in job["pairs"]], batch_size=32)]
        continue
    run = {}
    for qid, query in job["queries"].items():
        ids, texts = zip(*job["candidates"][qid])
        ranked = model.rank(query, list(texts), batch_size=32)
        run[qid] = {ids[r["corpus_id"]]: float(r["score"]) for r in ranked}
    out[repo_id] = run
json.dump(out, open(sys.argv[2], "w", encoding="utf-8"))
"""


def bm25_candidates(data: Path) -> tuple[dict, dict, dict, dict]:
    """(queries, qrels, BM25's run, {qid: [(doc_id, "title text"), ...]}) on SciFact test, BM25's top ``DEPTH``."""
    from ctxir import BM25Retriever, load_beir

    corpus, queries, qrels = load_beir(data / "scifact", "test")
    hits = BM25Retriever(corpus).search(queries, DEPTH)
    run = {q: {h.doc_id: float(h.score) for h in hs} for q, hs in hits.items()}
    text = {d: f"{doc.get('title', '')} {doc.get('text', '')}".strip() for d, doc in corpus.items()}
    candidates = {q: [(h.doc_id, text[h.doc_id]) for h in hs] for q, hs in hits.items()}
    return queries, qrels, run, candidates


def run_as_hub_user(folders: dict[str, Path], job: dict, root: Path) -> dict:
    """Run USER_SCRIPT on ``job`` with ``folders`` (repo id → staged folder) in a Hub cache, ctxir blocked."""
    from ctxir.publish.standalone import hub_user_env, lay_into_hf_cache

    for repo_id, folder in folders.items():
        lay_into_hf_cache(folder, repo_id, root / "hub")
    (root / "job.json").write_text(json.dumps(job), encoding="utf-8")
    command = [sys.executable, "-c", USER_SCRIPT, str(root / "job.json"), str(root / "out.json")]
    env = hub_user_env(root, root / "hub", block_ctxir=True)
    run = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(f"the Hub user's script failed:\n{run.stderr[-3000:]}")
    return json.loads((root / "out.json").read_text(encoding="utf-8"))


def measure(data: Path = DATA) -> dict:
    """Stage the shipped models, score them as a Hub user, and evaluate: → the record."""
    from scipy.stats import spearmanr

    from ctxir import evaluate_run, load_sts
    from ctxir.encoders import models as shipped
    from ctxir.publish.staging import stage

    queries, qrels, bm25_run, candidates = bm25_candidates(data)
    sts = load_sts(data / "stsbenchmark" / "sts-test.csv")
    tasks = dict.fromkeys([shipped.SHIPPED_CROSS_ENCODER, shipped.SHIPPED_CLS_LR], "reranking")
    tasks[shipped.SHIPPED_STS_CROSS_ENCODER] = "sts"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folders = {}
        for repo_id in tasks:
            staged, base = root / "staged" / repo_id.replace("/", "--"), shipped.SHIPPED_BASES[repo_id]
            folders[repo_id] = stage(
                shipped.SHIPPED_MODELS[repo_id], repo_id, staged, base_model_id=base
            ).folder
        pairs = [(a, b) for a, b, _ in sts]
        job = {"models": tasks, "queries": queries, "candidates": candidates, "pairs": pairs}
        scored = run_as_hub_user(folders, job, root / "user")
    bm25 = evaluate_run(qrels, bm25_run).aggregate["nDCG@10"]
    models, scifact = {}, {"dataset": "scifact", "split": "test"}
    for repo_id, task in tasks.items():
        if task == "sts":
            value = spearmanr(scored[repo_id], [g for _, _, g in sts]).statistic
            models[repo_id] = {"dataset": "stsb", "split": "test", "metric": "spearman", "pairs": len(sts)}
        else:
            value = evaluate_run(qrels, scored[repo_id]).aggregate["nDCG@10"]
            models[repo_id] = {**scifact, "metric": "nDCG@10", "queries": len(queries), "first_stage": "bm25"}
            models[repo_id].update(depth=DEPTH, before=round(float(bm25), 4))
        models[repo_id].update(task=task, value=round(float(value), 4), protocol=PROTOCOL[task])
    return {
        "command": "python scripts/hub_user_figures.py",
        "bm25": {**scifact, "nDCG@10": round(float(bm25), 4), "queries": len(queries)},
        "models": models,
    }


def main() -> int:
    record = measure()
    RECORD.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
