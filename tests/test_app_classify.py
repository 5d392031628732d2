"""The Classify tab: its logic on the app state (zero-shot, few-shot from an uploaded file, limits, clear errors,
nothing kept between visitors), its event's API name and docstring, and (browser) the sample classified on a page
with its plots drawn."""

from __future__ import annotations

import csv

import pytest

from ctxir.app import classify_tab
from ctxir.app.classify_tab import MAX_EXAMPLES, MAX_TEXTS, classify_view, parse_labels, sample_inputs
from ctxir.types import CtxirError

pytestmark = pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")

TEXTS = ["The striker scored twice in the cup final.", "Shares fell after the bank cut its profit forecast."]


def write_examples(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return str(path)


EXAMPLES = [
    ("The goalkeeper saved a penalty.", "Sports"),
    ("The tennis champion won the title.", "Sports"),
    ("The company reported higher earnings.", "Business"),
    ("Oil prices rose on the markets.", "Business"),
]


def test_zero_shot_from_label_names(app_state):
    r = classify_view(app_state, "\n".join(TEXTS), "Sports\nBusiness")
    assert [row["prediction"] for row in r.rows] == ["Sports", "Business"]
    assert set(r.rows[0]) >= {"Sports", "Business", "score"}
    assert r.data["score"] == "cosine" and r.data["predictions"][0]["neighbours"] == []
    kinds = [p["kind"] for p in r.data["points"]]
    assert kinds.count("text") == 2 and kinds.count("label") == 2  # the label embeddings are on the map
    assert "2 texts classified by zero-shot" in r.text


@pytest.mark.parametrize("method", ["knn", "centroid", "logreg"])
def test_few_shot_from_an_uploaded_file(app_state, tmp_path, method):
    path = write_examples(tmp_path / "ex.csv", EXAMPLES)
    r = classify_view(app_state, TEXTS, "", path, method, k=3, projection="tsne")
    assert [row["prediction"] for row in r.rows] == ["Sports", "Business"]
    first = r.data["predictions"][0]["neighbours"]
    assert len(first) == 3 and first[0]["label"] == "Sports"
    assert r.extra_rows[0]["rank"] == 1
    assert len(r.data["points"]) == len(EXAMPLES) + len(TEXTS)


def test_zero_shot_with_examples_shows_their_neighbours(app_state, tmp_path):
    path = write_examples(tmp_path / "ex.csv", EXAMPLES)
    r = classify_view(
        app_state,
        TEXTS,
        "Sports: games and players\nBusiness: companies and markets",
        path,
        template="{description}",
    )
    assert [p["label"] for p in r.data["predictions"]] == ["Sports", "Business"]
    assert r.data["predictions"][1]["neighbours"][0]["label"] == "Business"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"texts": ""}, "texts is empty"),
        ({"texts": "\n".join(["a text"] * (MAX_TEXTS + 1))}, f"at most {MAX_TEXTS} are accepted"),
        ({"labels": ""}, "zero-shot needs label names"),
        ({"labels": "Sports"}, "labels needs at least 2"),
        ({"labels": "Sports\nSports"}, "more than once"),
        ({"method": "svm"}, "method 'svm' is not known"),
        ({"method": "knn"}, "knn needs labelled examples"),
        ({"template": "no placeholder here"}, "names no label"),
        ({"k": 0, "method": "zero-shot"}, "k must be a whole number from 1 to 50"),
    ],
)
def test_bad_input_gets_a_clear_message(app_state, kwargs, message):
    args = {"texts": "\n".join(TEXTS), "labels": "Sports\nBusiness", **kwargs}
    with pytest.raises(CtxirError, match=message):
        classify_view(app_state, **args)


