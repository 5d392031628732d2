"""The CLS-LR ranker: logistic regression on a cross-encoder's [CLS] vector (and optionally its own score)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ctxir import kinds
from ctxir.encoders.lengths import max_length_for, position_limit
from ctxir.encoders.models import load_cross_encoder, load_transformer, model_lock, pick_device, resolve_model
from ctxir.encoders.reranker_heads import cls_lr_logit
from ctxir.files import atomic_path, verify_checksums, write_atomic
from ctxir.names import CLS_LR_CONFIG, CLS_LR_FORMAT, CLS_LR_WEIGHTS
from ctxir.rerank.rankers import Reranker
from ctxir.types import CtxirError


def head_scores(head: Sequence, enc: dict, last_hidden: torch.Tensor) -> torch.Tensor:
    """(batch,) a modular cross-encoder's own score: its modules after the body run on ``last_hidden`` and ``enc``."""
    features = {**enc, "token_embeddings": last_hidden}  # last_hidden: (batch, tokens, hidden)
    for module in head:
        features = module(features)
    return features["scores"].reshape(len(last_hidden), -1)[:, -1]  # (batch, labels): last = "relevant"


def pair_vectors(output, enc: dict, layer: int = -1, head: Sequence | None = None) -> torch.Tensor:
    """(batch, hidden) the [CLS] vectors of ``layer``; (batch, hidden + 1) with ``head``'s score appended."""
    # (batch, tokens, hidden)
    hidden = output.last_hidden_state if layer == -1 else output.hidden_states[layer]
    cls = hidden[:, 0].float()
    if head is None:
        return cls
    return torch.cat([cls, head_scores(head, enc, output.last_hidden_state).float().unsqueeze(1)], 1)


@torch.no_grad()
def cls_features(
    model,
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    layer: int = -1,
    batch_size: int = 16,
    max_length: int | None = None,
    head: Sequence | None = None,
) -> np.ndarray:
    """(pairs, hidden[+1]) float32 [CLS] vectors of ``layer`` (0 = embeddings, -1 = last), see ``pair_vectors``."""
    max_length = max_length_for(max_length, tokenizer.model_max_length, position_limit(model.config))
    out = []
    device = next(model.parameters()).device
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start : start + batch_size]
        enc = dict(
            tokenizer(
                [q for q, _ in batch],
                [d for _, d in batch],
                padding=True,
                truncation="longest_first",
                max_length=max_length,
                return_tensors="pt",
            ).to(device)
        )
        with model_lock(model):
            output = model(**enc, output_hidden_states=layer != -1)
        out.append(pair_vectors(output, enc, layer, head).cpu().numpy())
    width = model.config.hidden_size + (head is not None)
    return np.concatenate(out) if out else np.zeros((0, width), dtype=np.float32)


