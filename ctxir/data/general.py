"""General-domain relevance sets for training re-rankers (SQuAD, WikiQA, MS MARCO triples) as ``RelevanceSet``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from ctxir.checks import check_choice
from ctxir.data.beir import PathLike, existing_file, read_text, short_name, tsv_rows
from ctxir.types import Corpus, CtxirError, Qrels, Queries

WIKIQA_COLUMNS = ("QuestionID", "Question", "DocumentID", "DocumentTitle", "SentenceID", "Sentence", "Label")


@dataclass
class RelevanceSet:
    """Queries with judged passages of one source; ``negatives``: its own non-relevant ones; ``groups``: doc → article."""

    name: str
    corpus: Corpus
    queries: Queries
    qrels: Qrels
    negatives: dict[str, list[str]] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)

    def subset(self, qids: list[str]) -> RelevanceSet:
        """The same corpus, only ``qids``'s queries and judgements."""
        keep = [q for q in qids if q in self.queries]
        queries, qrels = {q: self.queries[q] for q in keep}, {q: self.qrels[q] for q in keep}
        return replace(
            self, queries=queries, qrels=qrels, negatives={q: self.negatives.get(q, []) for q in keep}
        )


def load_squad(path: PathLike) -> RelevanceSet:
    """SQuAD v1.1 JSON: every question → the paragraph it is answered in; a paragraph's group is its article."""
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
    """A WikiQA split: each question's sentences labelled 1 are positives, the others negatives; none: left out."""
    p, rows = _wikiqa_rows(path)
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
            out.queries[qid], out.negatives[qid] = question, negatives
            out.qrels[qid] = dict.fromkeys(positives, 1)
    return out


def load_wikiqa_pages(folder: PathLike) -> RelevanceSet:
    """WikiQA's questions over whole pages: every split in ``folder``, each summary one document (sentences joined)."""
    splits = sorted(Path(folder).glob("WikiQA-*.tsv"))
    if not splits:
        raise CtxirError(
            f"{str(folder)!r} holds no WikiQA split: expected WikiQA-train.tsv, WikiQA-dev.tsv or WikiQA-test.tsv "
            "(../shared/data/general/wikiqa)"
        )
    out = RelevanceSet("wikiqa-pages", {}, {}, {})
    for split in splits:
        for doc_id, (title, sentences) in load_wikiqa_sentences(split).items():
            out.corpus[doc_id] = {"title": title, "text": " ".join(sentences)}
        questions = load_wikiqa(split)
        for qid, question in questions.queries.items():
            out.queries[qid] = question
            out.qrels[qid] = {questions.groups[sentence]: 1 for sentence in questions.qrels[qid]}
    return out


