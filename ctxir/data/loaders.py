"""Loaders for benchmark data (BEIR, STS-B, SICK, SNLI) and for a user's own corpus file.

Every loader raises ``CtxirError`` on bad input, naming the file, the 1-based line, what was
found and what was expected, so the app and CLI can show the message as is.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from ctxir.types import Corpus, CtxirError, Doc, Qrels, Queries

PathLike = str | os.PathLike[str]

NLI_LABELS = ("entailment", "neutral", "contradiction")
USER_CORPUS_SUFFIXES = (".txt", ".jsonl", ".csv", ".tsv")
_SICK_SPLITS = {"train": "TRAIN", "dev": "TRIAL", "trial": "TRIAL", "test": "TEST"}
_SICK_SEMEVAL_FILES = {
    "TRAIN": "SICK_train.txt",
    "TRIAL": "SICK_trial.txt",
    "TEST": "SICK_test_annotated.txt",
}
# Python's default limit (128 KiB per field) is too small for long documents in a CSV corpus.
_CSV_FIELD_LIMIT = 2**31 - 1


@dataclass(frozen=True, slots=True)
class SickPair:
    sentence_a: str
    sentence_b: str
    relatedness: float  # 1-5
    label: str  # one of NLI_LABELS


@dataclass(frozen=True, slots=True)
class NliPair:
    premise: str
    hypothesis: str
    label: str  # one of NLI_LABELS


# ---------------------------------------------------------------- helpers
# The public ones (short_name … json_object) are shared by ctxir.data's other readers (general.py, labelled.py).


def short_name(path: Path) -> str:
    """Short file name for messages: 'scifact/queries.jsonl' reads better than a long absolute path."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def _show(value: object, limit: int = 80) -> str:
    s = value if isinstance(value, str) else repr(value)
    return repr(s[:limit]) + ("..." if len(s) > limit else "")


def bad_line(
    path: Path, line: int, expected: str, got: object, fix: str = "fix or remove that line"
) -> CtxirError:
    """The error for a bad line: the file, the 1-based line, what was expected, what was found, the fix."""
    return CtxirError(f"{short_name(path)} line {line}: expected {expected}, got {_show(got)} — {fix}.")


def existing_file(path: PathLike, what: str) -> Path:
    """``path`` as a Path, checked to be a file; ``what`` (e.g. "a qrels .tsv file") words the error."""
    p = Path(path)
    if p.is_dir():
        raise CtxirError(f"{p} is a folder; expected {what}.")
    if not p.is_file():
        raise CtxirError(f"File not found: {p} (expected {what}).")
    return p


def _folder(path: PathLike, expected: str) -> Path:
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
    """(1-based line number, line) for non-blank lines, CRLF tolerated.

    Splits on '\\n' only: str.splitlines would also split on U+2028 etc., which are legal inside JSON strings.
    """
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


def _loads(line: str):
    """One JSON value: orjson (a 1M-line corpus.jsonl is a fifth of a warm start-up, docs/performance.md), falling
    back to json for what only json reads (NaN, integers past 64 bits, lone surrogates), so every file reads as
    before."""
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


def _id(value: object) -> str | None:
    # JSON ids are sometimes numbers; bool is an int subclass but never a sensible id.
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _add_doc(corpus: Corpus, seen: dict[str, int], path: Path, line_no: int, doc_id: str, doc: Doc) -> None:
    if doc_id in corpus:
        raise CtxirError(
            f"{short_name(path)}: document id {_show(doc_id)} appears twice, on line {seen[doc_id]} and line {line_no}"
            " — ids must be unique; rename or remove one of them."
        )
    seen[doc_id] = line_no
    corpus[doc_id] = doc


def _non_empty(path: Path, corpus: Corpus) -> Corpus:
    if not corpus:
        raise CtxirError(f"{short_name(path)} contains no documents — add at least one document.")
    return corpus


# ---------------------------------------------------------------- BEIR


