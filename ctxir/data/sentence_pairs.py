"""Sentence-pair sets: STS Benchmark, paired-retrieval files, SICK and SNLI (``SickPair``, ``NliPair``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctxir.data.beir import (
    PathLike,
    bad_line,
    existing_file,
    existing_folder,
    json_object,
    nonblank_lines,
    read_text,
    short_name,
    show,
    tsv_rows,
)
from ctxir.types import CtxirError

NLI_LABELS = ("entailment", "neutral", "contradiction")
_SICK_SPLITS = {"train": "TRAIN", "dev": "TRIAL", "trial": "TRIAL", "test": "TEST"}


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
    files, p = {s: f"sts-{s}.csv" for s in ("train", "dev", "test")}, Path(path)
    if p.is_dir() and split not in files:
        raise CtxirError(
            f"{p} is a folder: pass split= one of {', '.join(map(repr, files))} to choose a file."
        )
    if split is not None and p.is_file():
        raise CtxirError(f"split={split!r} is only used with a folder; {p} is a file — drop the split.")
    p = existing_file(p / files[split] if p.is_dir() else p, "an STS Benchmark sts-*.csv file")
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
    """A paired-retrieval file → [(query, target)]: ``{"query", "target"}`` JSON lines, else ``query<TAB>target``."""
    p = existing_file(
        path, 'a pairs file: query<TAB>target lines (.tsv) or {"query", "target"} lines (.jsonl)'
    )
    text = read_text(p)
    pairs: list[tuple[str, str]] = []
    if p.suffix.lower() == ".jsonl":
        expected = 'a JSON object with non-empty string "query" and "target"'
        for line_no, line in nonblank_lines(text):
            obj = json_object(p, line_no, line, expected)
            pair = obj.get("query"), obj.get("target")
            if not all(isinstance(t, str) and t.strip() for t in pair):
                raise bad_line(p, line_no, expected, line)
            pairs.append((pair[0].strip(), pair[1].strip()))
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
            f"{short_name(path)} line {line_no}: unknown label {show(value)}, expected one of "
            f"{', '.join(NLI_LABELS)}{hint} — fix or remove that line."
        )
    return label


def load_sick(path: PathLike, split: str | None = None) -> list[SickPair]:
    r"""SICK pairs from SICK.txt (or its folder); ``split`` "train", "dev" = "trial" or "test" filters its SemEval_set.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> lines = ["pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tSemEval_set",
    ...          "4\tA boy is playing.\tA child is playing.\tENTAILMENT\t4.5\tTRIAL"]
    >>> _ = (Path(folder.name) / "SICK.txt").write_text("\n".join(lines) + "\n")
    >>> load_sick(folder.name, split="dev")
    [SickPair(sentence_a='A boy is playing.', sentence_b='A child is playing.', relatedness=4.5, label='entailment')]
    >>> folder.cleanup()
    """
    if split is not None and split.lower() not in _SICK_SPLITS:
        raise CtxirError(
            f"Unknown SICK split {split!r}; expected one of {', '.join(map(repr, _SICK_SPLITS))}."
        )
    p = Path(path) / "SICK.txt" if Path(path).is_dir() else Path(path)
    p = existing_file(p, "SICK.txt")
    rows = tsv_rows(read_text(p))
    header_line, header = next(rows, (1, []))
    cols = {name.strip(): i for i, name in enumerate(header)}
    needed = ["sentence_A", "sentence_B", "relatedness_score", "entailment_label", "SemEval_set"]
    absent = [c for c in needed if c not in cols]
    if absent:
        raise CtxirError(
            f"{short_name(p)} line {header_line}: header lacks column(s) {', '.join(absent)}; got {show(chr(9).join(header))}"
            " — expected SICK.txt with its header row."
        )
    ia, ib, ir, il, iset = (cols[c] for c in needed)
    width = max(cols[c] for c in needed) + 1
    expected = f"{len(header)} tab-separated columns as in the header, relatedness 1-5"
    pairs: list[SickPair] = []
    for line_no, row in rows:
        if len(row) < width:
            raise bad_line(p, line_no, expected, "\t".join(row))
        if split is not None and row[iset].strip().upper() != _SICK_SPLITS[split.lower()]:
            continue
        try:
            relatedness = float(row[ir])
        except ValueError:
            raise bad_line(p, line_no, expected, "\t".join(row)) from None
        pairs.append(SickPair(row[ia].strip(), row[ib].strip(), relatedness, _nli_label(p, line_no, row[il])))
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
    root = existing_folder(folder, ", ".join(names))
    if not all((root / n).is_file() for n in names):
        splits = sorted(f.suffix[1:] for f in root.glob("labels.*"))
        have = f"available splits: {', '.join(splits)}" if splits else "no labels.* files found"
        raise CtxirError(f"{root} lacks {' / '.join(n for n in names if not (root / n).is_file())} ({have}).")
    paths = [root / n for n in names]
    # blank lines stay, so that line numbers match the files
    texts = [read_text(p).removesuffix("\n") for p in paths]
    columns = [[line.rstrip("\r") for line in text.split("\n")] if text else [] for text in texts]
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
