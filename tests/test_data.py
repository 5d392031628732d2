"""ctxir.data: tiny well-formed and malformed files, then exact counts on the real benchmark data."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from ctxir.data import (
    load_beir,
    load_corpus,
    load_corpus_any,
    load_qrels,
    load_queries,
    load_sick,
    load_snli,
    load_sts,
    load_user_corpus,
)
from ctxir.data.sentence_pairs import NliPair, SickPair
from ctxir.types import CtxirError
from tests.conftest import SHARED_DATA as DATA


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def make_beir(root: Path, qrels: dict[str, str] | None = None) -> Path:
    write(
        root / "corpus.jsonl",
        '{"_id": "d1", "title": "T1", "text": "one"}\n'
        '{"_id": 2, "text": "two"}\n'  # int id, no title
        "\n"
        '{"_id": "d3", "title": null, "text": "three"}\n',
    )
    write(root / "queries.jsonl", '{"_id": 1, "text": "q one"}\n{"_id": "q2", "text": "q two"}\n')
    qrels = qrels or {"test": "query-id\tcorpus-id\tscore\r\n1\td1\t1\r\n1\t2\t0\r\n"}
    for split, text in qrels.items():
        write(root / "qrels" / f"{split}.tsv", text)
    return root


# ---------------------------------------------------------------- BEIR


def test_beir_crlf_header_int_ids_and_judged_queries_only(tmp_path: Path) -> None:
    corpus, queries, qrels = load_beir(make_beir(tmp_path / "ds"))
    assert corpus == {
        "d1": {"title": "T1", "text": "one"},
        "2": {"title": "", "text": "two"},
        "d3": {"title": "", "text": "three"},
    }
    assert queries == {"1": "q one"}  # q2 has no judgments in this split
    assert qrels == {"1": {"d1": 1, "2": 0}}  # score 0 kept
    assert all(type(s) is int for s in qrels["1"].values())


def test_qrels_without_header_and_blank_lines(tmp_path: Path) -> None:
    f = write(tmp_path / "q.tsv", "\n1\td1\t2\n\n1\td2\t1\n2\td1\t3.0\n\n")
    assert load_qrels(f) == {"1": {"d1": 2, "d2": 1}, "2": {"d1": 3}}


def test_qrels_trec_format(tmp_path: Path) -> None:
    f = write(tmp_path / "q.txt", "1 0 d1 1\n1 0 d2 0\n")
    assert load_qrels(f) == {"1": {"d1": 1, "d2": 0}}


def test_qrels_bad_score_names_line(tmp_path: Path) -> None:
    f = write(tmp_path / "ds" / "test.tsv", "query-id\tcorpus-id\tscore\n1\td1\t1\n1\td2\thigh\n")
    with pytest.raises(CtxirError, match=r"ds/test\.tsv line 3: .*'1\\td2\\thigh'"):
        load_qrels(f)


def test_missing_qrels_split_lists_available(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds", {"train": "1\td1\t1\n", "test": "1\td1\t1\n"})
    with pytest.raises(CtxirError, match=r"qrels/dev\.tsv.*available splits: test, train"):
        load_beir(root, "dev")


def test_missing_beir_folder_and_files(tmp_path: Path) -> None:
    with pytest.raises(CtxirError, match=r"Folder not found: .*nope.*corpus\.jsonl, queries\.jsonl"):
        load_beir(tmp_path / "nope")
    write(tmp_path / "half" / "corpus.jsonl", '{"_id": "a", "text": "x"}\n')
    with pytest.raises(CtxirError, match=r"no queries\.jsonl"):
        load_beir(tmp_path / "half")
    with pytest.raises(CtxirError, match=r"File not found: .*missing\.jsonl"):
        load_corpus(tmp_path / "missing.jsonl")


def test_qrels_query_not_in_queries(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds", {"test": "1\td1\t1\n99\td1\t1\n"})
    with pytest.raises(CtxirError, match=r"not in queries\.jsonl.*'99'"):
        load_beir(root)


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    f = write(tmp_path / "scifact" / "queries.jsonl", '{"_id": "1", "text": "a"}\n\n{"_id": 3\n')
    with pytest.raises(CtxirError) as e:
        load_queries(f)
    msg = str(e.value)
    assert "scifact/queries.jsonl line 3" in msg
    assert "'{\"_id\": 3'" in msg
    assert "fix or remove that line" in msg


def test_json_line_without_text(tmp_path: Path) -> None:
    f = write(tmp_path / "corpus.jsonl", '{"_id": "1", "text": "a"}\n["not", "an", "object"]\n')
    with pytest.raises(CtxirError, match=r"corpus\.jsonl line 2: expected a JSON object"):
        load_corpus(f)
    f = write(tmp_path / "c2.jsonl", '{"_id": "1", "title": "only a title"}\n')
    with pytest.raises(CtxirError, match=r"line 1"):
        load_corpus(f)


def test_long_bad_line_is_truncated(tmp_path: Path) -> None:
    f = write(tmp_path / "corpus.jsonl", "x" * 500 + "\n")
    with pytest.raises(CtxirError) as e:
        load_corpus(f)
    assert "x" * 80 + "'..." in str(e.value)
    assert "x" * 81 not in str(e.value)


def test_beir_corpus_duplicate_id(tmp_path: Path) -> None:
    f = write(
        tmp_path / "corpus.jsonl",
        '{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"}\n{"_id": "a", "text": "z"}\n',
    )
    with pytest.raises(CtxirError, match=r"'a' appears twice, on line 1 and line 3"):
        load_corpus(f)


def test_jsonl_keeps_unicode_line_separators(tmp_path: Path) -> None:
    # U+2028 is legal unescaped inside a JSON string; it must not split the line.
    f = write(tmp_path / "corpus.jsonl", '{"_id": "a", "text": "x\u2028y"}\n')
    assert load_corpus(f)["a"]["text"] == "x\u2028y"


# ---------------------------------------------------------------- user corpora


def test_user_txt(tmp_path: Path) -> None:
    f = write(tmp_path / "docs.txt", "first doc\r\n\r\n  second doc  \r\nthird")
    assert load_user_corpus(f) == {
        "1": {"title": "", "text": "first doc"},
        "3": {"title": "", "text": "second doc"},
        "4": {"title": "", "text": "third"},
    }


def test_user_jsonl_ids(tmp_path: Path) -> None:
    f = write(
        tmp_path / "docs.jsonl",
        '{"id": 7, "text": "a"}\n{"text": "no id", "title": "T"}\n{"_id": "x", "text": "b"}\n',
    )
    assert load_user_corpus(f) == {
        "7": {"title": "", "text": "a"},
        "2": {"title": "T", "text": "no id"},
        "x": {"title": "", "text": "b"},
    }


def test_user_csv_and_tsv(tmp_path: Path) -> None:
    f = write(tmp_path / "docs.csv", 'ID,Title,Text\r\nd1,T1,"has, comma"\r\nd2,,"two\nlines"\r\n')
    assert load_user_corpus(f) == {
        "d1": {"title": "T1", "text": "has, comma"},
        "d2": {"title": "", "text": "two\nlines"},
    }
    f = write(tmp_path / "docs.tsv", "text\nalpha\n\nbeta\n")
    assert load_user_corpus(f) == {"2": {"title": "", "text": "alpha"}, "4": {"title": "", "text": "beta"}}


def test_user_csv_bom_header(tmp_path: Path) -> None:
    f = write(tmp_path / "docs.csv", b"\xef\xbb\xbfid,text\n1,hello\n")
    assert load_user_corpus(f) == {"1": {"title": "", "text": "hello"}}


def test_user_csv_without_text_column(tmp_path: Path) -> None:
    f = write(tmp_path / "docs.csv", "a doc,another\nmore,rows\n")
    with pytest.raises(CtxirError, match=r"docs\.csv line 1: expected a header row with a 'text' column"):
        load_user_corpus(f)


def test_user_csv_wrong_field_count(tmp_path: Path) -> None:
    f = write(tmp_path / "docs.csv", "id,text\n1,ok\n2,not,ok\n")
    with pytest.raises(CtxirError, match=r"docs\.csv line 3: expected 2 fields \(comma-separated"):
        load_user_corpus(f)


@pytest.mark.parametrize(
    ("name", "content", "lines"),
    [
        ("d.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n{"id": "a", "text": "z"}\n', (1, 3)),
        ("d.csv", "id,text\na,x\nb,y\n\na,z\n", (2, 5)),
    ],
)
def test_user_duplicate_id(tmp_path: Path, name: str, content: str, lines: tuple[int, int]) -> None:
    with pytest.raises(CtxirError, match=rf"'a' appears twice, on line {lines[0]} and line {lines[1]}"):
        load_user_corpus(write(tmp_path / name, content))


def test_user_not_utf8(tmp_path: Path) -> None:
    f = write(tmp_path / "latin1.txt", "caf\u00e9 ok\n".encode() + "na\u00efve\n".encode("latin-1"))
    with pytest.raises(CtxirError) as e:
        load_user_corpus(f)
    msg = str(e.value)
    assert "latin1.txt is not UTF-8" in msg
    assert "line 2" in msg
    assert "byte(s) ef at line 2" in msg  # the undecodable byte
    assert "UTF-8" in msg and "Re-save" in msg


@pytest.mark.parametrize(
    ("name", "content"), [("e.txt", "\n  \n\r\n"), ("e.jsonl", ""), ("e.csv", "id,text\n"), ("e.tsv", "")]
)
def test_user_empty_corpus(tmp_path: Path, name: str, content: str) -> None:
    with pytest.raises(CtxirError, match="contains no documents"):
        load_user_corpus(write(tmp_path / name, content))


def test_user_empty_text_names_line(tmp_path: Path) -> None:
    f = write(tmp_path / "d.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "text": "  "}\n')
    with pytest.raises(CtxirError, match=r"d\.jsonl line 2: expected a document with non-empty text"):
        load_user_corpus(f)


def test_user_unsupported_suffix(tmp_path: Path) -> None:
    with pytest.raises(CtxirError, match=r"unsupported file type '\.pdf'"):
        load_user_corpus(write(tmp_path / "d.pdf", "x"))


def test_load_corpus_any(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "ds")
    assert set(load_corpus_any(root)) == {"d1", "2", "d3"}
    assert load_corpus_any(write(tmp_path / "d.txt", "hi\n")) == {"1": {"title": "", "text": "hi"}}
    with pytest.raises(CtxirError, match=r"without corpus\.jsonl"):
        load_corpus_any(tmp_path / "ds" / "qrels")


# ---------------------------------------------------------------- sentence pairs


def test_sts_quotes_extra_columns_and_folder(tmp_path: Path) -> None:
    write(
        tmp_path / "sts-dev.csv",
        'main-news\tsrc\t2012\t0001\t4.500\tHe said "hi\tShe said "hi"\n'
        "main-forums\tsrc\t2014\t0002\t0.000\tA \\'b\tC\textra1\textra2\n",
    )
    expected = [('He said "hi', 'She said "hi"', 4.5), ("A \\'b", "C", 0.0)]
    assert load_sts(tmp_path, "dev") == expected
    assert load_sts(tmp_path / "sts-dev.csv") == expected
    with pytest.raises(CtxirError, match="pass split="):
        load_sts(tmp_path)


def test_sts_bad_score(tmp_path: Path) -> None:
    f = write(tmp_path / "sts-test.csv", "g\ts\ty\t1\t3.0\ta\tb\ng\ts\ty\t2\t7.5\ta\tb\n")
    with pytest.raises(CtxirError, match=r"sts-test\.csv line 2: expected .*score 0-5"):
        load_sts(f)


SICK_HEADER = (
    "pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\tentailment_AB\tentailment_BA\t"
    "sentence_A_original\tsentence_B_original\tsentence_A_dataset\tsentence_B_dataset\tSemEval_set"
)


def sick_row(i: int, label: str, score: str, split: str) -> str:
    return f"{i}\tA {i}\tB {i}\t{label}\t{score}\tx\tx\tx\tx\tFLICKR\tFLICKR\t{split}"


def test_sick_full_release_and_splits(tmp_path: Path) -> None:
    rows = [
        sick_row(1, "NEUTRAL", "4.5", "TRAIN"),
        sick_row(2, "ENTAILMENT", "3.2", "TRIAL"),
        sick_row(3, "CONTRADICTION", "1", "TEST"),
    ]
    f = write(tmp_path / "SICK.txt", "\r\n".join([SICK_HEADER, *rows]))  # CRLF, no final newline
    assert load_sick(f) == [
        SickPair("A 1", "B 1", 4.5, "neutral"),
        SickPair("A 2", "B 2", 3.2, "entailment"),
        SickPair("A 3", "B 3", 1.0, "contradiction"),
    ]
    assert [p.sentence_a for p in load_sick(f, "train")] == ["A 1"]
    assert [p.sentence_a for p in load_sick(tmp_path, "dev")] == ["A 2"]
    assert [p.label for p in load_sick(f, "TEST")] == ["contradiction"]
    with pytest.raises(CtxirError, match="Unknown SICK split 'val'"):
        load_sick(f, "val")


def test_sick_bad_rows(tmp_path: Path) -> None:
    f = write(tmp_path / "SICK.txt", "\n".join([SICK_HEADER, sick_row(1, "MAYBE", "4", "TRAIN")]))
    with pytest.raises(CtxirError, match=r"SICK\.txt line 2: unknown label 'MAYBE'"):
        load_sick(f)
    f = write(tmp_path / "s2" / "SICK.txt", "\n".join([SICK_HEADER, "1\tonly\tthree"]))
    with pytest.raises(CtxirError, match=r"SICK\.txt line 2: expected 12 tab-separated"):
        load_sick(f)
    f = write(tmp_path / "s3" / "SICK.txt", "a\tb\tc\n")
    with pytest.raises(CtxirError, match=r"line 1: header lacks column\(s\) sentence_A"):
        load_sick(f)


def write_snli(root: Path, s1: str, s2: str, labels: str, split: str = "dev") -> Path:
    write(root / f"s1.{split}", s1)
    write(root / f"s2.{split}", s2)
    write(root / f"labels.{split}", labels)
    return root


def test_snli(tmp_path: Path) -> None:
    root = write_snli(tmp_path, "A man . \nA dog . \n", "He sleeps . \nIt runs . \n", "neutral\nentailment\n")
    assert load_snli(root, "dev") == [
        NliPair("A man .", "He sleeps .", "neutral"),
        NliPair("A dog .", "It runs .", "entailment"),
    ]


def test_snli_unknown_label(tmp_path: Path) -> None:
    root = write_snli(tmp_path, "a\nb\nc\n", "d\ne\nf\n", "neutral\ncontradiction\nsupport\n")
    with pytest.raises(CtxirError) as e:
        load_snli(root, "dev")
    msg = str(e.value)
    assert "labels.dev line 3" in msg
    assert "'support'" in msg
    assert "entailment, neutral, contradiction" in msg


def test_snli_line_count_mismatch(tmp_path: Path) -> None:
    root = write_snli(tmp_path, "a\nb\n", "c\n", "neutral\nneutral\n")
    with pytest.raises(CtxirError, match=r"s1\.dev has 2, s2\.dev has 1, labels\.dev has 2 lines"):
        load_snli(root, "dev")


def test_snli_missing_split_lists_available(tmp_path: Path) -> None:
    root = write_snli(tmp_path, "a\n", "b\n", "neutral\n", split="test")
    with pytest.raises(CtxirError, match=r"s1\.train.*available splits: test"):
        load_snli(root, "train")


# ---------------------------------------------------------------- real data (exact counts from its README)


@pytest.fixture(scope="module")
def data() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"benchmark data not found at {DATA}")
    return DATA


def n_pairs(qrels: dict[str, dict[str, float]]) -> int:
    return sum(len(d) for d in qrels.values())


def test_real_scifact(data: Path) -> None:
    t0 = time.perf_counter()
    corpus, queries, qrels = load_beir(data / "scifact", "test")
    assert time.perf_counter() - t0 < 1.0
    assert len(corpus) == 5183
    assert len(queries) == 300
    assert len(qrels) == 300
    assert n_pairs(qrels) == 339
    assert {s for d in qrels.values() for s in d.values()} == {1}
    assert all(doc_id in corpus for d in qrels.values() for doc_id in d)
    assert queries["1"] == "0-dimensional biomaterials show inductive properties."
    _, train_q, train_qrels = load_beir(data / "scifact", "train")
    assert (len(train_q), n_pairs(train_qrels)) == (809, 919)
    assert len(load_queries(data / "scifact" / "queries.jsonl")) == 1109
    with pytest.raises(CtxirError, match="available splits: test, train"):
        load_beir(data / "scifact", "dev")


def test_real_msmarco_sample(data: Path) -> None:
    corpus, queries, qrels = load_beir(data / "msmarco_sample")
    assert len(corpus) == 5000
    assert len(queries) == 43
    assert n_pairs(qrels) == 4102
    assert all(c["title"] == "" for c in corpus.values())
    assert set(Counter(s for d in qrels.values() for s in d.values())) == {1, 2, 3}


@pytest.mark.parametrize(("split", "n"), [("train", 5749), ("dev", 1500), ("test", 1379)])
def test_real_sts(data: Path, split: str, n: int) -> None:
    pairs = load_sts(data / "stsbenchmark", split)
    assert len(pairs) == n
    scores = [s for _, _, s in pairs]
    assert min(scores) == 0.0 and max(scores) == 5.0
    assert all(a and b for a, b, _ in pairs)


def test_real_sick(data: Path) -> None:
    pairs = load_sick(data / "sick" / "SICK.txt")
    assert len(pairs) == 9840
    assert Counter(p.label for p in pairs) == {"neutral": 5595, "entailment": 2821, "contradiction": 1424}
    assert min(p.relatedness for p in pairs) == 1.0 and max(p.relatedness for p in pairs) == 5.0
    assert len(load_sick(data / "sick", "train")) == 4439
    assert len(load_sick(data / "sick", "dev")) == 495


def test_real_snli(data: Path) -> None:
    pairs = load_snli(data / "snli", "dev")
    assert len(pairs) == 9842
    assert Counter(p.label for p in pairs) == {"entailment": 3329, "contradiction": 3278, "neutral": 3235}
    assert pairs[0] == NliPair(
        "Two women are embracing while holding to go packages .",
        "The sisters are hugging goodbye while holding to go packages after just eating lunch .",
        "neutral",
    )


def test_real_corpus_any(data: Path) -> None:
    assert len(load_corpus_any(data / "scifact")) == 5183
    assert len(load_corpus_any(data / "scifact" / "corpus.jsonl")) == 5183


def test_real_jsonl_roundtrip_sample(data: Path) -> None:
    # The first corpus line parsed by hand agrees with the loader (title and text untouched).
    first = json.loads((data / "scifact" / "corpus.jsonl").open(encoding="utf-8").readline())
    doc = load_corpus(data / "scifact" / "corpus.jsonl")[first["_id"]]
    assert doc == {"title": first["title"], "text": first["text"]}


def test_load_pairs_tsv_and_jsonl(tmp_path):
    from ctxir.data.sentence_pairs import load_pairs

    (tmp_path / "p.jsonl").write_text(
        '{"query": "a short one", "target": "a much longer original sentence"}\n\n'
        '{"query": "two", "target": "second target"}\n'
    )
    assert load_pairs(tmp_path / "p.jsonl") == [
        ("a short one", "a much longer original sentence"),
        ("two", "second target"),
    ]
    (tmp_path / "p.tsv").write_text("x\ty\n")
    assert load_pairs(tmp_path / "p.tsv") == [("x", "y")]
    (tmp_path / "bad.jsonl").write_text('{"query": "q"}\n')
    with pytest.raises(
        CtxirError, match=r'bad.jsonl line 1: expected a JSON object with non-empty string "query"'
    ):
        load_pairs(tmp_path / "bad.jsonl")
    (tmp_path / "empty.tsv").write_text("query\ttarget\n")
    with pytest.raises(CtxirError, match="contains no"):
        load_pairs(tmp_path / "empty.tsv")


def test_wikiqa_pages_join_each_summary_and_keep_questions_with_an_answer(tmp_path):
    from ctxir.data.general import WIKIQA_COLUMNS, load_wikiqa_pages

    rows = [
        WIKIQA_COLUMNS,
        ("Q1", "bat sonar?", "D1", "Bat", "D1-0", "Bats are mammals .", "0"),
        ("Q1", "bat sonar?", "D1", "Bat", "D1-1", "Bats echolocate .", "1"),
        ("Q2", "no answer?", "D2", "X", "D2-0", "Nothing .", "0"),
    ]
    write(tmp_path / "WikiQA-dev.tsv", "".join("\t".join(row) + "\n" for row in rows))
    pages = load_wikiqa_pages(tmp_path)
    assert pages.corpus == {
        "D1": {"title": "Bat", "text": "Bats are mammals . Bats echolocate ."},
        "D2": {"title": "X", "text": "Nothing ."},
    }
    assert (pages.queries, pages.qrels) == ({"Q1": "bat sonar?"}, {"Q1": {"D1": 1}})
