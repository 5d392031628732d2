"""Any model by Hub id, loaded on demand: two small models laid into a temporary Hugging Face cache as `hf download`
leaves them, the app offline (HF_HUB_OFFLINE=1). Load both by id, compare them beside the models loaded at start
(search, pair scoring, inspection), evict past the cache's count limit (the start's models pinned), and the
refusals: not in the cache while offline (naming the cache), remote code, a malformed id."""

from __future__ import annotations

import json
import shutil
import threading

import pytest

from ctxir.app.attention_tab import attention
from ctxir.app.config import AppConfig
from ctxir.app.embeddings_tab import model_info
from ctxir.app.explain_tab import explain_pair, explain_result
from ctxir.app.models import AppModels, MiB, ModelCache, model_bytes
from ctxir.app.pairs_tab import score_pairs
from ctxir.app.search import search
from ctxir.app.state import AppState
from ctxir.app.what_moved import what_moved
from ctxir.data.demo import demo_corpus
from ctxir.encoders.on_demand import fetch_model
from ctxir.types import CtxirError
from tests import tiny_models
from tests.conftest import APP_TOPICS, TINY_VOCAB

CROSS, BI, NEEDS_CODE = "test-org/tiny-cross-encoder", "test-org/tiny-bi-encoder", "test-org/needs-code"
DOCS = ["the river bank", "the savings bank", "otters swim"]


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A Hugging Face cache holding a tiny cross-encoder, a tiny bi-encoder and a model whose config maps classes
    to its repository's code (auto_map), each in the layout `hf download` leaves."""
    root = tmp_path_factory.mktemp("any-model")
    cache = root / "hub"
    tiny_models.lay_into_hf_cache(
        tiny_models.save_tiny_cross_encoder(root / "cross", TINY_VOCAB), cache, CROSS
    )
    bi = tiny_models.save_tiny_bert(root / "bi", TINY_VOCAB)
    tiny_models.lay_into_hf_cache(bi, cache, BI, revision="1" * 40)
    code = root / "code"
    shutil.copytree(bi, code)
    config = json.loads((code / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_custom.CustomModel"}
    (code / "config.json").write_text(json.dumps(config))
    (code / "modeling_custom.py").write_text("raise SystemExit('remote code ran')\n")
    tiny_models.lay_into_hf_cache(code, cache, NEEDS_CODE, revision="2" * 40)
    return cache


@pytest.fixture
def offline_cache(hub_cache, monkeypatch):
    """The cache above as huggingface_hub's, offline (HF_HUB_OFFLINE=1; huggingface_hub read both at import)."""
    from huggingface_hub import constants

    from ctxir.encoders.models import resolve_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    resolve_model.cache_clear()
    yield hub_cache
    resolve_model.cache_clear()


@pytest.fixture
def state(offline_cache, tiny_bert_dir, _tiny_st):
    """An app whose start loaded the tiny bi-encoder and a tiny cross-encoder (the "shipped" ones), its cache of
    models loaded on demand holding at most 2."""
    from sentence_transformers import CrossEncoder

    shipped_cross = CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu")
    models = AppModels.from_objects(_tiny_st, str(tiny_bert_dir), cross_encoder=shipped_cross)
    config = AppConfig(device="cpu", max_extra_models=2, max_extra_mb=64, allow_model_paths=False)
    models.configure(config)
    corpus = {i: d for i, d in demo_corpus().items() if i.startswith(APP_TOPICS)}
    return AppState(models, config, corpus, "demo-subset", cache=None)


def test_two_models_by_hub_id_compare_beside_the_shipped_ones(state):
    pairs = score_pairs(state, "river bank", DOCS, models=f"{CROSS}, {BI}")
    row = pairs.rows[0]
    # the start's columns and one per model loaded by id, each scored and ranked
    for column in ("cross_encoder_score", "bi_encoder_cosine", f"{CROSS} score", f"{BI} cosine"):
        assert isinstance(row[column], float), column
    assert sorted(r[f"{CROSS} rank"] for r in pairs.rows) == [1, 2, 3]
    assert pairs.data["models"] == {CROSS: "cross-encoder", BI: "bi-encoder"}
    assert row[f"{CROSS} score"] != row["cross_encoder_score"]  # another model, not the shipped one again

    shipped = search(state, "river bank", first_stage="bm25", reranker="cross-encoder", k=3)
    by_id = search(state, "river bank", first_stage="bm25", reranker=CROSS, k=3)
    assert by_id.data["reranker"] == CROSS and all(h["rerank_score"] is not None for h in by_id.rows)
    assert [h["rerank_score"] for h in by_id.rows] != [h["rerank_score"] for h in shipped.rows]

    info = model_info(state, CROSS)  # the Embeddings and Attention tabs read any model by id too
    assert info.data["model"] == CROSS and info.data["layers"] == 2
    assert attention(state, "river bank", model=BI).data["tokens"][0] == "[CLS]"


def test_what_moved_explains_a_reranker_loaded_by_id(state):
    """What moved shares the Search tab's form: a re-ranker typed there by Hub id re-ranks and is explained (integrated
    gradients of the cross-encoder loaded on demand); a name that is neither a kind nor an id is refused."""
    moved = what_moved(state, "river bank", first_stage="bm25", reranker=CROSS, k=3, depth=5, n=2)
    assert moved.data["reranker"] == CROSS and moved.data["candidates"] == 5 and moved.data["movers"]
    for mover in moved.data["movers"]:
        assert mover["explanation"]["tokens"] and len(mover["explanation"]["attributions"]) == len(
            mover["explanation"]["tokens"]
        )
    with pytest.raises(CtxirError, match=r"re-ranker.*Hub id"):
        what_moved(state, "river bank", first_stage="bm25", reranker="colbert", k=3)


def test_a_result_is_explained_by_the_reranker_that_ranked_it_also_by_id(state):
    """Explain with "auto" on a search result: the search's re-ranker (here one loaded by Hub id), not the first one
    loaded at start; the Explain tab takes an id too; a re-ranker kind that is not loaded leaves "auto" as it was."""
    hit = search(state, "river bank", first_stage="bm25", reranker=CROSS, k=3).rows[0]
    by_id = explain_result(state, "river bank", None, hit["doc_id"], "auto", reranker=CROSS)
    shipped = explain_result(state, "river bank", None, hit["doc_id"], "auto", reranker="cross-encoder")
    assert by_id.data["reranker"] == CROSS and shipped.data["reranker"] == "cross-encoder"
    assert by_id.data["cross_encoder"]["score"] != shipped.data["cross_encoder"]["score"]
    assert f"{CROSS} (cross-encoder) score" in by_id.text
    assert explain_pair(state, "river bank", DOCS[0], CROSS).data["reranker"] == CROSS
    assert explain_result(state, "river bank", None, hit["doc_id"], reranker="cls-lr").data["reranker"] == (
        "cross-encoder"
    )
    assert explain_pair(state, "river bank", DOCS[0], "bi-encoder", reranker=CROSS).data["reranker"] is None
    with pytest.raises(CtxirError, match=r"model 'colbert'.*Hub id"):
        explain_pair(state, "river bank", DOCS[0], "colbert")


def test_past_the_count_limit_the_least_recently_used_goes_and_the_shipped_stay(state):
    models = state.models
    score_pairs(state, "q", DOCS, models=CROSS)  # 1: the cross-encoder
    score_pairs(state, "q", DOCS, models=BI)  # 2: the bi-encoder
    score_pairs(
        state, "q", DOCS, models=CROSS
    )  # the cross-encoder used again: the bi-encoder is now the oldest
    model_info(state, CROSS)  # 3: the cross-encoder's body for inspection, past the limit of 2
    assert models.cache.loaded() == [("cross-encoder", CROSS), ("inspect", CROSS)]
    assert models.cache.evicted == [("bi-encoder", BI)]
    assert ("bi-encoder", models.bi_encoder_name) in models.cache.loaded(pinned=True)
    assert model_info(state, "bi-encoder").data["layers"] == 2  # the shipped ones are still served
    assert sum(model_bytes(models.cache.get(key)) for key in models.cache.loaded()) <= 64 * MiB


def test_a_model_bigger_than_the_memory_limit_is_refused(state):
    state.models.cache.max_bytes = 1024  # the tiny cross-encoder holds ~100 KB of weights
    with pytest.raises(CtxirError, match=r"re-ranker 'test-org/tiny-cross-encoder' needs .* MiB, more than"):
        search(state, "river bank", first_stage="bm25", reranker=CROSS, k=3)
    assert state.models.cache.loaded() == []


def test_offline_an_id_not_in_the_cache_is_refused_naming_the_cache(state, offline_cache):
    with pytest.raises(CtxirError) as err:
        score_pairs(state, "q", DOCS, models="test-org/not-downloaded")
    message = str(err.value)
    assert "models 'test-org/not-downloaded' is not in the local Hugging Face cache" in message
    assert str(offline_cache) in message and "HF_HUB_OFFLINE=1" in message and "hf download" in message


def test_remote_code_is_refused_unless_the_deployer_allowed_it(state):
    with pytest.raises(
        CtxirError, match=r"model 'test-org/needs-code' needs code from its repository .*auto_map"
    ):
        model_info(state, NEEDS_CODE)
    with pytest.raises(CtxirError, match="--allow-remote-code, or CTXIR_TRUST_REMOTE_CODE=1"):
        search(state, "q", first_stage="bm25", reranker=NEEDS_CODE)
    assert state.models.cache.loaded() == []
    # allowed by the deployer, it is fetched for loading (not loaded here: its code would run)
    assert fetch_model(NEEDS_CODE, allow_remote_code=True).endswith("2" * 40)


def test_the_deployer_sets_the_limits_and_remote_code_by_flag_or_environment(monkeypatch):
    import app
    from ctxir.cli import parse_args

    def config(*argv):
        return app.config_from_args(parse_args(app.app_args_class(), list(argv)))

    assert (config().allow_remote_code, config().max_extra_models, config().max_extra_mb) == (False, 2, 1024)
    assert config("--allow-remote-code").allow_remote_code is True
    assert config("--max-extra-models", "0", "--max-extra-mb", "300").max_extra_models == 0
    monkeypatch.setenv("CTXIR_TRUST_REMOTE_CODE", "1")
    monkeypatch.setenv("CTXIR_MAX_EXTRA_MODELS", "5")
    assert (config().allow_remote_code, config().max_extra_models) == (True, 5)
    assert config().allow_model_paths is True
    monkeypatch.setenv("SPACE_ID", "you/ctxir")  # on a Space a typed path would name the server's files
    assert config().allow_model_paths is False


def test_bad_names_say_which_argument_and_what_to_do(state, tmp_path):
    with pytest.raises(CtxirError, match=r"re-ranker 'colbert' is not known: use one of 'none', .*Hub id"):
        search(state, "q", first_stage="bm25", reranker="colbert")
    with pytest.raises(CtxirError, match=r"models 'not an id' is not a Hub id: type a Hub id such as"):
        score_pairs(state, "q", DOCS, models="not an id")
    with pytest.raises(CtxirError, match=r"models lists 3 models .* at most 2"):
        score_pairs(state, "q", DOCS, models="a/b, c/d, e/f")
    with pytest.raises(CtxirError, match=r"re-ranker 'test-org/tiny-bi-encoder' is a bi-encoder"):
        search(state, "q", first_stage="bm25", reranker=BI)
    # on a Space (allow_model_paths off) a folder of the server is no model name
    with pytest.raises(CtxirError, match=r"models .* is not a Hub id: .*this app loads no local paths"):
        score_pairs(state, "q", DOCS, models=str(tmp_path))


def test_one_load_at_a_time(state):
    """Two visitors asking at once: the second waits for the first load, then finds the model loaded."""
    cache, results = state.models.cache, []
    with cache.loading():  # a load in progress
        worker = threading.Thread(
            target=lambda: results.append(state.models.on_demand(CROSS, "cross-encoder")), daemon=True
        )
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and results == []  # waiting for the lock
    worker.join(60)
    assert len(results) == 1 and cache.loaded() == [("cross-encoder", CROSS)]


def test_the_cache_keeps_the_most_recently_used_and_the_pinned():
    cache = ModelCache(max_models=2, max_bytes=10 * MiB, measure=lambda value: MiB)
    cache.pin("shipped", "the start's model")
    for name in ("a", "b", "c"):
        cache.load(name, lambda name=name: f"model {name}")
    assert (cache.loaded(), cache.evicted, cache.loaded(pinned=True)) == (["b", "c"], ["a"], ["shipped"])


def test_model_cache_limits_are_checked():
    with pytest.raises(CtxirError, match="max_models=-1"):
        ModelCache(max_models=-1)
    cache = ModelCache(max_models=0)
    with pytest.raises(CtxirError, match="loads no model on demand"):
        cache.load("a", lambda: object())


def test_turned_off_by_the_deployer_nothing_is_fetched(state, monkeypatch):
    import ctxir.app.models

    state.models.cache = ModelCache(max_models=0)
    monkeypatch.setattr(ctxir.app.models, "fetch_model", lambda *a, **k: pytest.fail("fetched"))
    with pytest.raises(
        CtxirError,
        match=r"models 'test-org/tiny-bi-encoder' cannot be loaded: this app loads no model on demand",
    ):
        score_pairs(state, "q", DOCS, models=BI)


# ---------------------------------------------------------------- the deployer's flags take the same ids


def deployer_config(tiny_bert_dir, cross_encoder: str) -> AppConfig:
    return AppConfig(
        bi_encoder=str(tiny_bert_dir),
        cross_encoder=cross_encoder,
        cls_lr="none",
        rerankers={"sts-cross-encoder": "none"},
        device="cpu",
    )


def test_a_deployers_hub_id_reranker_is_downloaded_at_start_when_online(
    offline_cache, tiny_bert_dir, tmp_path, monkeypatch
):
    """CTXIR_CROSS_ENCODER=org/name on a fresh Space: not in the cache, so the app downloads it (here the "Hub" lays a
    staged copy into the cache, as `hf download` would) and offers it; before, it came up "unavailable"."""
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    real, downloads = huggingface_hub.snapshot_download, []
    staged = tiny_models.save_tiny_cross_encoder(tmp_path / "fresh", TINY_VOCAB)

    def hub(repo_id, *args, local_files_only=False, **kwargs):
        if not local_files_only and repo_id == "test-org/fresh-cross-encoder":
            downloads.append(repo_id)
            tiny_models.lay_into_hf_cache(staged, offline_cache, repo_id, revision="3" * 40)
        if not local_files_only and repo_id != "test-org/fresh-cross-encoder":
            raise huggingface_hub.errors.LocalEntryNotFoundError(f"no network in this test ({repo_id})")
        return real(repo_id, *args, local_files_only=True, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub)
    models = AppModels.load(deployer_config(tiny_bert_dir, "test-org/fresh-cross-encoder"))
    assert downloads == ["test-org/fresh-cross-encoder"]
    assert models.loaded == ["cross-encoder"], models.unavailable
    assert models.rerankers["cross-encoder"].score_pairs("river bank", DOCS).shape == (3,)
    assert ("cross-encoder", "test-org/fresh-cross-encoder") in models.cache.loaded(pinned=True)


def test_offline_a_deployers_hub_id_not_in_the_cache_is_unavailable_naming_the_cache(
    offline_cache, tiny_bert_dir
):
    models = AppModels.load(deployer_config(tiny_bert_dir, "test-org/not-downloaded"))
    assert models.loaded == []
    why = models.why_not("cross-encoder")
    assert "'test-org/not-downloaded' is neither a local folder nor in the local Hugging Face cache" in why
    assert str(offline_cache) in why and "HF_HUB_OFFLINE=1" in why
    # and a deployer's id that is in the cache loads by that id, offline
    assert AppModels.load(deployer_config(tiny_bert_dir, CROSS)).loaded == ["cross-encoder"]


def test_the_configs_rerank_backend_is_the_one_its_cross_encoders_score_with(
    offline_cache, tiny_bert_dir, monkeypatch, tmp_path
):
    """``AppConfig.rerank_backend`` (app.py's --rerank-backend) reaches the cross-encoders loaded at start."""
    from dataclasses import replace

    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path))  # the ONNX export made at start goes there
    config = replace(deployer_config(tiny_bert_dir, CROSS), rerank_backend="onnx")
    assert AppModels.load(config).rerankers["cross-encoder"].backend == "onnx"


