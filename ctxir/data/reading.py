"""The helpers every ``ctxir.data`` reader shares: checked paths, UTF-8 text, numbered lines, JSON lines, tables;
an error names the file, the line, what was found and what was expected."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson

from ctxir.types import Corpus, CtxirError, Doc

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
    """(line the row begins on, {lower-cased header name: field}) of a CSV/TSV whose first non-blank row, its header,
    names ``columns``; ``header_hint`` says what the header should be."""
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


def _loads(line: str):
    """One JSON value: orjson (fast), else json for what only it reads (NaN, integers past 64 bits, lone surrogates)."""
    try:
        return orjson.loads(line)
    except ValueError:  # orjson.JSONDecodeError is a ValueError
        return json.loads(line)


def json_object(path: Path, line_no: int, line: str, expected: str) -> dict:
    """One JSONL line parsed, checked to be an object; else ``bad_line`` naming ``expected``."""
    try:
        obj = _loads(line)
    except json.JSONDecodeError:
        raise bad_line(path, line_no, expected, line) from None
    if not isinstance(obj, dict):
        raise bad_line(path, line_no, expected, line)
    return obj


def json_id(value: object) -> str | None:
    # JSON ids are sometimes numbers; bool is an int subclass but never a sensible id.
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
    """A title-only document is allowed; one with nothing to read is not."""
    if not body.strip() and not title.strip():
        raise bad_line(path, line_no, "a document with non-empty text", line, "add text or remove that line")


def non_empty(path: Path, corpus: Corpus) -> Corpus:
    if not corpus:
        raise CtxirError(f"{short_name(path)} contains no documents — add at least one document.")
    return corpus
