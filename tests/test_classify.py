"""ctxir.classify: the classifiers on hand-built clusters, kNN against a brute-force count, zero-shot on separable
labels, the metrics against hand-computed values, the file readers' messages, and the command line end to end."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from ctxir.classify.classifiers import (
    K_GRID,
    CentroidClassifier,
    KnnClassifier,
    LogRegClassifier,
    ZeroShotClassifier,
    choose_k,
    fit_projection,
    label_vectors_for,
    sample_per_class,
    select_zero_shot,
    vocabulary_words,
)
from ctxir.classify.cli import evaluate_predictions, few_shot, main, mcnemar
from ctxir.data.labelled import Label, load_folder, load_labelled, load_labels
from ctxir.types import CtxirError


def clusters(n_per_class: int = 30, spread: float = 0.15, seed: int = 0, dim: int = 16):
    """Three well-separated Gaussian clusters around orthogonal centres, as unit vectors, with their labels."""
    rng = np.random.default_rng(seed)
    centres = np.eye(dim)[:3]
    x, y = [], []
    for name, centre in zip(("sports", "world", "tech"), centres, strict=True):
        points = centre + spread * rng.standard_normal((n_per_class, dim))
        x.append(points)
        y += [name] * n_per_class
    x = np.concatenate(x).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True), y


class KeywordEncoder:
    """A stand-in bi-encoder: one dimension per keyword, so a text's vector points at the keywords it contains."""

    cache = None
    KEYWORDS = ("football", "goal", "match", "election", "minister", "war", "software", "chip", "internet")

    def encode(self, texts):
        rows = []
        for text in texts:
            words = text.lower().replace(".", " ").split()
            v = np.array([words.count(k) for k in self.KEYWORDS], dtype=np.float32) + 0.01
            rows.append(v / np.linalg.norm(v))
        return np.array(rows, dtype=np.float32).reshape(len(rows), len(self.KEYWORDS))


# ---------------------------------------------------------------- classifiers on embeddings


@pytest.mark.parametrize(
    "make",
    [
        lambda: KnnClassifier(k=5),
        lambda: KnnClassifier(k=3, weights="distance"),
        CentroidClassifier,
        LogRegClassifier,
    ],
)
def test_hand_built_clusters_are_classified_right(make):
    train_x, train_y = clusters(seed=0)
    test_x, test_y = clusters(n_per_class=20, seed=1)
    classifier = make().fit_embeddings(train_x, train_y)
    assert classifier.classes == ["sports", "tech", "world"]
    assert classifier.predict_labels(test_x) == test_y
    predictions = classifier.predict_embeddings(test_x[:3], neighbours=2)
    assert [p.label for p in predictions] == test_y[:3]
    assert set(predictions[0].scores) == {"sports", "tech", "world"}
    assert max(predictions[0].scores, key=predictions[0].scores.get) == "sports"
    assert all(n.label == "sports" for n in predictions[0].neighbours) and len(predictions[0].neighbours) == 2


def test_knn_equals_a_brute_force_count():
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((60, 8)).astype(np.float32)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    labels = rng.integers(0, 4, 60)
    queries = rng.standard_normal((25, 8)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    for k in (1, 5, 15):
        votes = KnnClassifier(k=k).fit_embeddings(ref, [str(x) for x in labels]).scores_embeddings(queries)
        for q in range(25):
            sims = [float(queries[q] @ ref[i]) for i in range(60)]
            nearest = sorted(range(60), key=lambda i: -sims[i])[:k]
            count = Counter(int(labels[i]) for i in nearest)
            assert votes[q].tolist() == pytest.approx([count[c] / k for c in range(4)])
            classifier = KnnClassifier(k=k).fit_embeddings(ref, [str(x) for x in labels])
            predicted = classifier.predict_labels(queries[q : q + 1])[0]
            best = max(count.values())
            tied = [c for c in count if count[c] == best]
            # ties go to the class whose neighbours are more similar in sum
            expected = max(tied, key=lambda c: sum(sims[i] for i in nearest if labels[i] == c))
            assert predicted == str(expected)


def test_distance_weighted_vote_follows_the_closer_neighbour():
    ref = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]], dtype=np.float32)  # one "a" near, two "b" far
    query = np.array([[0.99, 0.141]], dtype=np.float32)
    query /= np.linalg.norm(query)
    assert KnnClassifier(k=3).fit_embeddings(ref, ["a", "b", "b"]).predict_labels(query) == ["b"]
    assert KnnClassifier(k=3, weights="distance").fit_embeddings(ref, ["a", "b", "b"]).predict_labels(
        query
    ) == ["a"]


