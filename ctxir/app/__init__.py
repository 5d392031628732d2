"""The ctxir Gradio app, one module per concern; ``app.py`` at the repository root is its entry point.

    config.py           AppConfig: the limits and model choices app.py's flags set; the Progress callback type
    models.py           AppModels: the models loaded once, any model by Hub id on demand (bounded ModelCache)
    corpus_index.py     CorpusIndex: one corpus with its retrievers; Indexing; UploadStore: the visitors' uploads
    state.py            AppState (models + the public corpus + the visitors' uploads), ViewResult
    text.py             messages and user text shown as typed (escaping), line splitting
    outputs.py          Outputs: the bounded folder of the files answers return, and the scripts pages share
    ui.py               what every tab shares: Ui context, callback guard, layout helpers, downloads
    gradio_fixes.py     every workaround of Gradio (and spaces), each with its version, symptom and test
    links.py            the link under a view's answer that reopens the tab with its inputs and runs it again
    figures.py          interactive Plotly figures and their standalone HTML export (presentation only)
    search.py           /search's logic: a query through a first stage and an optional re-ranker
    search_form.py      the forms' shared inputs: the Search form, prompt boxes, model radios and Load buttons
    search_tab.py       the Search tab: /search, /explain_result, /compare_pooling, /upload_corpus; /what_moved's panel
    what_moved.py       /what_moved: the documents a re-ranker moved most, and the words that drove each move
    pairs_tab.py        /score_pairs (and the pair's Explain action)
    explain_tab.py      /explain; the explanation panel the Search and Pair scoring tabs show in place
    embeddings_tab.py   /model_info, /token_embeddings; the Token embeddings tab, composing its four sub-tabs
    similarity.py       /layer_similarity, /sentence_similarity: a word across layers, whole sentences alike
    attention_tab.py    /attention
    report_tab.py       /failure_report, /failure_report_sample
    classify_tab.py     /classify
    api.py              what each public endpoint does, what its arguments mean (docstrings, MCP tool names)
    limits.py           Gradio's queue: the concurrency groups model views share
    blocks.py           build_app / build_demo: the tabs composed into one gr.Blocks
    first_view.py       FirstView: each tab's example answer, computed once, shown when a page opens

Each tab module holds its views' logic (functions over an ``AppState`` returning a ``ViewResult``, tested without
a server) and ``build(ui)``, whose callbacks call that logic. Nothing is imported here: ``state`` needs no gradio.
"""