def load_corpus(path: PathLike) -> Corpus:
    """BEIR corpus.jsonl: one {"_id", "text", "title"?} object per line."""
    p = existing_file(path, "a BEIR corpus.jsonl file")
    expected = 'a JSON object with "_id" and "text"'
    corpus: Corpus = {}
    seen: dict[str, int] = {}
    for line_no, line in nonblank_lines(read_text(p)):
        obj = json_object(p, line_no, line, expected)
        doc_id = _id(obj.get("_id", obj.get("id")))
        text, title = obj.get("text"), obj.get("title") or ""
        if doc_id is None or not isinstance(text, str) or not isinstance(title, str):
            raise bad_line(p, line_no, expected, line)
        _add_doc(corpus, seen, p, line_no, doc_id, {"title": title, "text": text})
    return _non_empty(p, corpus)


def load_queries(path: PathLike) -> Queries:
    """BEIR queries.jsonl: one {"_id", "text"} object per line."""
    p = existing_file(path, "a BEIR queries.jsonl file")
    expected = 'a JSON object with "_id" and "text"'
    queries: Queries = {}
    for line_no, line in nonblank_lines(read_text(p)):
        obj = json_object(p, line_no, line, expected)
        qid, text = _id(obj.get("_id", obj.get("id"))), obj.get("text")
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
    """BEIR qrels TSV (query-id, corpus-id, score), header row optional; TREC 4-column lines also accepted.

    Scores are stored as int because pytrec_eval rejects float relevance grades; score-0 judgments
    are kept (pytrec_eval counts them as non-relevant).
    """
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
    root = _folder(folder, expected)
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


# ---------------------------------------------------------------- sentence pairs


def _split_file(path: PathLike, split: str | None, files: dict[str, str], what: str) -> Path:
    """A file path as is, or folder + split → the split's file."""
    p = Path(path)
    if not p.is_dir():
        if split is not None and p.is_file():
            raise CtxirError(f"split={split!r} is only used with a folder; {p} is a file — drop the split.")
        return existing_file(p, what)
    if split is None or split not in files:
        raise CtxirError(
            f"{p} is a folder: pass split= one of {', '.join(map(repr, files))} to choose a file."
        )
    return existing_file(p / files[split], what)


def load_sts(path: PathLike, split: str | None = None) -> list[tuple[str, str, float]]:
    r"""STS Benchmark CSV → [(sentence1, sentence2, score 0-5)]; ``path`` is a file, or a folder plus split.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> row = ["main-captions", "MSRvid", "2012test", "0001", "4.750", "A man plays a guitar.", "A man plays guitar."]
    >>> _ = (Path(folder.name) / "sts-dev.csv").write_text("\t".join(row) + "\n")
    >>> load_sts(folder.name, split="dev")
    [('A man plays a guitar.', 'A man plays guitar.', 4.75)]
    >>> folder.cleanup()
    """
    files = {s: f"sts-{s}.csv" for s in ("train", "dev", "test")}
    p = _split_file(path, split, files, "an STS Benchmark sts-*.csv file")
    expected = "7+ tab-separated columns: genre, source, year, id, score 0-5, sentence1, sentence2"
    pairs: list[tuple[str, str, float]] = []
    for line_no, row in tsv_rows(read_text(p)):
        try:
            score = float(row[4]) if len(row) >= 7 else -1.0
        except ValueError:
            score = -1.0
        s1, s2 = (row[5].strip(), row[6].strip()) if len(row) >= 7 else ("", "")
        if not 0.0 <= score <= 5.0 or not s1 or not s2:
            raise bad_line(p, line_no, expected, "\t".join(row))
        pairs.append((s1, s2, score))
    if not pairs:
        raise CtxirError(f"{short_name(p)} contains no sentence pairs.")
    return pairs


