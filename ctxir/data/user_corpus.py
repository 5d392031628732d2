"""A user's own corpus file (.txt, .jsonl, .csv, .tsv) or a BEIR folder: ``load_user_corpus``, ``load_corpus_any``."""

from __future__ import annotations

from pathlib import Path

from ctxir.data.beir import (
    PathLike,
    add_doc,
    bad_line,
    check_doc_text,
    existing_file,
    jsonl_corpus,
    load_corpus,
    non_empty,
    nonblank_lines,
    read_text,
    short_name,
    table_rows,
)
from ctxir.types import Corpus, CtxirError

USER_CORPUS_SUFFIXES = (".txt", ".jsonl", ".csv", ".tsv")


def _user_table(p: Path, text: str, delimiter: str) -> Corpus:
    hint = "expected a header row with a 'text' column (optional 'id' or '_id', 'title')"
    corpus: Corpus = {}
    seen: dict[str, int] = {}
    for line_no, row in table_rows(p, text, delimiter, ["text"], hint):
        body, title = row["text"], row.get("title", "")
        id_column = next((c for c in ("_id", "id") if c in row), None)
        doc_id = row[id_column].strip() if id_column else str(line_no)
        if not doc_id:
            raise bad_line(p, line_no, "a non-empty id", delimiter.join(row.values()))
        check_doc_text(p, line_no, title, body, delimiter.join(row.values()))
        add_doc(corpus, seen, p, line_no, doc_id, {"title": title.strip(), "text": body.strip()})
    return corpus


def load_user_corpus(path: PathLike) -> Corpus:
    """A .txt (a document a line), .jsonl or .csv/.tsv corpus; messages name the file only (uploads sit in hash folders)."""
    p = existing_file(path, f"a corpus file ({', '.join(USER_CORPUS_SUFFIXES)})")
    suffix = p.suffix.lower()
    try:
        if suffix not in USER_CORPUS_SUFFIXES:
            raise CtxirError(
                f"{short_name(p)}: unsupported file type {suffix or '(none)'!r}; use one of {', '.join(USER_CORPUS_SUFFIXES)}"
                ' (.txt = one document per line; .jsonl = {"id", "title", "text"} per line; .csv/.tsv with a \'text\' column).'
            )
        text = read_text(p)
        if suffix == ".txt":
            corpus = {str(n): {"title": "", "text": line.strip()} for n, line in nonblank_lines(text)}
        elif suffix == ".jsonl":
            corpus = jsonl_corpus(p, text, user=True)
        else:
            corpus = _user_table(p, text, "," if suffix == ".csv" else "\t")
        return non_empty(p, corpus)
    except CtxirError as err:
        raise CtxirError(str(err).replace(short_name(p), p.name)) from None


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
