"""Publishing: model cards and the Hugging Face Hub (the last step before the app).

    cards.py         model cards written from the evaluation results (was ``ctxir.cards``)
    hub.py           push/pull models, ``python -m ctxir.hub`` (was ``ctxir.hub``)
"""
