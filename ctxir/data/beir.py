"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` (TREC qrels too)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ctxir.data.reading import (
    PathLike,
    add_doc,
    bad_line,
    check_doc_text,
    existing_file,
    existing_folder,
    json_id,
    json_object,
    non_empty,
    nonblank_lines,
    read_text,
    short_name,
)
from ctxir.types import Corpus, CtxirError, Qrels, Queries


def load_corpus(path: PathLike) -> Corpus:
    """BEIR corpus.jsonl: one {"_id", "text", "title"?} object per line."""
    p = existing_file(path, "a BEIR corpus.jsonl file")
    return non_empty(p, jsonl_corpus(p, read_text(p)))


def jsonl_corpus(p: Path, text: str, user: bool = False) -> Corpus:
    """The documents of JSON lines {"_id" or "id", "text", "title"?}; a ``user`` corpus's ids default to the line
    number, its texts are stripped and must not be empty."""
    expected = 'a JSON object with "text" (and optional "id"/"_id", "title")' if user else ""
    expected = expected or 'a JSON object with "_id" and "text"'
    corpus: Corpus = {}
    seen: dict[str, int] = {}
    for line_no, line in nonblank_lines(text):
        obj = json_object(p, line_no, line, expected)
        raw_id = obj.get("_id", obj.get("id"))
        doc_id = str(line_no) if user and raw_id is None else json_id(raw_id)
        body, title = obj.get("text"), obj.get("title") or ""
        if doc_id is None or not isinstance(body, str) or not isinstance(title, str):
            raise bad_line(p, line_no, expected, line)
        if user:
            check_doc_text(p, line_no, title, body, line)
            title, body = title.strip(), body.strip()
        add_doc(corpus, seen, p, line_no, doc_id, {"title": title, "text": body})
    return corpus


def load_queries(path: PathLike) -> Queries:
    """BEIR queries.jsonl: one {"_id", "text"} object per line."""
    p = existing_file(path, "a BEIR queries.jsonl file")
    expected = 'a JSON object with "_id" and "text"'
    queries: Queries = {}
    for line_no, line in nonblank_lines(read_text(p)):
        obj = json_object(p, line_no, line, expected)
        qid, text = json_id(obj.get("_id", obj.get("id"))), obj.get("text")
        if qid is None or not isinstance(text, str):
            raise bad_line(p, line_no, expected, line)
        queries[qid] = text
    if not queries:
        raise CtxirError(f"{short_name(p)} contains no queries — add at least one query.")
    return queries


def _int_score(field: str) -> int | None:
    try:
        value = float(field)
    except ValueError:
        return None
    return int(value) if value.is_integer() else None


def load_qrels(path: PathLike) -> Qrels:
    """BEIR qrels TSV (query-id, corpus-id, integer score; header optional) or TREC qrels; score 0 is kept."""
    p = existing_file(path, "a qrels .tsv file")
    expected = "query-id<TAB>corpus-id<TAB>integer score"
    qrels: Qrels = {}
    first = True
    for line_no, line in nonblank_lines(read_text(p)):
        # TREC qrels ("qid 0 docid rel") are space-separated; BEIR's are tab-separated.
        fields = [f.strip() for f in (line.split("\t") if "\t" in line else line.split())]
        if len(fields) == 4:
            fields = [fields[0], fields[2], fields[3]]
        score = _int_score(fields[-1]) if len(fields) == 3 else None
        if score is None and first and len(fields) == 3:
            first = False  # a header row such as "query-id corpus-id score"
            continue
        first = False
        if score is None or not fields[0] or not fields[1]:
            raise bad_line(p, line_no, expected, line)
        qrels.setdefault(fields[0], {})[fields[1]] = score
    if not qrels:
        raise CtxirError(f"{short_name(p)} contains no judgments — expected lines of {expected}.")
    return qrels


def load_beir(folder: PathLike, split: str = "test") -> tuple[Corpus, Queries, Qrels]:
    r"""A BEIR folder → (corpus, queries judged in ``split``, qrels of ``split``).

    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = tempfile.TemporaryDirectory()
    >>> root = Path(folder.name)
    >>> _ = (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "Otters", "text": "Otters swim."}\n')
    >>> _ = (root / "queries.jsonl").write_text('{"_id": "q1", "text": "otters"}\n{"_id": "q2", "text": "bats"}\n')
    >>> (root / "qrels").mkdir()
    >>> _ = (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    >>> load_beir(root, "test")  # q2 has no judgments in this split, so it is left out
    ({'d1': {'title': 'Otters', 'text': 'Otters swim.'}}, {'q1': 'otters'}, {'q1': {'d1': 1}})
    >>> folder.cleanup()
    """
    expected = "corpus.jsonl, queries.jsonl and qrels/<split>.tsv"
    root = existing_folder(folder, expected)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (root / name).is_file():
            raise CtxirError(f"{root} has no {name}; a BEIR folder needs {expected}.")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        splits = sorted(f.stem for f in (root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
        have = f"available splits: {', '.join(splits)}" if splits else "no qrels/*.tsv files found"
        raise CtxirError(f"{root} has no qrels/{split}.tsv for split {split!r} ({have}).")
    qrels = load_qrels(qrels_path)
    all_queries = load_queries(root / "queries.jsonl")
    missing = [qid for qid in qrels if qid not in all_queries]
    if missing:
        raise CtxirError(
            f"{short_name(qrels_path)} judges {len(missing)} query id(s) not in queries.jsonl, e.g. "
            f"{', '.join(map(repr, missing[:5]))} — check that the qrels belong to this dataset."
        )
    # As BEIR's GenericDataLoader: evaluation only sees queries that have judgments in this split.
    queries = {qid: all_queries[qid] for qid in qrels}
    return load_corpus(root / "corpus.jsonl"), queries, qrels


def write_beir(
    folder: PathLike,
    corpus: Corpus | Iterable[tuple[str, dict]],
    queries: Queries,
    qrels: Qrels,
    split: str = "test",
) -> Path:
    """Write a BEIR folder: ``corpus`` (a dict, or (id, {title, text}) pairs streamed), ``queries`` and ``qrels`` as
    ``qrels/<split>.tsv``, each file atomically, the qrels last (a folder with its qrels file is complete).
    """
    import json

    from ctxir.files import atomic_path, write_atomic

    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    rows = corpus.items() if isinstance(corpus, dict) else corpus
    with atomic_path(root / "corpus.jsonl") as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for doc_id, doc in rows:
            handle.write(
                json.dumps({"_id": doc_id, "title": doc.get("title", ""), "text": doc["text"]}) + "\n"
            )
    write_atomic(
        root / "queries.jsonl", "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    )
    judged = "".join(f"{q}\t{d}\t{s}\n" for q, docs in qrels.items() for d, s in docs.items())
    write_atomic(root / "qrels" / f"{split}.tsv", "query-id\tcorpus-id\tscore\n" + judged)
    return root
