"""A re-ranker's scores of candidate lists, kept on disk per query (``--scores-dir`` of ``training.evaluate_reranker``)
so that a long evaluation resumes where it stopped and two processes on one machine share its scoring."""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path

from ctxir.files import read_json, write_json
from ctxir.types import CtxirError, Hit


class ScoreStore:
    """One model's per-query scores, a JSON file per query, each claimed (``<qid>.claim``) before scoring."""

    def __init__(self, root: str | Path, stamp: dict, label: str):
        self.root, self.dir = Path(root), Path(root) / re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")
        self.dir.mkdir(parents=True, exist_ok=True)
        recorded = read_json(self.root / "model.json")
        if recorded and recorded != stamp:
            raise CtxirError(
                f"--scores-dir {str(root)!r} holds the scores of another model or setting ({recorded}, "
                f"not {stamp}): pass a new folder for this model"
            )
        if not recorded:
            write_json(self.root / "model.json", stamp)

    def _path(self, qid: str, suffix: str) -> Path:
        return self.dir / f"{qid.replace('/', '_')}{suffix}"

    def get(self, qid: str, docs: list[str]) -> dict[str, float] | None:
        """The stored scores of exactly these candidates, else None."""
        stored = read_json(self._path(qid, ".json"))
        return stored["scores"] if stored and stored.get("docs") == docs else None

    def claim(self, qid: str) -> bool:
        """True when this process may score ``qid``: no other live process has claimed it."""
        path = self._path(qid, ".claim")
        if path.is_file() and not _alive(path.read_text().strip()):
            path.unlink(missing_ok=True)  # its process is gone: take the query over
        try:
            with open(path, "x") as f:  # created exclusively: one process wins
                f.write(str(os.getpid()))
        except FileExistsError:
            return False
        return True

    def put(self, qid: str, docs: list[str], scores: dict[str, float]) -> None:
        write_json(self._path(qid, ".json"), {"docs": docs, "scores": scores})
        self._path(qid, ".claim").unlink(missing_ok=True)


def _alive(pid: str) -> bool:
    if not pid.isdigit():
        return True  # a claim being written this instant: its process is alive
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def model_stamp(folder: str | Path, reranker) -> dict:
    """What makes a model's scores its own: its weights' sha256 and how it reads long documents."""
    digest = hashlib.sha256()
    for p in sorted(p for p in Path(folder).rglob("*.safetensors") if p.is_file()):
        digest.update(p.read_bytes())
    passages = getattr(reranker, "passages", None)
    read = [passages.read_tokens] if passages and passages.read_tokens else []
    return {
        "weights_sha256": digest.hexdigest(),
        "passages": [passages.words, passages.stride, *read] if passages else None,
    }


def score_candidates(
    reranker,
    queries: dict[str, str],
    first: dict[str, list[Hit]],
    corpus: dict,
    label: str,
    store_root: str = "",
    stamp: dict | None = None,
    scored: dict | None = None,
) -> dict[str, dict[str, float]]:
    """{qid: {doc_id: score}}: ``scored`` plus ``first``'s candidates it lacks (kept in ``store_root``)."""
    from tqdm.auto import tqdm

    scored = {q: dict((scored or {}).get(q, {})) for q in queries}
    missing = {q: [h for h in first[q] if h.doc_id not in scored[q]] for q in queries}
    missing = {q: hits for q, hits in missing.items() if hits}
    store = ScoreStore(store_root, stamp or {}, label) if store_root and missing else None
    start, pairs = time.perf_counter(), sum(len(v) for v in missing.values())

    def take(q: str) -> bool:
        """``q``'s scores into ``scored``: kept, else scored here; False when another process has claimed it."""
        docs = [h.doc_id for h in missing[q]]
        kept = store.get(q, docs) if store else None
        if kept is None and store and not store.claim(q):
            return False
        if kept is None:
            kept = {h.doc_id: float(h.score) for h in reranker._rerank(queries[q], missing[q], corpus)}
            if store:
                store.put(q, docs, kept)
        scored[q].update(kept)
        return True

    waiting = [
        q for q in tqdm(missing, desc=f"re-ranking {label} ({pairs} pairs)", mininterval=10) if not take(q)
    ]
    if waiting:
        print(f"{label}: waiting for {len(waiting)} queries other processes are scoring", flush=True)
    while waiting:
        q = waiting.pop(0)
        if not take(q):
            waiting.append(q)
            time.sleep(2.0 / len(waiting))
    seconds = time.perf_counter() - start
    print(f"{label}: {pairs} pairs in {seconds:.0f} s ({pairs / max(seconds, 1e-9):.1f} pairs/s)", flush=True)
    return scored