def load_pairs(path: PathLike) -> list[tuple[str, str]]:
    """A paired-retrieval file → [(query, target)]: query i's one correct target is target i, every other target
    a distractor (e.g. a compression and its original sentence).

    ``.jsonl``: one ``{"query": ..., "target": ...}`` per line; otherwise tab-separated ``query<TAB>target`` lines,
    with an optional ``query<TAB>target`` header.
    """
    p = existing_file(
        path, 'a pairs file: query<TAB>target lines (.tsv) or {"query", "target"} lines (.jsonl)'
    )
    text = read_text(p)
    pairs: list[tuple[str, str]] = []
    if p.suffix.lower() == ".jsonl":
        expected = 'a JSON object with non-empty string "query" and "target"'
        for line_no, line in nonblank_lines(text):
            obj = json_object(p, line_no, line, expected)
            query, target = obj.get("query"), obj.get("target")
            if (
                not isinstance(query, str)
                or not isinstance(target, str)
                or not query.strip()
                or not target.strip()
            ):
                raise bad_line(p, line_no, expected, line)
            pairs.append((query.strip(), target.strip()))
    else:
        expected = "2 tab-separated columns: query, target"
        for line_no, row in tsv_rows(text):
            if not pairs and [f.strip().lower() for f in row] == ["query", "target"]:
                continue
            if len(row) != 2 or not row[0].strip() or not row[1].strip():
                raise bad_line(p, line_no, expected, "\t".join(row))
            pairs.append((row[0].strip(), row[1].strip()))
    if not pairs:
        raise CtxirError(f"{short_name(p)} contains no (query, target) pairs.")
    return pairs


def _nli_label(path: Path, line_no: int, value: str) -> str:
    label = value.strip().lower()
    if label not in NLI_LABELS:
        hint = " ('-' marks pairs without a gold label; drop them)" if label == "-" else ""
        raise CtxirError(
            f"{short_name(path)} line {line_no}: unknown label {_show(value)}, expected one of "
            f"{', '.join(NLI_LABELS)}{hint} — fix or remove that line."
        )
    return label


def _sick_file(path: PathLike, split: str | None) -> tuple[Path, str | None]:
    """(the SICK file to read, the SemEval_set value to keep or None for every row) for ``path`` and ``split``."""
    if split is not None and split.lower() not in _SICK_SPLITS:
        raise CtxirError(
            f"Unknown SICK split {split!r}; expected one of {', '.join(map(repr, _SICK_SPLITS))}."
        )
    wanted = _SICK_SPLITS[split.lower()] if split is not None else None
    p = Path(path)
    if p.is_dir():
        if (p / "SICK.txt").is_file():
            p = p / "SICK.txt"
        elif wanted is not None:
            p = existing_file(p / _SICK_SEMEVAL_FILES[wanted], "a SemEval-2014 SICK file")
            wanted = None  # the file is the split
        else:
            raise CtxirError(
                f"{p} has no SICK.txt: pass split= 'train', 'dev' or 'test' to pick a SemEval-2014 file "
                f"({', '.join(_SICK_SEMEVAL_FILES.values())})."
            )
    p = existing_file(p, "SICK.txt or a SemEval-2014 SICK file")
    return p, wanted


def load_sick(path: PathLike, split: str | None = None) -> list[SickPair]:
    r"""SICK pairs from SICK.txt (12 columns; ``split`` filters column SemEval_set) or a SemEval-2014 file.

    ``split``: "train", "dev" (= TRIAL), "trial" or "test". A folder holding SICK.txt uses that file;
    a folder of SemEval-2014 files picks SICK_train / SICK_trial / SICK_test_annotated.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> lines = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment",
    ...          "4\tA boy is playing.\tA child is playing.\t4.5\tENTAILMENT"]
    >>> _ = (Path(folder.name) / "SICK_trial.txt").write_text("\n".join(lines) + "\n")
    >>> load_sick(folder.name, split="dev")
    [SickPair(sentence_a='A boy is playing.', sentence_b='A child is playing.', relatedness=4.5, label='entailment')]
    >>> folder.cleanup()
    """
    p, wanted = _sick_file(path, split)
    rows = tsv_rows(read_text(p))
    header_line, header = next(rows, (1, []))
    cols = {name.strip(): i for i, name in enumerate(header)}
    label_col = "entailment_label" if "entailment_label" in cols else "entailment_judgment"
    needed = ["sentence_A", "sentence_B", "relatedness_score", label_col]
    if wanted is not None:
        needed.append("SemEval_set")
    absent = [c for c in needed if c not in cols]
    if absent:
        raise CtxirError(
            f"{short_name(p)} line {header_line}: header lacks column(s) {', '.join(absent)}; got {_show(chr(9).join(header))}"
            " — expected SICK.txt (with SemEval_set for split=) or a SemEval-2014 SICK file with its header row."
        )
    ia, ib, ir, il = (cols[c] for c in needed[:4])
    iset = cols.get("SemEval_set")
    width = max(cols[c] for c in needed) + 1
    expected = f"{len(header)} tab-separated columns as in the header, relatedness 1-5"
    pairs: list[SickPair] = []
    for line_no, row in rows:
        if len(row) < width:
            raise bad_line(p, line_no, expected, "\t".join(row))
        if wanted is not None and iset is not None and row[iset].strip().upper() != wanted:
            continue
        try:
            relatedness = float(row[ir])
        except ValueError:
            raise bad_line(p, line_no, expected, "\t".join(row)) from None
        label = _nli_label(p, line_no, row[il])
        pairs.append(SickPair(row[ia].strip(), row[ib].strip(), relatedness, label))
    if not pairs:
        raise CtxirError(
            f"{short_name(p)} contains no sentence pairs" + (f" for split {split!r}." if split else ".")
        )
    return pairs


