"""BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv`` or TREC qrels), and the helpers every
``ctxir.data`` reader shares: an error names the file, the line, what was found and what was expected."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson

from ctxir.files import write_atomic
from ctxir.types import Corpus, CtxirError, Doc, Qrels, Queries

PathLike = str | os.PathLike[str]


def short_name(path: Path) -> str:
    """Short file name for messages: 'scifact/queries.jsonl' reads better than a long absolute path."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def show(value: object, limit: int = 80) -> str:
    s = value if isinstance(value, str) else repr(value)
    return repr(s[:limit]) + ("..." if len(s) > limit else "")


def bad_line(
    path: Path, line: int, expected: str, got: object, fix: str = "fix or remove that line"
) -> CtxirError:
    """The error for a bad line: the file, the 1-based line, what was expected, what was found, the fix."""
    return CtxirError(f"{short_name(path)} line {line}: expected {expected}, got {show(got)} — {fix}.")


def existing_file(path: PathLike, what: str) -> Path:
    """``path`` as a Path, checked to be a file; ``what`` (e.g. "a qrels .tsv file") words the error."""
    p = Path(path)
    if p.is_dir():
        raise CtxirError(f"{p} is a folder; expected {what}.")
    if not p.is_file():
        raise CtxirError(f"File not found: {p} (expected {what}).")
    return p


def existing_folder(path: PathLike, expected: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        hint = "it is a file, not a folder" if p.exists() else "no such folder"
        raise CtxirError(f"Folder not found: {p} ({hint}); expected a folder with {expected}.")
    return p


def read_text(path: Path) -> str:
    """The whole file as text; a clear error instead of UnicodeDecodeError for non-UTF-8 files."""
    data = path.read_bytes()
    try:
        # utf-8-sig: files saved by Windows tools often start with a BOM, which would spoil line 1.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        bad = data[e.start : e.end].hex(" ")
        raise CtxirError(
            f"{short_name(path)} is not UTF-8: byte(s) {bad} at line {line} (byte offset {e.start}) cannot be decoded. "
            "Re-save the file with UTF-8 encoding (e.g. in your editor: Save As → Encoding: UTF-8) and load it again."
        ) from None


def nonblank_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for non-blank lines, CRLF tolerated; '\\n' only (JSON strings may hold U+2028)."""
    for i, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if line.strip():
            yield i, line


def tsv_rows(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) for non-blank tab-separated lines; quotes are literal text (QUOTE_NONE)."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    for row in reader:
        if any(f.strip() for f in row):
            yield reader.line_num, row


def table_rows(
    path: Path, text: str, delimiter: str, columns: Sequence[str], header_hint: str
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line the row begins on, {lower-cased header name: field}) of a CSV/TSV whose header names ``columns``."""
    csv.field_size_limit(2**31 - 1)  # Python's default (128 KiB a field) is too small for long documents
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    sep = "tab" if delimiter == "\t" else "comma"
    header, start = None, 1
    try:
        for row in reader:
            line_no, start = start, reader.line_num + 1  # a quoted field may span lines
            if not any(f.strip() for f in row):
                continue
            if header is None:
                header = [h.strip().lower() for h in row]
                if any(c not in header for c in columns):
                    raise CtxirError(
                        f"{short_name(path)} line {line_no}: {header_hint}, got {show(delimiter.join(row))} — add "
                        "that header row."
                    )
            elif len(row) != len(header):
                raise bad_line(
                    path,
                    line_no,
                    f"{len(header)} fields ({sep}-separated, as in the header), found {len(row)}",
                    delimiter.join(row),
                    "quote fields that contain the separator, or fix that line",
                )
            else:
                yield line_no, dict(zip(header, row, strict=True))
    except csv.Error as e:
        raise CtxirError(
            f"{short_name(path)} line {reader.line_num}: cannot parse {sep}-separated row ({e}) — fix that line's quoting."
        ) from None


def json_object(path: Path, line_no: int, line: str, expected: str) -> dict:
    """One JSONL line parsed (orjson, else json for NaN, big integers, lone surrogates), checked to be an object."""
    try:
        try:
            obj = orjson.loads(line)
        except ValueError:  # orjson.JSONDecodeError is a ValueError
            obj = json.loads(line)
    except json.JSONDecodeError:
        raise bad_line(path, line_no, expected, line) from None
    if not isinstance(obj, dict):
        raise bad_line(path, line_no, expected, line)
    return obj


def json_id(value: object) -> str | None:
    """A JSON id as text: a non-blank string or an integer (never a bool)."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def add_doc(corpus: Corpus, seen: dict[str, int], path: Path, line_no: int, doc_id: str, doc: Doc) -> None:
    if doc_id in corpus:
        raise CtxirError(
            f"{short_name(path)}: document id {show(doc_id)} appears twice, on line {seen[doc_id]} and line {line_no}"
            " — ids must be unique; rename or remove one of them."
        )
    seen[doc_id] = line_no
    corpus[doc_id] = doc


def check_doc_text(path: Path, line_no: int, title: str, body: str, line: str) -> None:
    if not body.strip() and not title.strip():  # a title-only document is allowed
        raise bad_line(path, line_no, "a document with non-empty text", line, "add text or remove that line")


def non_empty(path: Path, corpus: Corpus) -> Corpus:
    if not corpus:
        raise CtxirError(f"{short_name(path)} contains no documents — add at least one document.")
    return corpus


def load_corpus(path: PathLike) -> Corpus:
    """BEIR corpus.jsonl: one {"_id", "text", "title"?} object per line."""
    p = existing_file(path, "a BEIR corpus.jsonl file")
    return non_empty(p, jsonl_corpus(p, read_text(p)))


def jsonl_corpus(p: Path, text: str, user: bool = False) -> Corpus:
    """JSON lines {"_id" or "id", "text", "title"?}; a ``user`` corpus's ids default to the line, texts are checked."""
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
        try:
            score = float(fields[-1]) if len(fields) == 3 else None
        except ValueError:
            score = None
        score = int(score) if score is not None and score.is_integer() else None
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


def write_beir(folder: PathLike, corpus: Corpus, queries: Queries, qrels: Qrels, split: str = "test") -> Path:
    """Write a BEIR folder, each file atomically, ``qrels/<split>.tsv`` last (a folder with its qrels is complete)."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    docs = (
        json.dumps({"_id": d, "title": doc.get("title", ""), "text": doc["text"]})
        for d, doc in corpus.items()
    )
    write_atomic(root / "corpus.jsonl", "".join(line + "\n" for line in docs))
    write_atomic(
        root / "queries.jsonl", "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    )
    judged = "".join(f"{q}\t{d}\t{s}\n" for q, docs in qrels.items() for d, s in docs.items())
    write_atomic(root / "qrels" / f"{split}.tsv", "query-id\tcorpus-id\tscore\n" + judged)
    return root
