"""ctxir's cross-encoder modules: sentence-transformers ``Module``s that a ``CrossEncoder`` chains like its own.

- ``TopLayersTransformer``: a ``Transformer`` saved as what training changed (its trained top layers, float16
  safetensors) over a base model named by Hub id, so a re-ranker ships in a few MB instead of a full body.
- ``SegmentCosineHead``: the scoring head of ``ctxir.encoders.reranker_heads`` (the standalone file a staged Hub
  repo carries) under the class name ctxir's loader trusts.

``ctxir.encoders.models.load_cross_encoder(folder)`` builds these modules itself, so no ``trust_remote_code`` is
needed; a staged Hub repo loads with ``CrossEncoder(repo_id, trust_remote_code=True)`` and no ctxir installed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch
from sentence_transformers.base.modules import Transformer

from ctxir.encoders import reranker_heads
from ctxir.encoders.models import resolve_model
from ctxir.encoders.reranker_heads import hub_file_args
from ctxir.names import SAVE_INCOMPLETE, TOP_LAYERS_CONFIG, TOP_LAYERS_FORMAT, TOP_LAYERS_WEIGHTS

_LAYER = re.compile(r"(?:^|\.)layer\.(\d+)\.")


class SegmentCosineHead(reranker_heads.SegmentCosineHead):
    """``reranker_heads.SegmentCosineHead`` under ctxir's name: the class modules.json of ctxir's training outputs
    names (``ctxir.encoders.heads.SegmentCosineHead``), which ctxir's loader trusts. The code is the standalone
    file's, the one a staged Hub repo carries."""


def save_cross_encoder(model, folder: str | Path) -> None:
    """``model.save_pretrained(folder)`` with the folder marked unfinished (``SAVE_INCOMPLETE``) until it completes.

    sentence-transformers writes each file in place, over the model saved there before (a training run's output
    folder): a save a full disk stops can leave the new top layers beside the old head, which loads without error
    and scores as neither model. ``load_cross_encoder`` refuses a folder holding the marker. The marker is empty: creating
    it writes no data, so a full disk stops the save before it, with the earlier model untouched."""
    marker = Path(folder, SAVE_INCOMPLETE)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    model.save_pretrained(str(folder))
    marker.unlink()


def layer_of(parameter: str) -> int | None:
    """The encoder layer a parameter name belongs to (``encoder.layer.4.…`` → 4), else None.

    >>> layer_of("encoder.layer.4.attention.self.query.weight"), layer_of("embeddings.word_embeddings.weight")
    (4, None)
    """
    match = _LAYER.search(parameter)
    return int(match.group(1)) if match else None


class TopLayersTransformer(Transformer):
    """A ``Transformer`` whose saved form is its base model's name + the parameters of its trained top layers.

    ``freeze_below(n)`` freezes the embeddings and every layer under ``n`` (PreTTR-style: the lower layers stay
    the base's, so they need not ship, and back-propagation stops at layer ``n``: ~1.5× faster training on a CPU).
    """

    base_model: str = ""
    trained_from: int = 0

    def freeze_below(self, layer: int, base_model: str) -> None:
        num = self.model.config.num_hidden_layers
        if not 0 <= layer < num:
            raise ValueError(
                f"first trained layer {layer!r} is out of range: the body has layers 0–{num - 1}"
            )
        self.base_model, self.trained_from = base_model, int(layer)
        for name, parameter in self.model.named_parameters():
            parameter.requires_grad = self._trained(name)

    def _trained(self, name: str) -> bool:
        index = layer_of(name)
        # the pooler sits above every layer but no cross-encoder head of ctxir reads it; it stays the base's
        return index is not None and index >= self.trained_from

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        # lazy: safetensors is needed only to read or write weights
        from safetensors.torch import save_file

        if not self.base_model:
            raise ValueError(
                "TopLayersTransformer.save needs base_model: call freeze_below(layer, base_model) first"
            )
        state = {
            name: tensor.detach().to("cpu", torch.float16).contiguous()
            for name, tensor in self.model.state_dict().items()
            if self._trained(name)
        }
        os.makedirs(output_path, exist_ok=True)
        save_file(state, os.path.join(output_path, TOP_LAYERS_WEIGHTS))
        config = {
            "format": TOP_LAYERS_FORMAT,
            "base_model": self.base_model,
            "trained_from_layer": self.trained_from,
            "num_hidden_layers": self.model.config.num_hidden_layers,
            "dtype": "float16",
            "max_seq_length": self.max_seq_length,
            "transformer_task": self.transformer_task,
            "parameters": len(state),
        }
        Path(output_path, TOP_LAYERS_CONFIG).write_text(json.dumps(config, indent=2) + "\n")

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        **kwargs,
    ) -> TopLayersTransformer:
        # lazy: safetensors is needed only to read or write weights
        from safetensors.torch import load_file

        hub = hub_file_args(subfolder, kwargs)
        config_path = cls.load_file_path(model_name_or_path, TOP_LAYERS_CONFIG, **hub)
        weights_path = cls.load_file_path(model_name_or_path, TOP_LAYERS_WEIGHTS, **hub)
        if config_path is None or weights_path is None:
            raise ValueError(
                f"{model_name_or_path!r} has no {TOP_LAYERS_CONFIG} and {TOP_LAYERS_WEIGHTS}: it was "
                "not saved by TopLayersTransformer"
            )
        config = json.loads(Path(config_path).read_text())
        if config.get("format") != TOP_LAYERS_FORMAT:
            raise ValueError(
                f"{config_path!r} has format {config.get('format')!r}; expected {TOP_LAYERS_FORMAT!r}"
            )
        module = cls(
            resolve_model(config["base_model"]),
            transformer_task=config.get("transformer_task", "feature-extraction"),
        )
        module.max_seq_length = config.get("max_seq_length")
        module.model.config.num_labels = (
            1  # CrossEncoder.num_labels reads the body's config: one score per pair
        )
        module.base_model, module.trained_from = config["base_model"], int(config["trained_from_layer"])
        patch = load_file(weights_path)
        own = module.model.state_dict()
        unknown = sorted(set(patch) - set(own))
        if unknown or module.model.config.num_hidden_layers != config.get("num_hidden_layers"):
            raise ValueError(
                f"{weights_path!r} does not fit its base {config['base_model']!r} (e.g. {unknown[:1]}): "
                "the layers were trained over another base model"
            )
        dtype = next(module.model.parameters()).dtype
        module.model.load_state_dict({k: v.to(dtype) for k, v in patch.items()}, strict=False)
        return module