def load_snli(folder: PathLike, split: str) -> list[NliPair]:
    r"""SNLI in SentEval layout: s1.{split}, s2.{split}, labels.{split}, line i of each forming one pair.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> for name, line in [("s1", "A dog runs."), ("s2", "An animal moves."), ("labels", "entailment")]:
    ...     _ = (Path(folder.name) / f"{name}.dev").write_text(line + "\n")
    >>> load_snli(folder.name, "dev")
    [NliPair(premise='A dog runs.', hypothesis='An animal moves.', label='entailment')]
    >>> folder.cleanup()
    """
    names = [f"s1.{split}", f"s2.{split}", f"labels.{split}"]
    root = _folder(folder, ", ".join(names))
    if not all((root / n).is_file() for n in names):
        splits = sorted(f.suffix[1:] for f in root.glob("labels.*"))
        have = f"available splits: {', '.join(splits)}" if splits else "no labels.* files found"
        raise CtxirError(f"{root} lacks {' / '.join(n for n in names if not (root / n).is_file())} ({have}).")
    paths = [root / n for n in names]
    # Trailing "" from the final newline is not a line; blank lines inside stay, so line numbers match the files.
    columns = []
    for p in paths:
        lines = read_text(p).split("\n")
        if lines and not lines[-1]:
            lines.pop()
        columns.append([line.rstrip("\r") for line in lines])
    counts = [len(c) for c in columns]
    if len(set(counts)) > 1:
        detail = ", ".join(f"{n} has {c}" for n, c in zip(names, counts, strict=True))
        raise CtxirError(f"{root}: the three files must have one line per pair, but {detail} lines.")
    pairs: list[NliPair] = []
    for i, (s1, s2, label) in enumerate(zip(*columns, strict=True), 1):
        for p, s in ((paths[0], s1), (paths[1], s2)):
            if not s.strip():
                raise bad_line(p, i, "a sentence", s)
        pairs.append(NliPair(s1.strip(), s2.strip(), _nli_label(paths[2], i, label)))
    if not pairs:
        raise CtxirError(f"{root}: {names[0]} contains no sentence pairs.")
    return pairs


# ---------------------------------------------------------------- user corpora


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
        doc_id = str(line_no) if raw_id is None else _id(raw_id)
        body, title = obj.get("text"), obj.get("title") or ""
        if doc_id is None or not isinstance(body, str) or not isinstance(title, str):
            raise bad_line(p, line_no, expected, line)
        _check_text(p, line_no, title, body, line)
        _add_doc(corpus, seen, p, line_no, doc_id, {"title": title.strip(), "text": body.strip()})
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
                f"(optional 'id' or '_id', 'title'), got {_show(delimiter.join(header))} — add that header row."
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
            _add_doc(corpus, seen, p, line_no, doc_id, {"title": title.strip(), "text": body.strip()})
        return corpus
    except csv.Error as e:
        raise CtxirError(
            f"{short_name(p)} line {reader.line_num}: cannot parse {sep}-separated row ({e}) — fix that line's quoting."
        ) from None


def load_user_corpus(path: PathLike) -> Corpus:
    """A user's corpus file: .txt (one doc per non-empty line), .jsonl, or .csv/.tsv with a header row.

    Ids default to the 1-based line number where the document starts, so a user can find it in the file. Messages
    name the file by its own name only: an uploaded file sits in a folder named by a hash, which means nothing to
    the person who uploaded it.
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
    return _non_empty(p, corpus)


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
