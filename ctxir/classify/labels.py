"""Zero-shot labels: prompt ``TEMPLATES``, label embeddings, Davison's label projection, the template choice."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from ctxir.classify.scoring import encode, fit_projection, zero_shot_scores
from ctxir.data.labelled import Label
from ctxir.types import CtxirError

# Prompt templates tried for zero-shot; the one used is chosen on training data (``select_zero_shot``), never on
# test: on AG News "This text is about {label}." gains 4 points over the bare name, on another set it loses 14.
TEMPLATES = (
    "{label}",
    "This text is about {label}.",
    "Topic: {label}.",
    "{label}: {description}",
    "This text is about {description}.",
)


def label_vectors_for(encoder, labels: Sequence[Label], templates: Sequence[str]) -> dict[str, np.ndarray]:
    """{template: (C, D) label embeddings}; templates using {description} only when some label has one."""
    described = any(label.description for label in labels)
    return {
        t: encode(encoder, [label.prompt(t) for label in labels])
        for t in templates
        if described or "{description}" not in t
    }


def select_zero_shot(
    encoder,
    labels: Sequence[Label],
    texts_embeddings: np.ndarray,
    text_labels: Sequence[str],
    templates: Sequence[str] = TEMPLATES,
    projection: np.ndarray | None = None,
    label_vectors: dict | None = None,
) -> tuple[dict, list[dict]]:
    """The (template, projection on/off) with the best accuracy on the given labelled texts — training data, never
    test — and every candidate's accuracy. Ties keep the first candidate (templates in order, projection off
    first)."""
    vectors = label_vectors or label_vectors_for(encoder, labels, templates)
    names = [label.name for label in labels]
    table = []
    for template, use_projection in itertools.product(
        vectors, (False, True) if projection is not None else (False,)
    ):
        scores = zero_shot_scores(texts_embeddings, vectors[template], projection if use_projection else None)
        predicted = [names[i] for i in scores.argmax(axis=1)]
        accuracy = float(np.mean([p == t for p, t in zip(predicted, text_labels, strict=True)]))
        table.append(
            {"template": template, "projection": use_projection, "train_accuracy": round(accuracy, 4)}
        )
    best = max(table, key=lambda row: row["train_accuracy"])  # max keeps the first of equals
    return best, table


def vocabulary_words(tokenizer, n: int) -> list[tuple[str, int]]:
    """The first ``n`` whole-word, alphabetic vocabulary entries of at least 2 letters, with their token ids, in id
    order: WordPiece vocabularies (BERT, MiniLM) are built most frequent first, so these are frequent words, as
    Davison's top-k word2vec words are."""
    special = set(tokenizer.all_special_ids)
    words = []
    for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        word = token.lstrip("▁Ġ")
        if token_id in special or token.startswith("##") or len(word) < 2 or not word.isalpha():
            continue
        words.append((word, token_id))
        if len(words) == n:
            break
    return words


def word_projection(encoder, n_words: int = 5000, ridge: float = 1.0) -> np.ndarray:
    """Davison's label projection for ``encoder``: (D, d) ridge map from each frequent word's sentence embedding to
    the encoder's own static (input) embedding of that word; the word vectors stand in for his word2vec."""
    model = encoder.model
    words = vocabulary_words(model.tokenizer, n_words)
    if not words:
        raise CtxirError("label projection found no whole-word vocabulary entries in this model's tokenizer")
    table = model[0].auto_model.get_input_embeddings().weight.detach().cpu().numpy()  # (vocab, d)
    sentence_vectors = encode(encoder, [w for w, _ in words])  # (V, D)
    return fit_projection(sentence_vectors, table[[i for _, i in words]], ridge)
