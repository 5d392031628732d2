"""A re-ranker's scores of candidate lists, kept on disk per query so that a long evaluation resumes where it stopped
and two processes on one machine share its scoring (``--scores-dir`` of ``training.evaluate_reranker``): each
scores the queries the other has not claimed."""

from __future__ import annotations

import time
from pathlib import Path

from ctxir.files import read_json, write_json
from ctxir.types import CtxirError, Hit


class ScoreStore:
    """One model's per-query scores on disk (--scores-dir), one JSON file per query; a query is claimed
    (``<qid>.claim``, created exclusively) before it is scored, and another model's scores are refused."""

    def __init__(self, root: str | Path, stamp: dict, label: str):
        import re

        self.root, self.dir = Path(root), Path(root) / re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")
        self.dir.mkdir(parents=True, exist_ok=True)
        recorded = read_json(self.root / "model.json") if (self.root / "model.json").is_file() else None
        if recorded is not None and recorded != stamp:
            raise CtxirError(
                f"--scores-dir {str(root)!r} holds the scores of another model or setting ({recorded}, "
                f"not {stamp}): pass a new folder for this model"
            )
        if recorded is None:
            write_json(self.root / "model.json", stamp)

    def _path(self, qid: str, suffix: str) -> Path:
        return self.dir / f"{qid.replace('/', '_')}{suffix}"

    def get(self, qid: str, docs: list[str]) -> dict[str, float] | None:
        """The stored scores of exactly these candidates, else None."""
        path = self._path(qid, ".json")
        stored = read_json(path) if path.is_file() else None
        return stored["scores"] if stored and stored.get("docs") == docs else None

    def claim(self, qid: str) -> bool:
        """True when this process may score ``qid``: no other live process has claimed it."""
        import os

        path = self._path(qid, ".claim")
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                if _alive(path.read_text().strip() if path.is_file() else ""):
                    return False
                path.unlink(missing_ok=True)  # its process is gone: take the query over
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return True
        return False

    def put(self, qid: str, docs: list[str], scores: dict[str, float]) -> None:
        write_json(self._path(qid, ".json"), {"docs": docs, "scores": scores})
        self._path(qid, ".claim").unlink(missing_ok=True)


def _alive(pid: str) -> bool:
    import os

    if not pid.isdigit():
        return True  # a claim being written this instant: its process is alive
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def model_stamp(folder: str | Path, reranker) -> dict:
    """What makes a model's scores its own: its weights' sha256 and how it reads long documents."""
    import hashlib

    files = sorted(p for p in Path(folder).rglob("*.safetensors") if p.is_file())
    digest = hashlib.sha256()
    for p in files:
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
) -> dict[str, dict[str, float]]:
    """{qid: {doc_id: score}} of ``reranker`` over each query's ``first`` candidates; with ``store_root``, kept in a
    ``ScoreStore`` there, so a run started again (or a second process beside it) scores only what is missing."""
    from tqdm.auto import tqdm

    store = ScoreStore(store_root, stamp or {}, label) if store_root else None
    start, pairs = time.perf_counter(), sum(len(v) for v in first.values())

    def score(q: str) -> dict[str, float]:
        return {h.doc_id: float(h.score) for h in reranker._rerank(queries[q], first[q], corpus)}

    scored, waiting = {}, []
    for q in tqdm(queries, desc=f"re-ranking {label} ({pairs} pairs)", mininterval=10):
        docs = [h.doc_id for h in first[q]]
        if store is not None and (kept := store.get(q, docs)) is not None:
            scored[q] = kept
        elif store is not None and not store.claim(q):
            waiting.append(q)  # another process is scoring it
        else:
            scored[q] = score(q)
            if store is not None:
                store.put(q, docs, scored[q])
    if waiting:
        print(f"{label}: waiting for {len(waiting)} queries other processes are scoring", flush=True)
    while waiting:
        q = waiting.pop(0)
        docs = [h.doc_id for h in first[q]]
        if (kept := store.get(q, docs)) is not None:
            scored[q] = kept
        elif store.claim(q):  # its process is gone
            scored[q] = score(q)
            store.put(q, docs, scored[q])
        else:
            waiting.append(q)
            time.sleep(2.0 / len(waiting))
    seconds = time.perf_counter() - start
    print(f"{label}: {pairs} pairs in {seconds:.0f} s ({pairs / max(seconds, 1e-9):.1f} pairs/s)", flush=True)
    return scored