def noisy(labels, every: int = 4):
    """``labels`` with every ``every``-th one moved to the next class: 1 nearest neighbour copies that noise, a vote
    of many outvotes it."""
    names = sorted(set(labels))
    return [names[(names.index(y) + 1) % len(names)] if i % every == 0 else y for i, y in enumerate(labels)]


def test_choose_k_prefers_a_vote_when_labels_are_noisy():
    x, y = clusters(n_per_class=60)
    k, table = choose_k(x, noisy(y))
    assert [row["k"] for row in table] == list(K_GRID) and {row["folds"] for row in table} == {5}
    score = {row["k"]: row["cv_accuracy"] for row in table}
    assert k >= 10 and score[k] == max(score.values())
    assert score[1] < score[k] - 0.15  # one neighbour copies a wrong label a quarter of the time
    assert all(0 < row["cv_macro_f1"] <= 1 for row in table)


def test_choose_k_equals_fitting_each_fold_and_keeps_the_smallest_of_equals():
    from sklearn.model_selection import StratifiedKFold

    x, y = clusters(n_per_class=30, spread=0.6, seed=2)
    _, table = choose_k(x, y, candidates=(1, 5), folds=3, weights="distance")
    labels = np.array(y)
    for row in table:
        right = 0
        for fit, held in StratifiedKFold(3, shuffle=True, random_state=0).split(x, labels):
            knn = KnnClassifier(k=row["k"], weights="distance").fit_embeddings(x[fit], labels[fit])
            right += int(np.sum(np.array(knn.predict_labels(x[held])) == labels[held]))
        assert row["cv_accuracy"] == round(right / len(y), 4)
    assert (
        choose_k(*clusters(), candidates=(5, 1, 3))[0] == 1
    )  # all perfect on clean clusters: the smallest k


def test_choose_k_needs_two_examples_of_each_class_and_skips_too_large_k():
    x, y = clusters(n_per_class=4)
    _, table = choose_k(x, y, candidates=(1, 3, 25))
    assert [row["k"] for row in table] == [1, 3] and table[0]["folds"] == 4  # 4 per class: 4 folds of 9 rows
    with pytest.raises(CtxirError, match=r"class 'tech' has 1: add examples, or give k yourself \(--k 5"):
        choose_k(x[:9], y[:9])
    with pytest.raises(CtxirError, match=r"at least 2 classes, got \['sports'\]"):
        choose_k(x[:4], y[:4])


def test_logreg_probabilities_sum_to_one():
    x, y = clusters()
    scores = LogRegClassifier().fit_embeddings(x, y).scores_embeddings(x[:5])
    assert scores.shape == (5, 3) and np.allclose(scores.sum(axis=1), 1.0)


def test_zero_shot_on_separable_toy_labels():
    encoder = KeywordEncoder()
    labels = [
        Label("sports", "football goal match"),
        Label("politics", "election minister war"),
        Label("technology", "software chip internet"),
    ]
    texts = [
        "The football match ended with a late goal.",
        "The minister called an election.",
        "A new chip makes the internet faster.",
        "Software for the football match.",
    ]
    expected = ["sports", "politics", "technology", "sports"]
    classifier = ZeroShotClassifier(encoder, labels, template="{description}")
    assert [p.label for p in classifier.predict(texts)] == expected
    # the bare names share no keyword with the texts: every label scores the same, so the template matters
    bare = ZeroShotClassifier(encoder, labels, template="{label}").scores_embeddings(encoder.encode(texts))
    assert np.allclose(bare, bare[:, :1])
    vectors = label_vectors_for(encoder, labels, ("{label}", "{description}"))
    best, table = select_zero_shot(labels, encoder.encode(texts), expected, vectors)
    assert best["template"] == "{description}" and best["train_accuracy"] == 1.0
    assert [row["template"] for row in table] == ["{label}", "{description}"]


def test_zero_shot_refuses_a_template_without_a_label():
    with pytest.raises(CtxirError, match="names no label"):
        ZeroShotClassifier(KeywordEncoder(), ["a", "b"], template="This text is about it.")


