"""General-domain relevance sets for training re-rankers (SQuAD, WikiQA, MS MARCO triples) in the BEIR contract.

Each reader returns a ``RelevanceSet``: ``corpus {id: {title, text}}``, ``queries {id: text}``, ``qrels {qid: {doc: 1}}``,
plus ``negatives {qid: [doc ids]}`` the source itself marks as not relevant (WikiQA's other sentences, MS MARCO's
given negative) and ``groups {doc id: group}`` (a SQuAD paragraph's article), so a caller can hold out whole articles.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ctxir.data.reading import PathLike, existing_file, read_text, short_name, tsv_rows
from ctxir.types import Corpus, CtxirError, Qrels, Queries

WIKIQA_COLUMNS = ("QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label")


@dataclass
class RelevanceSet:
    """Queries with judged passages of one source; ``negatives`` are the source's own non-relevant judgements."""

    name: str
    corpus: Corpus
    queries: Queries
    qrels: Qrels
    negatives: dict[str, list[str]] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)

    def subset(self, qids: list[str]) -> RelevanceSet:
        """The same corpus, only ``qids``'s queries and judgements."""
        keep = [q for q in qids if q in self.queries]
        return RelevanceSet(
            self.name,
            self.corpus,
            {q: self.queries[q] for q in keep},
            {q: self.qrels[q] for q in keep},
            {q: self.negatives.get(q, []) for q in keep},
            self.groups,
        )


