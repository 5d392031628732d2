"""One lock per model for passes that change a shared model while they run: ``model_lock``.

Integrated Gradients hooks a model's word embeddings for a whole explanation (the baseline pass, then Captum's
LayerIntegratedGradients), so a forward pass through the same model in another thread meanwhile reads the hooked
vectors: another input's, of another length ("The size of tensor a (29) must match the size of tensor b (57)"), or
of the same length and a silently wrong score. The app serves visitors at once and answers its first view in a
background thread, so every explanation and every torch scoring pass holds its model's lock. ONNX sessions read no
torch module and take none.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def model_lock(model) -> threading.RLock:
    """The lock of ``model``'s input embeddings (a sentence-transformers model, a transformers model, or a module).

    Keyed by the embeddings module, so two wrappers of one body (a cross-encoder and the CLS-LR ranker reading it)
    share one lock; re-entrant, so an explanation may score through the same model while it holds it.

    >>> import torch
    >>> emb = torch.nn.Embedding(4, 2)
    >>> model_lock(emb) is model_lock(emb), model_lock(emb) is model_lock(torch.nn.Embedding(4, 2))
    (True, False)
    """
    key = _input_embeddings(model)
    with _GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = threading.RLock()
        return lock


def _input_embeddings(model):
    import torch

    if isinstance(model, torch.nn.Embedding):
        return model
    body = model
    # a sentence-transformers model: its first module holds the transformers body
    with contextlib.suppress(TypeError, IndexError, KeyError, AttributeError):
        body = model[0].auto_model
    get = getattr(body, "get_input_embeddings", None)
    embeddings = get() if callable(get) else None
    return embeddings if embeddings is not None else model
