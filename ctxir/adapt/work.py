"""An adapt run's output folder (adapter, adapt.json, adapt.incomplete, work/) and its record and README.md card.

work/ holds settings.json, queries, negatives, labels and checkpoints: what a rerun continues from."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable
from pathlib import Path

from ctxir.adapt.queries import kinds_phrase
from ctxir.files import write_atomic, write_json
from ctxir.names import ADAPT_INCOMPLETE
from ctxir.types import Corpus, CtxirError, doc_text

RECORD_FILE = "adapt.json"
# the settings the work files are made from; a change to any other (training) setting keeps them
DATA_SETTINGS = {"corpus_fingerprint", "model", "teacher", "query_kinds", "queries_per_doc", "max_queries"}
DATA_SETTINGS |= {"negatives", "mining_depth", "seed", "generator"}


class BudgetReached(CtxirError):
    """``--max-minutes`` ran out before a stage that must finish could."""


def corpus_fingerprint(corpus: Corpus) -> str:
    """sha256 of every document id and text, in id order: the work files belong to this corpus only."""
    digest = hashlib.sha256()
    for doc_id in sorted(corpus):
        digest.update(f"{doc_id}\x00{doc_text(corpus[doc_id])}\x00".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


class WorkDir:
    """Paths and checks of one output folder ``root``."""

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser()
        self.work = self.root / "work"
        self.settings = self.work / "settings.json"
        self.queries = self.work / "queries.jsonl"
        self.negatives = self.work / "negatives.jsonl"
        self.labels = self.work / "labels.jsonl"
        self.checkpoints = self.work / "checkpoints"
        self.final = self.work / "final"
        self.marker = self.root / ADAPT_INCOMPLETE
        self.record = self.root / RECORD_FILE

    def record_json(self) -> dict:
        return json.loads(self.record.read_text(encoding="utf-8")) if self.record.is_file() else {}

    def start(self, settings: dict, overwrite: bool) -> bool:
        """Claim the folder for a run with ``settings``; True when earlier work is continued."""
        if self.root.exists() and not self.root.is_dir():
            raise CtxirError(
                f"--output {str(self.root)!r} is a file: give a folder (it is created if absent)"
            )
        ours = self.work.is_dir() or self.record.is_file() or self.marker.is_file()
        if self.root.is_dir() and any(self.root.iterdir()) and not ours:
            raise CtxirError(
                f"--output {str(self.root)!r} holds files that are not a ctxir adapt run: give a new or empty folder"
            )
        earlier = json.loads(self.settings.read_text(encoding="utf-8")) if self.settings.is_file() else None
        if earlier is not None and earlier != settings:
            changed = sorted(k for k in settings.keys() | earlier.keys() if settings.get(k) != earlier.get(k))
            if not overwrite and set(changed) & DATA_SETTINGS:
                raise CtxirError(
                    f"--output {str(self.root)!r} holds a run made with other settings (changed: {', '.join(changed)}): "
                    "give a new --output, or add --overwrite to start that folder again"
                )
            if not overwrite:  # training settings only: the queries, negatives and teacher scores still hold
                print(
                    f"   training settings changed ({', '.join(changed)}): training starts again", flush=True
                )
                shutil.rmtree(self.checkpoints, ignore_errors=True)
        if overwrite and ours:  # nothing but the run's work and adapter files is in the folder: checked above
            for path in self.root.iterdir():
                shutil.rmtree(path) if path.is_dir() else path.unlink()
            earlier = None
        self.work.mkdir(parents=True, exist_ok=True)
        write_atomic(self.marker, "a ctxir adapt run is writing this folder: it is not a finished adapter\n")
        write_json(self.settings, settings)
        return earlier is not None

    def finish(self, record: dict, keep_work: bool) -> None:
        """Move work/final's adapter into the folder, write adapt.json, then drop the marker."""
        for old in self.root.iterdir():  # an earlier (budget-stopped) adapter's files: replaced as a whole
            if old.name not in ("work", ADAPT_INCOMPLETE):
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        for path in sorted(self.final.iterdir()):
            path.replace(self.root / path.name)
        self.final.rmdir()
        write_json(self.record, {"format": "ctxir-adapt/1", **record})
        if not keep_work and record.get("complete"):
            shutil.rmtree(self.work, ignore_errors=True)
        self.marker.unlink(missing_ok=True)


def write_jsonl(path: Path, rows: Iterable[dict]) -> None:
    """Atomically: a stage's file exists only once it is whole."""
    write_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSONL file; a torn last line (a killed append) is dropped."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def write_card(folder: Path, record: dict) -> None:
    """The adapter's README.md: how its pseudo-queries were made, what labelled them, how to load it."""
    examples = "\n".join(f"- {kind}: {texts[0]!r}" for kind, texts in record["query_examples"].items())
    queries, teacher = record["queries"], record["teacher"]
    made = "cut from the\ndocuments themselves"
    if queries.get("generated"):
        also = " or cut from the documents themselves" if queries["total"] > queries["generated"] else ""
        made = f"written by the query generator `{record['settings'].get('generator')}` (trained on general-domain "
        made += f"questions, not this corpus){also} for its documents"
    how = ""
    if teacher.startswith("complement:"):
        how = " (the base model's cosine plus BM25, each scaled to one spread of margins; the negatives BM25 mined "
        how += "labelled by the cosine alone)"
    (folder / "README.md").write_text(
        f"""---
library_name: sentence-transformers
base_model: {record["base_model"]}
tags: [sentence-transformers, peft, lora, ctxir-adapt]
---
# {record["base_model"]} adapted to one corpus, without labels

A LoRA adapter made by `ctxir adapt` on the corpus `{record["corpus"]["path"]}` ({record["corpus"]["documents"]:,}
documents): no query and no relevance label was used. {queries["total"]:,} pseudo-queries were {made} ({kinds_phrase(queries)}),
negatives mined with BM25 and the base model, and
the teacher `{teacher}`{how} labelled them with its score margins ({record["loss"]}). It was not evaluated here: measure it on your own
queries (`ctxir evaluate --model DIR`).

Examples of the pseudo-queries:
{examples}

Load it with ctxir (offline, the base from the packaged copy) or with sentence-transformers and peft:
`SentenceTransformer("DIR")` fetches the base model from the Hub.
""",
        encoding="utf-8",
    )