def load_squad(path: PathLike) -> RelevanceSet:
    """SQuAD v1.1 JSON: every question → the paragraph it is answered in; a paragraph's group is its article.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = Path(folder.name) / "dev.json"
    >>> _ = path.write_text(json.dumps({"data": [{"title": "River_otter", "paragraphs": [
    ...     {"context": "Otters dig dens.", "qas": [{"id": "q1", "question": "What do otters dig?"}]},
    ...     {"context": "Otters eat fish.", "qas": []}]}]}))
    >>> squad = load_squad(path)
    >>> squad.corpus["River_otter:1"], squad.queries, squad.qrels, squad.groups["River_otter:1"]
    ({'title': 'River otter', 'text': 'Otters eat fish.'}, {'q1': 'What do otters dig?'}, {'q1': {'River_otter:0': 1}}, 'River_otter')
    >>> folder.cleanup()
    """
    p = existing_file(path, "a SQuAD v1.1 JSON file (dev-v1.1.json)")
    try:
        articles = json.loads(read_text(p))["data"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CtxirError(
            f"{short_name(p)} is not a SQuAD v1.1 file ({err}); expected {{'data': [{{'title', "
            "'paragraphs': [{'context', 'qas'}]}]}}, as dev-v1.1.json."
        ) from None
    out = RelevanceSet("squad", {}, {}, {})
    for article in articles:
        for i, paragraph in enumerate(article["paragraphs"]):
            doc_id = f"{article['title']}:{i}"
            out.corpus[doc_id] = {"title": article["title"].replace("_", " "), "text": paragraph["context"]}
            out.groups[doc_id] = article["title"]
            for qa in paragraph["qas"]:
                out.queries[qa["id"]] = qa["question"].strip()
                out.qrels[qa["id"]] = {doc_id: 1}
    return out


def load_wikiqa(path: PathLike) -> RelevanceSet:
    """A WikiQA TSV split: each question with its summary's sentences; label 1 = answers it (a judged positive),
    the others are its negatives. Questions with no correct sentence are left out (nothing to rank first).

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = Path(folder.name) / "WikiQA-dev.tsv"
    >>> _ = path.write_text("\\t".join(WIKIQA_COLUMNS) + "\\r\\n"
    ...     "Q1\\tbat sonar?\\tD1\\tBat\\tD1-0\\tBats are mammals .\\t0\\r\\n"
    ...     "Q1\\tbat sonar?\\tD1\\tBat\\tD1-1\\tBats echolocate .\\t1\\r\\n"
    ...     "Q2\\tno answer?\\tD2\\tX\\tD2-0\\tNothing .\\t0\\r\\n")
    >>> wikiqa = load_wikiqa(path)
    >>> wikiqa.queries, wikiqa.qrels, wikiqa.negatives, wikiqa.corpus["D1-1"]
    ({'Q1': 'bat sonar?'}, {'Q1': {'D1-1': 1}}, {'Q1': ['D1-0']}, {'title': 'Bat', 'text': 'Bats echolocate .'})
    >>> folder.cleanup()
    """
    p = existing_file(path, "a WikiQA split (WikiQA-train.tsv)")
    rows = tsv_rows(read_text(p))
    _, header = next(rows, (0, []))
    if tuple(h.strip() for h in header) != WIKIQA_COLUMNS:
        raise CtxirError(
            f"{short_name(p)} does not start with WikiQA's header {WIKIQA_COLUMNS}; got {header[:7]!r}. "
            "Pass one of WikiQA-train.tsv, WikiQA-dev.tsv, WikiQA-test.tsv."
        )
    out = RelevanceSet("wikiqa", {}, {}, {})
    seen: dict[str, tuple[str, list[str], list[str]]] = {}
    for line_no, row in rows:
        if len(row) != len(WIKIQA_COLUMNS) or row[6].strip() not in ("0", "1"):
            raise CtxirError(
                f"{short_name(p)} line {line_no}: expected 7 tab-separated fields ending in label 0 or 1, "
                f"got {row!r}"
            )
        qid, question, _, title, sentence_id, sentence, label = (f.strip() for f in row)
        out.corpus[sentence_id] = {"title": title, "text": sentence}
        out.groups[sentence_id] = row[2].strip()
        question_row = seen.setdefault(qid, (question, [], []))
        question_row[1 if label == "1" else 2].append(sentence_id)
    for qid, (question, positives, negatives) in seen.items():
        if positives:
            out.queries[qid], out.qrels[qid], out.negatives[qid] = (
                question,
                dict.fromkeys(positives, 1),
                negatives,
            )
    return out


def load_msmarco_triples(path: PathLike) -> RelevanceSet:
    """MS MARCO ``triples.train`` lines (query, relevant passage, non-relevant passage): one query per distinct
    query text, every passage once. The file's mojibake (``donât``) is undone where the text round-trips.

    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> path = Path(folder.name) / "triples.tsv"
    >>> _ = path.write_text("what do otters eat\\tOtters eat fish.\\tBanks lend money.\\n"
    ...                     "what do otters eat\\tOtters eat fish.\\tBats eat moths.\\n", encoding="utf-8")
    >>> triples = load_msmarco_triples(path)
    >>> triples.queries, triples.qrels, triples.negatives
    ({'m0': 'what do otters eat'}, {'m0': {'p0': 1}}, {'m0': ['p1', 'p2']})
    >>> fix_mojibake("We donÃ¢Â\\x80Â\\x99t know"), fix_mojibake("café")
    ('We don’t know', 'café')
    """
    p = existing_file(path, "an MS MARCO triples file (query, positive, negative per line)")
    out = RelevanceSet("msmarco-triples", {}, {}, {})
    query_ids: dict[str, str] = {}
    passage_ids: dict[str, str] = {}

    def passage(text: str) -> str:
        if text not in passage_ids:
            passage_ids[text] = f"p{len(passage_ids)}"
            out.corpus[passage_ids[text]] = {"title": "", "text": text}
        return passage_ids[text]

    for line_no, row in tsv_rows(read_text(p)):
        if len(row) != 3:
            raise CtxirError(
                f"{short_name(p)} line {line_no}: expected 3 tab-separated fields (query, relevant passage, "
                f"non-relevant passage), got {len(row)}"
            )
        query, positive, negative = (fix_mojibake(f.strip()) for f in row)
        qid = query_ids.setdefault(query, f"m{len(query_ids)}")
        out.queries[qid] = query
        out.qrels.setdefault(qid, {})[passage(positive)] = 1
        out.negatives.setdefault(qid, [])
        if passage(negative) not in out.negatives[qid]:
            out.negatives[qid].append(passage(negative))
    return out


def fix_mojibake(text: str) -> str:
    """UTF-8 read as Latin-1 (once or twice over), undone; text that is not such mojibake comes back unchanged."""
    for _ in range(2):
        try:
            fixed = text.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            return text
        if fixed == text:
            return text
        text = fixed
    return text


def load_general(data_dir: PathLike, sources: list[str]) -> dict[str, RelevanceSet]:
    """``{source: RelevanceSet}`` from ``<data_dir>/general/`` for sources among ``GENERAL_SOURCES``."""
    readers = {"squad": load_squad, "wikiqa": load_wikiqa, "msmarco": load_msmarco_triples}
    for source in sources:
        if source not in readers:
            raise CtxirError(
                f"general source {source!r} is not known: use any of {', '.join(GENERAL_SOURCES)}"
            )
    return {source: readers[source](general_file(data_dir, source)) for source in sources}


# {source: (file under <data_dir>/general/, the split it is)}: what a model's metrics.json names as its training data
GENERAL_FILES = {
    "squad": ("squad-v1.1/dev-v1.1.json", "dev (questions used for training)"),
    "wikiqa": ("wikiqa/WikiQA-train.tsv", "train"),
    "msmarco": ("msmarco-triples/toy_triples.train.small.tsv", "train triples"),
}
GENERAL_SOURCES = tuple(GENERAL_FILES)


def general_file(data_dir: PathLike, source: str) -> Path:
    """The file ``load_general`` reads for ``source``."""
    return Path(data_dir) / "general" / GENERAL_FILES[source][0]
