"""Names shared by several modules: saved-file names and the Hub-id pattern. No torch import."""

from __future__ import annotations

import re
from pathlib import Path

CLS_LR_WEIGHTS = "cls_lr.safetensors"
CLS_LR_CONFIG = "cls_lr_config.json"
CLS_LR_FORMAT = "ctxir-cls-lr/1"
ADAPTER_CONFIG = "adapter_config.json"  # a PEFT adapter folder
ADAPT_INCOMPLETE = "adapt.incomplete"  # while `ctxir adapt` writes a folder: ctxir refuses to load it
SAVE_INCOMPLETE = "ctxir_save.incomplete"  # while save_cross_encoder writes a folder: refused
# a cross-encoder body saved as its trained top layers over a named base (ctxir.encoders.heads.TopLayersTransformer)
TOP_LAYERS_CONFIG = "ctxir_top_layers.json"
TOP_LAYERS_WEIGHTS = "top_layers.safetensors"
TOP_LAYERS_FORMAT = "ctxir-top-layers/1"
# in a pair scorer's folder: {"orders": "both"} = its score of (a, b) is the mean of its scores of (a, b) and (b, a)
PAIR_ORDERS_FILE = "pair_orders.json"
# in a cross-encoder's folder: score long documents by their best window (MaxP), each read whole beside the query
PASSAGES_FILE = "passages.json"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def looks_like_hub_id(name: str) -> bool:
    """'owner/name' that is not also an existing local path (a folder wins, as in ``resolve_model``)."""
    return bool(HUB_ID.fullmatch(name or "")) and not Path(name).expanduser().exists()