def test_bad_and_oversized_example_files(app_state, tmp_path):
    (tmp_path / "bad.csv").write_text("text,label\nGoal,Sports\nno label here\n")
    with pytest.raises(CtxirError, match=r"bad\.csv line 3: expected 2 fields"):
        classify_view(app_state, TEXTS, "", str(tmp_path / "bad.csv"), "knn")
    big = write_examples(
        tmp_path / "big.csv", [(f"text {i}", "A" if i % 2 else "B") for i in range(MAX_EXAMPLES + 1)]
    )
    with pytest.raises(CtxirError, match=f"encodes at most {MAX_EXAMPLES:,}"):
        classify_view(app_state, TEXTS, "", big, "knn")
    one = write_examples(tmp_path / "one.csv", [("Goal", "Sports"), ("Match", "Sports")])
    with pytest.raises(CtxirError, match="only one label"):
        classify_view(app_state, TEXTS, "", one, "centroid")
    with pytest.raises(CtxirError, match="'Business' is not among the labels"):
        classify_view(app_state, TEXTS, "Sports\nWorld", write_examples(tmp_path / "e.csv", EXAMPLES))


def test_nothing_is_written_to_the_persistent_cache(app_state, tmp_path):
    before = sorted(app_state.cache.root.glob("*.npy")) if app_state.cache.root.exists() else []
    classify_view(app_state, TEXTS, "", write_examples(tmp_path / "ex.csv", EXAMPLES), "knn", k=1)
    after = sorted(app_state.cache.root.glob("*.npy")) if app_state.cache.root.exists() else []
    assert before == after


def test_parse_labels_with_descriptions():
    labels = parse_labels("Sci/Tech: science and technology\nWorld")
    assert [(label.name, label.description) for label in labels] == [
        ("Sci/Tech", "science and technology"),
        ("World", ""),
    ]


def test_sample_inputs(tmp_path):
    texts, labels, path = sample_inputs(tmp_path)
    assert labels.splitlines()[0].startswith("World: ")
    assert len(texts.splitlines()) in (4, 12)  # built-in sample, or 3 AG News test texts per class
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {row["label"] for row in rows} == {"World", "Sports", "Business", "Sci/Tech"}


def test_the_event_has_an_api_name_and_documented_arguments(app_state):
    import app

    demo = app.build_demo(app_state)
    [fn] = [f for f in demo.fns.values() if f.api_name == "classify"]
    doc = fn.fn.__doc__
    for argument in ("texts", "labels", "examples", "method", "k", "template", "projection"):
        assert f"    {argument}: " in doc
    assert classify_tab.MAX_TEXTS == 50


def test_the_api_gives_the_library_answer(app_state, serve, tmp_path):
    from gradio_client import handle_file

    import app
    from tests.conftest import api_client

    path = write_examples(tmp_path / "ex.csv", EXAMPLES)
    with serve(app.build_demo(app_state)) as url:
        client = api_client(url, download_files=False)
        summary, _table, _neighbours, data = client.predict(
            "\n".join(TEXTS), "", handle_file(path), "knn", 3, "{label}", "pca", api_name="/classify"
        )
        with pytest.raises(Exception, match="zero-shot needs label names"):
            client.predict("\n".join(TEXTS), "", None, "zero-shot", 3, "{label}", "pca", api_name="/classify")
    direct = classify_view(app_state, TEXTS, "", path, "knn", 3)
    assert data["predictions"] == direct.data["predictions"] and "classified by knn" in summary


@pytest.mark.browser
def test_the_sample_is_classified_in_a_browser(offline_page, app_state, serve):
    import app

    with serve(app.build_demo(app_state)) as url:
        page = offline_page()
        page.goto(url)
        page.get_by_role("tab", name="Classify").click()
        page.click("#classify-sample-button")
        page.wait_for_function(
            "() => document.querySelector('#classify-examples')?.innerText.includes('.csv')", timeout=60_000
        )
        page.wait_for_selector("input[value='knn']:checked", timeout=30_000)  # the sample switches to kNN
        page.click("#classify-button")
        page.wait_for_function(
            "() => (document.querySelector('#classify-summary')?.innerText || '')"
            ".includes('classified by knn')",
            timeout=180_000,
        )
        page.wait_for_selector("#classify-map .js-plotly-plot", timeout=60_000)
        page.wait_for_selector("#classify-bars .js-plotly-plot", timeout=60_000)
        assert page.locator("#classify-map .scatterlayer .point").count() >= 16
        assert "prediction" in page.inner_text("#classify-table")
        assert not page.context.blocked
        page.close()