def load_wikiqa_topics(
    path: PathLike,
    *,
    topic_words: int = 50,
    passage_words: int = 40,
    exclude_docs: set[str] = frozenset(),
    exclude_titles: set[str] = frozenset(),
) -> RelevanceSet:
    """Topic queries: a WikiQA summary's first ``topic_words`` words query the passages of its later sentences."""
    sentences = load_wikiqa_sentences(path)
    skip_titles = {_title_key(t) for t in exclude_titles}
    out = RelevanceSet("wikiqa-topics", {}, {}, {})
    for doc_id, (title, texts) in sentences.items():
        if doc_id in exclude_docs or _title_key(title) in skip_titles:
            continue
        words = [len(t.split()) for t in texts]
        # the query ends inside sentence `cut`; the passages start after it
        cut = next((i for i in range(len(texts)) if sum(words[: i + 1]) >= topic_words), len(texts))
        if cut >= len(texts) - 1:
            continue
        query = " ".join(" ".join(texts).split()[:topic_words])
        passages, start = [], cut + 1
        for i in range(start, len(texts)):
            if sum(words[start : i + 1]) >= passage_words or i == len(texts) - 1:
                passages.append((f"{doc_id}-p{start}", " ".join(texts[start : i + 1])))
                start = i + 1
        qid = f"topic:{doc_id}"
        out.queries[qid] = query
        # a last passage shorter than half the rest carries too little subject to be judged relevant on
        judged = [pid for pid, text in passages if len(text.split()) >= passage_words // 2]
        out.qrels[qid] = dict.fromkeys(judged, 1)
        for pid, text in passages:
            out.corpus[pid] = {"title": "", "text": text}
            out.groups[pid] = doc_id
    return out


def load_wikiqa_sentences(path: PathLike) -> dict[str, tuple[str, list[str]]]:
    """``{DocumentID: (title, its summary's sentences in order)}`` of a WikiQA split."""
    p, rows = _wikiqa_rows(path)
    docs: dict[str, tuple[str, dict[int, str]]] = {}
    for line_no, row in rows:
        if len(row) != len(WIKIQA_COLUMNS):
            raise CtxirError(f"{short_name(p)} line {line_no}: expected 7 tab-separated fields, got {row!r}")
        doc_id, title, sentence_id, sentence = (row[i].strip() for i in (2, 3, 4, 5))
        index = sentence_id.rsplit("-", 1)[-1]
        if not index.isdigit():
            raise CtxirError(
                f"{short_name(p)} line {line_no}: SentenceID {sentence_id!r} does not end in -<number> "
                "(D1-0, D1-1, ...); is this a WikiQA file?"
            )
        docs.setdefault(doc_id, (title, {}))[1][int(index)] = sentence
    return {d: (title, [s for _, s in sorted(texts.items())]) for d, (title, texts) in docs.items()}


def _wikiqa_rows(path: PathLike):
    """(the file, its numbered rows after WikiQA's header), once the header is WikiQA's."""
    p = existing_file(path, "a WikiQA split (WikiQA-train.tsv)")
    rows = tsv_rows(read_text(p))
    _, header = next(rows, (0, []))
    if tuple(h.strip() for h in header) != WIKIQA_COLUMNS:
        raise CtxirError(
            f"{short_name(p)} does not start with WikiQA's header {WIKIQA_COLUMNS}; got {header[:7]!r}. "
            "Pass one of WikiQA-train.tsv, WikiQA-dev.tsv, WikiQA-test.tsv."
        )
    return p, rows


def _title_key(title: str) -> str:
    return title.replace("_", " ").strip().lower()


def load_msmarco_triples(path: PathLike) -> RelevanceSet:
    """MS MARCO ``triples.train`` lines (query, relevant, non-relevant): one query per text, mojibake undone."""
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
        text = fixed
    return text


def load_general(data_dir: PathLike, sources: list[str]) -> dict[str, RelevanceSet]:
    """``{source: RelevanceSet}`` from ``<data_dir>/general/`` for sources among ``GENERAL_SOURCES``."""
    readers = {"squad": load_squad, "wikiqa": load_wikiqa, "msmarco": load_msmarco_triples}
    readers["wikiqa-topics"] = lambda path: _topics_held_apart(data_dir, path)
    return {
        source: readers[check_choice(source, "general source", GENERAL_SOURCES)](
            general_file(data_dir, source)
        )
        for source in sources
    }


def _topics_held_apart(data_dir: PathLike, path: Path) -> RelevanceSet:
    """WikiQA train's topics without the pages of WikiQA's dev and test splits or of the SQuAD articles."""
    other_docs = set()
    for split in ("WikiQA-dev.tsv", "WikiQA-test.tsv"):
        if (path.parent / split).is_file():
            other_docs |= set(load_wikiqa_sentences(path.parent / split))
    squad = general_file(data_dir, "squad")
    titles = set(load_squad(squad).groups.values()) if squad.is_file() else set()
    return load_wikiqa_topics(path, exclude_docs=other_docs, exclude_titles=titles)


# {source: (file under <data_dir>/general/, the split it is)}: what a model's metrics.json names as its training data
GENERAL_FILES = {
    "squad": ("squad-v1.1/dev-v1.1.json", "dev (questions used for training)"),
    "wikiqa": ("wikiqa/WikiQA-train.tsv", "train"),
    "msmarco": ("msmarco-triples/toy_triples.train.small.tsv", "train triples"),
    "wikiqa-topics": ("wikiqa/WikiQA-train.tsv", "train (summaries' first 50 words as topic queries)"),
}
GENERAL_SOURCES = tuple(GENERAL_FILES)


def general_file(data_dir: PathLike, source: str) -> Path:
    """The file ``load_general`` reads for ``source``."""
    return Path(data_dir) / "general" / GENERAL_FILES[source][0]
