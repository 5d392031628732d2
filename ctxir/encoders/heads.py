"""ctxir's cross-encoder modules under the names its model folders' modules.json give them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch
from sentence_transformers.base.modules import Transformer

from ctxir.encoders import reranker_heads
from ctxir.encoders.models import apply_top_layers, resolve_model
from ctxir.encoders.reranker_heads import load_head_files
from ctxir.names import SAVE_INCOMPLETE, TOP_LAYERS_CONFIG, TOP_LAYERS_FORMAT, TOP_LAYERS_WEIGHTS

_LAYER = re.compile(r"(?:^|\.)layer\.(\d+)\.")


class SegmentCosineHead(reranker_heads.SegmentCosineHead):
    """``reranker_heads.SegmentCosineHead`` as ``ctxir.encoders.heads.SegmentCosineHead``, the name ctxir saves."""


def save_cross_encoder(model, folder: str | Path) -> None:
    """``model.save_pretrained(folder)``, marked unfinished (``SAVE_INCOMPLETE``) until it completes."""
    marker = Path(folder, SAVE_INCOMPLETE)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    model.save_pretrained(str(folder))
    marker.unlink()


def layer_of(parameter: str) -> int | None:
    """The encoder layer a parameter name belongs to, else None."""
    match = _LAYER.search(parameter)
    return int(match.group(1)) if match else None


class TopLayersTransformer(Transformer):
    """A ``Transformer`` saved as its base model's Hub id + its trained top layers (float16) only."""

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
        index = layer_of(name)  # the pooler is read by no ctxir head: it stays the base's
        return index is not None and index >= self.trained_from

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
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
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs) -> TopLayersTransformer:
        config, config_path, weights_path = load_head_files(
            cls, model_name_or_path, subfolder, kwargs, TOP_LAYERS_CONFIG, TOP_LAYERS_WEIGHTS
        )
        if config.get("format") != TOP_LAYERS_FORMAT:
            raise ValueError(
                f"{config_path!r} has format {config.get('format')!r}; expected {TOP_LAYERS_FORMAT!r}"
            )
        module = cls(
            resolve_model(config["base_model"]),
            transformer_task=config.get("transformer_task", "feature-extraction"),
        )
        module.max_seq_length = config.get("max_seq_length")
        module.model.config.num_labels = 1  # CrossEncoder.num_labels reads the body's config
        module.base_model, module.trained_from = config["base_model"], int(config["trained_from_layer"])
        if module.model.config.num_hidden_layers != config.get("num_hidden_layers"):
            raise ValueError(
                f"{weights_path!r} does not fit its base {config['base_model']!r}: the layers were trained over "
                "another base model"
            )
        apply_top_layers(module.model, weights_path)
        return module