def test_label_projection_recovers_a_linear_map_and_keeps_separable_labels():
    rng = np.random.default_rng(0)
    s = rng.standard_normal((200, 6))
    true = rng.standard_normal((6, 4))
    assert np.allclose(fit_projection(s, s @ true, ridge=1e-6), true, atol=1e-4)
    # through an invertible map, cosine order is not kept in general, but clusters at the labels' own vectors are
    x, y = clusters(dim=6)
    labels = np.eye(6, dtype=np.float32)[[0, 2, 1]]  # sports, tech, world centres
    projection = np.linalg.qr(rng.standard_normal((6, 6)))[0].astype(np.float32)  # a rotation
    zs = ZeroShotClassifier(None, ["sports", "tech", "world"], "{label}", projection, labels)
    assert zs.predict_labels(x) == y


def test_vocabulary_words_are_frequent_whole_words(minilm):
    words = vocabulary_words(minilm.tokenizer, 8)
    assert [w for w, _ in words][:4] == ["the", "of", "and", "in"]
    assert all(w.isalpha() and len(w) > 1 for w, _ in words)


# ---------------------------------------------------------------- metrics


def test_metrics_by_hand():
    y_true = ["a", "a", "a", "b", "b", "c"]
    y_pred = ["a", "a", "b", "b", "c", "c"]
    m = evaluate_predictions(y_true, y_pred, ["a", "b", "c"])
    assert m["accuracy"] == pytest.approx(4 / 6)
    # F1: a = 2·1·(2/3)/(1+2/3) = 0.8, b = 0.5, c = 2·0.5·1/1.5 = 2/3
    assert m["macro_f1"] == pytest.approx((0.8 + 0.5 + 2 / 3) / 3)
    assert m["confusion_matrix"]["matrix"] == [[2, 1, 0], [0, 1, 1], [0, 0, 1]]
    assert m["report"]["a"]["recall"] == pytest.approx(2 / 3)


def test_mcnemar_counts_discordant_pairs():
    y = ["a"] * 20
    a = ["a"] * 15 + ["b"] * 5
    b = ["a"] * 10 + ["b"] * 9 + ["a"]
    r = mcnemar(y, a, b)
    assert (r["a_only"], r["b_only"]) == (5, 1)
    assert r["pvalue"] == pytest.approx(14 / 64)  # two-sided binomial, 6 trials, 1 success: 2·(1+6)/2^6
    assert mcnemar(y, a, a)["pvalue"] == 1.0


def test_sample_per_class_and_few_shot():
    x, y = clusters(n_per_class=40)
    rows = sample_per_class(y, 8, seed=4)
    assert Counter(y[i] for i in rows) == {"sports": 8, "world": 8, "tech": 8}
    assert rows != sample_per_class(y, 8, seed=5)
    test_x, test_y = clusters(n_per_class=10, seed=9)
    result = few_shot(x, y, test_x, test_y, ["knn-3", "logreg"], shots=4, seeds=3)
    assert result["methods"]["knn-3"]["accuracy"] == {"mean": 1.0, "std": 0.0}
    assert len(result["methods"]["logreg"]["per_seed"]) == 3


# ---------------------------------------------------------------- files


def test_load_labelled_csv_and_jsonl(tmp_path):
    (tmp_path / "a.csv").write_text('label,text,source\nsports,"Goal, late",x\nworld,Election day,y\n')
    assert load_labelled(tmp_path / "a.csv") == [("Goal, late", "sports"), ("Election day", "world")]
    (tmp_path / "a.jsonl").write_text('{"text": "Goal", "label": 2}\n\n{"text": "Vote", "label": "w"}\n')
    assert load_labelled(tmp_path / "a.jsonl") == [("Goal", "2"), ("Vote", "w")]