# ---------------------------------------------------------------- through the served app, as a client calls it


def test_a_client_compares_models_by_id_through_the_api(state):
    """gradio_client: /search's reranker and /score_pairs' models take Hub ids (the Radio passes an id through to
    the search, which loads it); a bad id comes back as the app's message, not Gradio's list of choices."""
    import app
    from tests.conftest import api_client, free_port

    demo = app.build_demo(state)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = api_client(f"http://127.0.0.1:{port}/", download_files=False)
        _, _, numbers = client.predict(
            "river bank", "demo-subset", "bm25", CROSS, 3, 10, "fused", api_name="/search"
        )
        assert numbers["reranker"] == CROSS and numbers["hits"][0]["rerank_score"] is not None
        scores = client.predict("river bank", "\n".join(DOCS), BI, api_name="/score_pairs")[-1]["scores"]
        assert all(isinstance(row[f"{BI} cosine"], float) for row in scores)
        with pytest.raises(Exception, match=r"re-ranker 'test-org/tiny-bi-encoder' is a bi-encoder"):
            client.predict("river bank", "demo-subset", "bm25", BI, 3, 10, "fused", api_name="/search")
        # "Explain with" passes an id through too (its Radio lists only what is loaded), and names a wrong one
        explained = client.predict("river bank", DOCS[0], CROSS, api_name="/explain")[-1]
        assert explained["reranker"] == CROSS and explained["cross_encoder"]["tokens"]
        doc_id = numbers["hits"][0]["doc_id"]
        explained = client.predict(
            "river bank", "demo-subset", doc_id, CROSS, "none", api_name="/explain_result"
        )
        assert explained[-1]["reranker"] == CROSS
        with pytest.raises(Exception, match=r"model 'colbert'.*Hub id"):
            client.predict("river bank", DOCS[0], "colbert", api_name="/explain")
        client.close()
    finally:
        demo.close()


