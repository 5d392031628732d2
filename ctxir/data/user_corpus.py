"""A user's own corpus file (.txt, .jsonl, .csv, .tsv) or a BEIR folder: ``load_user_corpus``, ``load_corpus_any``."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ctxir.data.beir import load_corpus
from ctxir.data.reading import (
    PathLike,
    add_doc,
    bad_line,
    existing_file,
    json_id,
    json_object,
    non_empty,
    nonblank_lines,
    read_text,
    short_name,
    show,
)
from ctxir.types import Corpus, CtxirError

USER_CORPUS_SUFFIXES = (".txt", ".jsonl", ".csv", ".tsv")
# Python's default limit (128 KiB per field) is too small for long documents in a CSV corpus.
_CSV_FIELD_LIMIT = 2**31 - 1


def _user_txt(text: str) -> Corpus:
    corpus: Corpus = {}
    for line_no, line in nonblank_lines(text):
        corpus[str(line_no)] = {"title": "", "text": line.strip()}
    return corpus


def _user_jsonl(p: Path, text: str) -> Corpus:
    expected = 'a JSON object with "text" (and optional "id"/"_id", "title")'
    corpus: Corpus = {}
    seen: dict[str, int] = {}
    for line_no, line in nonblank_lines(text):
        obj = json_object(p, line_no, line, expected)
        raw_id = obj.get("_id", obj.get("id"))
        doc_id = str(line_no) if raw_id is None else json_id(raw_id)
        body, title = obj.get("text"), obj.get("title") or ""
        if doc_id is None or not isinstance(body, str) or not isinstance(title, str):
            raise bad_line(p, line_no, expected, line)
        _check_text(p, line_no, title, body, line)
        add_doc(corpus, seen, p, line_no, doc_id, {"title": title.strip(), "text": body.strip()})
    return corpus


def _check_text(p: Path, line_no: int, title: str, body: str, line: str) -> None:
    # Title-only documents are allowed; a document with nothing to read is not.
    if not body.strip() and not title.strip():
        raise bad_line(p, line_no, "a document with non-empty text", line, "add text or remove that line")


def _user_table(p: Path, text: str, delimiter: str) -> Corpus:
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    sep = "tab" if delimiter == "\t" else "comma"
    try:
        # The header is the first non-blank row.
        header = next((row for row in reader if any(f.strip() for f in row)), None)
        if header is None:
            return {}
        cols = {h.strip().lower(): i for i, h in enumerate(header)}
        if "text" not in cols:
            raise CtxirError(
                f"{short_name(p)} line {reader.line_num}: expected a header row with a 'text' column "
                f"(optional 'id' or '_id', 'title'), got {show(delimiter.join(header))} — add that header row."
            )
        i_text, i_title = cols["text"], cols.get("title")
        i_id = cols.get("_id", cols.get("id"))
        corpus: Corpus = {}
        seen: dict[str, int] = {}
        start = reader.line_num + 1
        for row in reader:
            line_no, start = (
                start,
                reader.line_num + 1,
            )  # a quoted field may span lines; report where the row begins
            if not any(f.strip() for f in row):
                continue
            if len(row) != len(header):
                raise bad_line(
                    p,
                    line_no,
                    f"{len(header)} {sep}-separated fields as in the header, found {len(row)}",
                    delimiter.join(row),
                    "quote fields that contain the separator, or fix that line",
                )
            body = row[i_text]
            title = row[i_title] if i_title is not None else ""
            doc_id = row[i_id].strip() if i_id is not None else str(line_no)
            if not doc_id:
                raise bad_line(p, line_no, "a non-empty id", delimiter.join(row))
            _check_text(p, line_no, title, body, delimiter.join(row))
            add_doc(corpus, seen, p, line_no, doc_id, {"title": title.strip(), "text": body.strip()})
        return corpus
    except csv.Error as e:
        raise CtxirError(
            f"{short_name(p)} line {reader.line_num}: cannot parse {sep}-separated row ({e}) — fix that line's quoting."
        ) from None


def load_user_corpus(path: PathLike) -> Corpus:
    """A user's corpus file: .txt (one doc per non-empty line), .jsonl, or .csv/.tsv with a header row.

    Ids default to the 1-based line where the document starts. Messages name the file only (uploads sit in hash folders).
    """
    p = existing_file(path, f"a corpus file ({', '.join(USER_CORPUS_SUFFIXES)})")
    try:
        return _load_user_corpus(p)
    except CtxirError as err:
        raise CtxirError(str(err).replace(short_name(p), p.name)) from None


def _load_user_corpus(p: Path) -> Corpus:
    suffix = p.suffix.lower()
    if suffix not in USER_CORPUS_SUFFIXES:
        raise CtxirError(
            f"{short_name(p)}: unsupported file type {suffix or '(none)'!r}; use one of {', '.join(USER_CORPUS_SUFFIXES)}"
            ' (.txt = one document per line; .jsonl = {"id", "title", "text"} per line; .csv/.tsv with a \'text\' column).'
        )
    text = read_text(p)
    if suffix == ".txt":
        corpus = _user_txt(text)
    elif suffix == ".jsonl":
        corpus = _user_jsonl(p, text)
    else:
        corpus = _user_table(p, text, "," if suffix == ".csv" else "\t")
    return non_empty(p, corpus)


def load_corpus_any(path: PathLike) -> Corpus:
    r"""A BEIR folder (with corpus.jsonl) or a single corpus file, as the app and CLI accept.

    A .txt file holds one document per non-empty line; its id is the line number:

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> _ = (Path(folder.name) / "notes.txt").write_text("Otters swim.\n\nBanks lend money.\n")
    >>> load_corpus_any(Path(folder.name) / "notes.txt")
    {'1': {'title': '', 'text': 'Otters swim.'}, '3': {'title': '', 'text': 'Banks lend money.'}}
    >>> folder.cleanup()
    """
    p = Path(path)
    if p.is_dir():
        if not (p / "corpus.jsonl").is_file():
            raise CtxirError(
                f"{p} is a folder without corpus.jsonl; pass a BEIR folder or a corpus file "
                f"({', '.join(USER_CORPUS_SUFFIXES)})."
            )
        return load_corpus(p / "corpus.jsonl")
    return load_user_corpus(p)