@pytest.mark.parametrize(
    "name, content, message",
    [
        (
            "b.csv",
            "text,category\nGoal,sports\n",
            "line 1: the header row must name the columns 'text', 'label'",
        ),
        ("b.csv", "text,label\nGoal,sports\nVote\n", "line 3: expected 2 fields"),
        ("b.csv", "text,label\nGoal,sports\nVote,\n", "line 3: expected a non-empty 'label'"),
        ("b.jsonl", '{"text": "Goal", "label": "s"}\n{"text": "Vote"}\n', 'line 2: .*add the "label" field'),
        ("b.jsonl", '{"text": "Goal", "label": "s"}\nnot json\n', "line 2: expected a JSON object"),
        ("b.jsonl", '{"text": ["Goal"], "label": "s"}\n', "line 1: expected 'text' as text"),
        ("b.txt", "Goal\n", "unsupported file type '.txt'"),
        ("b.csv", "text,label\n", "holds no labelled rows"),
    ],
)
def test_bad_labelled_files_name_the_line(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(CtxirError, match=message):
        load_labelled(tmp_path / name)


def test_load_labels(tmp_path):
    (tmp_path / "l.csv").write_text("label,description\nWorld,world news\nSports,\n")
    assert load_labels(tmp_path / "l.csv") == [Label("World", "world news"), Label("Sports", "")]
    (tmp_path / "l.txt").write_text("World\nSports\n\n")
    assert [label.name for label in load_labels(tmp_path / "l.txt")] == ["World", "Sports"]
    (tmp_path / "d.txt").write_text("World\nWorld\n")
    with pytest.raises(CtxirError, match="more than once"):
        load_labels(tmp_path / "d.txt")
    with pytest.raises(CtxirError, match="File not found"):
        load_labels(tmp_path / "missing.csv")


def test_load_folder(tmp_path):
    with pytest.raises(CtxirError, match=r"needs train\*.csv and test.csv"):
        load_folder(tmp_path)
    (tmp_path / "train_subset.csv").write_text("text,label\n")
    (tmp_path / "test.csv").write_text("text,label\n")
    assert load_folder(tmp_path) == (tmp_path / "train_subset.csv", tmp_path / "test.csv")


# ---------------------------------------------------------------- command line


SPORTS = [
    "The team won the football match.",
    "A late goal decided the cup final.",
    "The striker scored twice.",
    "Tennis star wins the open title.",
    "The coach praised his players after the game.",
    "Olympic sprinter breaks the world record.",
]
MONEY = [
    "Shares fell as the bank cut its profit forecast.",
    "The company reported higher quarterly earnings.",
    "Oil prices rose on the stock market.",
    "The central bank raised interest rates.",
    "Investors sold technology stocks.",
    "The retailer's sales grew by five percent.",
]


def _write(path, rows):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def test_cli_end_to_end(tmp_path, minilm_path, capsys):
    _write(tmp_path / "train.csv", [(t, "Sports") for t in SPORTS[:4]] + [(t, "Business") for t in MONEY[:4]])
    _write(tmp_path / "test.csv", [(t, "Sports") for t in SPORTS[4:]] + [(t, "Business") for t in MONEY[4:]])
    out = tmp_path / "metrics.json"
    code = main(
        [
            "--data",
            str(tmp_path),
            "--model",
            str(minilm_path),
            "--k",
            "1,3",
            "--shots",
            "1,2",
            "--seeds",
            "2",
            "--few-shot-methods",
            "knn-1,logreg",
            "--projection-words",
            "300",
            "--device",
            "cpu",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--output",
            str(out),
        ]
    )
    assert code == 0
    record = json.loads(out.read_text())
    assert set(record["methods"]) == {"zero-shot", "knn-1", "knn-3", "centroid", "logreg"}
    for name, result in record["methods"].items():
        assert result["accuracy"] == 1.0, name  # 4 obvious test texts
        assert result["confusion_matrix"]["labels"] == ["Business", "Sports"]
    zero = record["methods"]["zero-shot"]["config"]
    assert (
        zero["chosen_on"] == "train accuracy" and len(zero["candidates"]) == 3 * 2
    )  # 3 templates × projection
    assert len(record["paired"]) == 10 and record["paired"][0]["test"].startswith("McNemar")
    assert [r["shots"] for r in record["few_shot"]] == [1, 2]
    assert set(record["few_shot"][1]["methods"]) == {"knn-1", "logreg"}
    assert record["throughput"]["encode_texts_per_second"] > 0


def test_cli_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "test.csv").write_text("text,label\nGoal\n")
    assert main(["--test", str(tmp_path / "test.csv"), "--method", "knn"]) == 2
    assert "--train is missing" in capsys.readouterr().err
    assert main(["--test", str(tmp_path / "test.csv"), "--method", "svm"]) == 2
    assert "--method 'svm' is not known" in capsys.readouterr().err
    _write(tmp_path / "train.csv", [("Goal", "s"), ("Vote", "w")])
    assert (
        main(
            [
                "--train",
                str(tmp_path / "train.csv"),
                "--test",
                str(tmp_path / "test.csv"),
                "--method",
                "knn",
                "--model",
                "missing-model-xyz",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "test.csv line 2: expected 2 fields" in err and "Traceback" not in err


@pytest.fixture
def toy_vectors(tmp_path, monkeypatch):
    """--data with noisy training labels over hand-made cluster vectors, which the command line then uses in place
    of an encoder's: the choice of k without a model."""
    import ctxir.classify.cli

    train_x, train_y = clusters(n_per_class=60)
    test_x, test_y = clusters(n_per_class=20, seed=1)
    train = [(f"train {i}", y) for i, y in enumerate(noisy(train_y))]
    test = [(f"test {i}", y) for i, y in enumerate(test_y)]
    _write(tmp_path / "train.csv", train)
    _write(tmp_path / "test.csv", test)

    def embed(args, train_rows, test_rows):
        rows = {t: v for (t, _), v in zip(train + test, np.concatenate([train_x, test_x]), strict=True)}
        vectors = [np.stack([rows[t] for t, _ in part]) for part in (train_rows, test_rows)]
        return SimpleNamespace(config={"weights": "hand-made vectors"}), 0, 1.0, *vectors

    monkeypatch.setattr(ctxir.classify.cli, "_embed", embed)
    return tmp_path


def test_cli_knn_chooses_k_on_the_training_file_by_default(toy_vectors, capsys):
    out = toy_vectors / "auto.json"
    assert main(["--data", str(toy_vectors), "--method", "knn", "--output", str(out)]) == 0
    [name] = json.loads(out.read_text())["methods"]
    config = json.loads(out.read_text())["methods"][name]["config"]
    assert name == f"knn-{config['k']}" and config["k"] >= 10
    assert config["chosen_on"] == "5-fold stratified cross-validation accuracy on --train"
    assert [row["k"] for row in config["candidates"]] == list(K_GRID)
    printed = capsys.readouterr().out
    assert "knn: k chosen by cross-validation on --train (accuracy): k=1 0." in printed
    assert f"→ k={config['k']}\n{name}: accuracy 1.0000" in printed  # the noise is in training labels only


def test_cli_an_explicit_k_is_used_as_given(toy_vectors, capsys):
    out = toy_vectors / "k1.json"
    assert main(["--data", str(toy_vectors), "--method", "knn", "--k", "1", "--output", str(out)]) == 0
    methods = json.loads(out.read_text())["methods"]
    assert list(methods) == ["knn-1"] and methods["knn-1"]["config"] == {"weights": "uniform"}
    assert methods["knn-1"]["accuracy"] < 1.0 and "chosen by cross-validation" not in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "abc", "", "1,,5", "auto,5", "-3", "2.5", "²", "10001"])
def test_cli_a_bad_k_names_the_flag_and_what_is_valid(tmp_path, capsys, value):
    assert main(["--test", str(tmp_path / "test.csv"), "--method", "knn", "--k", value]) == 2
    err = capsys.readouterr().err
    assert (
        f"--k {value!r} is not valid: use auto (k chosen by cross-validation on --train) or a comma list of "
        "whole numbers from 1 to 10000, e.g. --k 5 or --k 1,5,15"
        in err
        and "Traceback" not in err
    )


def test_cli_help_says_what_k_and_label_descriptions_do(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "auto chooses one of 1,3,5,10,15,25 by 5-fold stratified cross-validation accuracy on --train" in text
    )
    assert (
        "names alone gave 0.6796 accuracy, names with short descriptions (ctxir/assets/agnews_labels.csv) "
        "0.7714" in text
    )


def test_python_dash_m_ctxir_classify_is_the_same_command():
    """The issue's own spelling, ``python -m ctxir.classify --method knn``, runs ``ctxir classify`` (it used to stop
    with "'ctxir.classify' is a package and cannot be directly executed")."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ctxir.classify", "--k", "0"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "--k" in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "ctxir.classify", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: ctxir classify"), done.stdout[:200]


def test_cli_zero_shot_needs_no_training_file(tmp_path, minilm_path):
    _write(tmp_path / "test.csv", [(t, "Sports") for t in SPORTS[:3]] + [(t, "Business") for t in MONEY[:3]])
    (tmp_path / "labels.csv").write_text(
        "label,description\nSports,games and players\nBusiness,companies and markets\n"
    )
    out = tmp_path / "zero.json"
    assert (
        main(
            [
                "--test",
                str(tmp_path / "test.csv"),
                "--labels",
                str(tmp_path / "labels.csv"),
                "--method",
                "zero-shot",
                "--templates",
                "{description}",
                "--projection",
                "off",
                "--model",
                str(minilm_path),
                "--device",
                "cpu",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert record["methods"]["zero-shot"]["accuracy"] == 1.0
    assert record["methods"]["zero-shot"]["config"]["chosen_on"] == "first template (no --train)"
    assert record["data"]["classes"] == ["Sports", "Business"] and record["paired"] == []