@pytest.mark.parametrize("api", ["attention", "model_info", "token_embeddings", "layer_similarity"])
def test_after_a_view_loads_a_model_by_id_its_tabs_dropdown_offers_it(state, api):
    """The inspection tabs' model dropdowns take a typed id; once the view has loaded it, the dropdown lists it
    beside the models loaded at start (the page's step after the answer), so a visitor can switch back to it."""
    import app

    fns = list(app.build_demo(state).fns.values())
    [view] = [fn for fn in fns if fn.api_name == api]
    dropdown = view.inputs[0]  # each of these views takes its model first
    offers = [fn for fn in fns if fn.trigger_after == view._id and dropdown in fn.outputs]
    assert len(offers) == 1, f"/{api}: no step after the answer updates its model dropdown"
    assert BI not in str(offers[0].fn()["choices"])
    state.models.inspectable(BI)  # as the view does with the typed id
    choices = [c[1] if isinstance(c, tuple | list) else c for c in offers[0].fn()["choices"]]
    assert choices[-1] == BI and choices[0] == state.models.inspect_choices()[0]


def test_every_explain_with_offers_a_cross_encoder_loaded_by_id(state):
    """The three "Explain with" radios (Explain tab, Search results, Pair scoring) list a cross-encoder once it is
    loaded by id: the Explain tab's Load button loads it and selects it there; the Search tab's Load button and
    the step after a pair scoring that compared it offer it to the others."""
    import gradio as gr

    import app

    demo = app.build_demo(state)
    radios = [b for b in demo.blocks.values() if isinstance(b, gr.Radio) and b.label == "Explain with"]
    assert len(radios) == 3 and all(CROSS not in str(r.choices) for r in radios)
    fns = list(demo.fns.values())
    explain_tab_radio = next(r for r in radios if r.info and r.info.startswith("auto ="))
    load = [fn for fn in fns if fn.outputs == [explain_tab_radio]]  # the button's click and the box's submit
    assert len(load) == 2 and load[0].fn is load[1].fn
    load = load[0]
    update = load.fn(CROSS)
    assert update[0]["value"] == CROSS and CROSS in update[0]["choices"]
    with pytest.raises(gr.Error, match=r"model 'not an id'"):
        load.fn("not an id")
    # the Search tab's Load offers it to the search and to "Explain with" under its results
    search_load = next(fn for fn in fns if len(fn.outputs) == 2 and fn.outputs[1] in radios)
    choices = [u["choices"] for u in search_load.fn(CROSS)]
    assert CROSS in choices[0] and CROSS in choices[1]
    # Pair scoring: after an answer, its radio is refreshed with what is loaded now
    pair_radio = next(r for r in radios if r is not explain_tab_radio and r is not search_load.outputs[1])
    [after] = [fn for fn in fns if fn.outputs and fn.outputs[-1] is pair_radio]
    data = score_pairs(state, "river bank", DOCS, models=CROSS).data
    assert CROSS in after.fn(data, None)[-1]["choices"]