class ClsLrRanker(Reranker):
    """score = coef · CLS(query, document) [+ coef[-1] · the cross-encoder's score] + intercept; ``predict_proba``
    = sigmoid(score).

    >>> name = "sentence-transformers/all-MiniLM-L6-v2"
    >>> tokenizer, body = load_transformer(name, "cpu", attentions=False)  # doctest: +SKIP
    >>> pairs = [("river otters", "Otters dig dens in the river bank."), ("river otters", "Banks approve loans.")]
    >>> ranker = ClsLrRanker.fit(name, cls_features(body, tokenizer, pairs), [1, 0], device="cpu")  # doctest: +SKIP
    >>> ranker.predict_proba("river otters", [document for _, document in pairs]).round(1)  # doctest: +SKIP
    array([0.8, 0.2], dtype=float32)
    """

    name = kinds.CLS_LR

    def __init__(
        self,
        base_model: str,
        coef: np.ndarray,
        intercept: float,
        layer: int = -1,
        max_length: int | None = None,
        device: str = "auto",
        batch_size: int = 16,
        metadata: dict | None = None,
        score_feature: bool = False,
    ):
        self.base_model, self.layer, self.batch_size = base_model, layer, batch_size
        self.coef = np.asarray(coef, dtype=np.float32).reshape(-1)  # (hidden,) or (hidden + 1,)
        self.intercept = float(intercept)
        self.metadata = metadata or {}
        self.score_feature = bool(score_feature)
        self.head = None  # the cross-encoder's modules after its body, where its score is a feature
        if self.score_feature:
            cross_encoder = load_cross_encoder(base_model, pick_device(device))
            self.tokenizer, self.model = cross_encoder.tokenizer, cross_encoder.model.eval()
            # a staged CLS-LR repo chains its own ClsLrHead after the cross-encoder's head
            self.head = [m for m in list(cross_encoder)[1:] if type(m).__name__ != "ClsLrHead"]
            if not self.head:
                raise CtxirError(
                    f"CLS-LR with score_feature reads the cross-encoder's own score, but {base_model!r} has no "
                    "modules after its body (a sequence-classification cross-encoder): fit it without "
                    "--score-feature"
                )
        else:
            self.tokenizer, self.model = load_transformer(base_model, pick_device(device), attentions=False)
        self.max_length = max_length_for(
            max_length, self.tokenizer.model_max_length, position_limit(self.model.config)
        )
        width = self.model.config.hidden_size + self.score_feature
        if self.coef.shape[0] != width:
            raise CtxirError(
                f"CLS-LR coef has {self.coef.shape[0]} values but {base_model!r} gives {width} features "
                f"(hidden size {self.model.config.hidden_size}"
                f"{' + its own score' if self.score_feature else ''}): the ranker was trained on another base "
                "model or with another score_feature setting"
            )

    def features(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return cls_features(
            self.model,
            self.tokenizer,
            [(query, t) for t in texts],
            self.layer,
            self.batch_size,
            self.max_length,
            self.head,
        )

    def score_tensor(self, enc: dict, output) -> torch.Tensor:
        """(batch,) the logit from the body's ``output`` on ``enc``, differentiable."""
        coef = torch.as_tensor(self.coef, device=output.last_hidden_state.device)
        return cls_lr_logit(pair_vectors(output, enc, self.layer, self.head), coef, self.intercept)

    def score_features(self, features: np.ndarray) -> np.ndarray:
        return cls_lr_logit(features, self.coef, self.intercept)  # (N, features) · (features,) → (N,)

    def score_pairs(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        return self.score_features(self.features(query, texts))

    def predict_proba(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.score_pairs(query, texts)))

    @classmethod
    def fit(
        cls,
        base_model: str,
        features: np.ndarray,
        labels: Sequence[int],
        C: float = 1.0,
        class_weight: str | None = "balanced",
        layer: int = -1,
        max_iter: int = 2000,
        **kwargs,
    ) -> ClsLrRanker:
        """Fit scikit-learn's LogisticRegression on ``cls_features`` (``score_feature=True``: the last column is the score)."""
        from sklearn.linear_model import LogisticRegression

        labels = np.asarray(labels)
        if len(features) != len(labels) or len(labels) == 0:
            raise CtxirError(
                f"need one label per feature row, got {len(features)} rows and {len(labels)} labels"
            )
        if set(np.unique(labels)) != {0, 1}:
            raise CtxirError(
                f"labels must contain both 0 (non-relevant) and 1 (relevant), got {sorted(set(labels))}"
            )
        clf = LogisticRegression(C=C, class_weight=class_weight, max_iter=max_iter).fit(features, labels)
        meta = {"C": C, "class_weight": class_weight, "train_pairs": len(labels)}
        meta["train_positives"] = int(labels.sum())
        return cls(base_model, clf.coef_[0], float(clf.intercept_[0]), layer=layer, metadata=meta, **kwargs)

    def save(self, folder: str | Path) -> Path:
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(folder / CLS_LR_WEIGHTS) as tmp:
            save_file(
                {"coef": self.coef, "intercept": np.array([self.intercept], dtype=np.float32)}, str(tmp)
            )
        config = {
            "format": CLS_LR_FORMAT,
            "base_model": self.base_model,
            "layer": self.layer,
            "max_length": self.max_length,
            "hidden_size": int(self.model.config.hidden_size),
            "score_feature": self.score_feature,
            "metadata": self.metadata,
        }
        write_atomic(folder / CLS_LR_CONFIG, json.dumps(config, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path, device: str = "auto", **kwargs) -> ClsLrRanker:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        folder = Path(folder).expanduser()
        if not folder.exists():  # a Hub id
            folder = Path(resolve_model(str(folder)))
        config_path, weights_path = folder / CLS_LR_CONFIG, folder / CLS_LR_WEIGHTS
        if not config_path.is_file() or not weights_path.is_file():
            raise CtxirError(
                f"{str(folder)!r} is not a CLS-LR ranker folder: expected {CLS_LR_CONFIG} and "
                f"{CLS_LR_WEIGHTS} (written by ClsLrRanker.save or training/train_cls_lr.py)"
            )
        verify_checksums(folder)
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
            if not isinstance(config, dict) or config.get("format") != CLS_LR_FORMAT:
                raise ValueError(f"format {getattr(config, 'get', lambda _: None)('format')!r}")
            tensors = load_file(str(weights_path))
            coef, intercept = tensors["coef"], tensors["intercept"]
            base = config["base_model"]
            if coef.ndim != 1 or intercept.shape != (1,) or not isinstance(base, str) or not base:
                raise ValueError(
                    f"coef of shape {coef.shape}, intercept of shape {intercept.shape}, base {base!r}"
                )
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as err:
            raise CtxirError(
                f"{str(folder)!r} is not a readable CLS-LR ranker ({type(err).__name__}: {err}): expected "
                f"{CLS_LR_CONFIG} with format {CLS_LR_FORMAT!r} and {CLS_LR_WEIGHTS} with coef and intercept; "
                "fit it again (training/train_cls_lr.py) or fetch the folder again"
            ) from err
        # "." : the cross-encoder body was published inside the ranker folder itself
        if base == "." or (folder / base).is_dir():
            base = str((folder / base).resolve())
        return cls(
            base,
            coef,
            float(intercept[0]),
            layer=config.get("layer", -1),
            max_length=config.get("max_length"),
            device=device,
            metadata=config.get("metadata"),
            score_feature=bool(config.get("score_feature", False)),
            **kwargs,
        )
