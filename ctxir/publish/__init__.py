"""Publishing: model cards and the Hugging Face Hub (the last step before the app).

cards.py         model cards written from the evaluation results
hub.py           stage, validate and push models, ``ctxir hub``
"""
