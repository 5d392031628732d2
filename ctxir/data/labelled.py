"""Labelled texts for classification: ``Label`` and the readers of (text, label) files, label files and folders."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ctxir.data.beir import (
    bad_line,
    existing_file,
    json_object,
    nonblank_lines,
    read_text,
    short_name,
    table_rows,
)
from ctxir.types import CtxirError


@dataclass(frozen=True)
class Label:
    """A class: its name (what predictions return) and an optional description for zero-shot prompts.

    >>> Label("Sports", "games, teams and players").prompt("This text is about {label}.")
    'This text is about Sports.'
    """

    name: str
    description: str = ""

    def prompt(self, template: str) -> str:
        """The label written into ``template`` ({label}, {description}; no description → the name)."""
        return template.replace("{label}", self.name).replace("{description}", self.description or self.name)


def _rows(
    path: Path, text: str, columns: Sequence[str], optional: Sequence[str] = ()
) -> list[tuple[int, dict]]:
    """(line number, {column: value}) of a CSV/TSV (header row naming the columns) or JSONL file."""
    suffix = path.suffix.lower()
    rows = []
    if suffix in (".jsonl", ".json"):
        expected = "a JSON object with " + ", ".join(f'"{c}"' for c in columns)
        for line_no, line in nonblank_lines(text):
            obj = json_object(path, line_no, line, expected)
            for column in columns:
                if column not in obj:
                    raise bad_line(path, line_no, expected, line, f'add the "{column}" field')
            rows.append((line_no, {c: obj.get(c) for c in (*columns, *optional) if c in obj}))
        return rows
    if suffix not in (".csv", ".tsv"):
        raise CtxirError(
            f"{short_name(path)}: unsupported file type {path.suffix!r}; use .csv or .tsv (header row "
            f"{','.join(columns)}) or .jsonl (one JSON object per line)"
        )
    names = ", ".join(map(repr, columns))
    hint = f"the header row must name the columns {names} (e.g. a first line {','.join(columns)!r})"
    delimiter = "\t" if suffix == ".tsv" else ","
    return [
        (line_no, {c: row[c] for c in (*columns, *optional) if c in row})
        for line_no, row in table_rows(path, text, delimiter, columns, hint)
    ]


def _field(path: Path, line_no: int, value, column: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise bad_line(path, line_no, f"{column!r} as text", value)
    value = str(value).strip()
    if not value:
        raise bad_line(
            path, line_no, f"a non-empty {column!r}", value, f"give the row a {column} or remove it"
        )
    return value


def load_labelled(path) -> list[tuple[str, str]]:
    """(text, label) rows of a CSV/TSV with a ``text,label`` header, or a JSONL file of {"text", "label"} objects;
    a bad row raises CtxirError naming the file and line.

    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(os.path.join(folder, "train.csv"), "w").write('text,label\\n"Otters, rivers",nature\\n,world\\n')
    >>> load_labelled(os.path.join(folder, "train.csv"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: ... line 3: expected a non-empty 'text', got '' — give the row a text or remove it.
    """
    p = existing_file(path, "a labelled file (.csv/.tsv with a text,label header, or .jsonl)")
    text = read_text(p)
    rows = [
        (_field(p, n, row["text"], "text"), _field(p, n, row["label"], "label"))
        for n, row in _rows(p, text, ("text", "label"))
    ]
    if not rows:
        raise CtxirError(
            f"{short_name(p)} holds no labelled rows — add lines of text,label after the header."
        )
    return rows


def load_labels(path) -> list[Label]:
    """Labels for zero-shot: .txt (a name per line), or CSV/TSV/JSONL with ``label`` and optional ``description``."""
    p = existing_file(
        path, "a labels file (.txt one per line, .csv/.tsv with label[,description], or .jsonl)"
    )
    text = read_text(p)
    if p.suffix.lower() == ".txt":
        labels = [Label(line.strip()) for line in text.splitlines() if line.strip()]
    else:
        labels = [
            Label(_field(p, n, row["label"], "label"), str(row.get("description") or "").strip())
            for n, row in _rows(p, text, ("label",), ("description",))
        ]
    names = [label.name for label in labels]
    repeated = sorted(n for n, c in Counter(names).items() if c > 1)
    if repeated:
        raise CtxirError(
            f"{short_name(p)} names label {repeated[0]!r} more than once — keep one line per label."
        )
    if len(labels) < 2:
        raise CtxirError(f"{short_name(p)} names {len(labels)} label(s); classification needs at least 2.")
    return labels


def load_folder(folder) -> tuple[Path, Path]:
    """(train file, test file) of a folder holding ``train*.csv``/``.jsonl`` and ``test.csv``/``.jsonl``."""
    root = Path(folder)
    if not root.is_dir():
        raise CtxirError(
            f"--data {str(folder)!r} is not a folder: pass a folder holding train*.csv and test.csv "
            "(e.g. ../shared/data/agnews)"
        )
    tests = [root / f"test{s}" for s in (".csv", ".jsonl", ".tsv") if (root / f"test{s}").is_file()]
    trains = sorted(p for s in ("csv", "jsonl", "tsv") for p in root.glob(f"train*.{s}"))
    if not tests or not trains:
        have = ", ".join(sorted(p.name for p in root.iterdir())) or "nothing"
        raise CtxirError(f"--data {str(folder)!r} needs train*.csv and test.csv (or .jsonl); it has {have}")
    if len(trains) > 1:
        raise CtxirError(
            f"--data {str(folder)!r} has several train files ({', '.join(p.name for p in trains)}): "
            "pass one with --train"
        )
    return trains[0], tests[0]
