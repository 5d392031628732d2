"""Publishing: model cards and the Hugging Face Hub (the last step before the app).

model_types.py     the model types published (metrics.json's model_type): card template, Hub tags and library
metrics_file.py    the metrics.json contract a training run writes; the model's license from its training data
licenses.py        licenses as the Hub names them; the one a model trained on several sources carries
known_datasets.py  the datasets a card names: Hub copy, link, citation
cards.py           model cards rendered from metrics.json (front matter, model-index, body)
card_check.py      ``check_card``: refuse a card that disagrees with its metrics.json or whose figures mislead
weights_terms.py   LICENSES.md: the shipped weights' terms, derived from their training data (code is Apache-2.0)
model_folder.py    a trained model folder: its kind, its base model's license, the facts its card states
staging.py         stage a training output into the Hub repo's folder; validate that folder
standalone.py      repos that load without ctxir (full weights + heads' code); card snippets run as a Hub user
upload.py          upload a staged folder (``push``), or print the ``hf upload`` command
hub.py             ``ctxir hub push`` / ``validate``
"""
