from pathlib import Path

import pytest
import torch

from ctxir.encoders.models import (
    DEFAULT_BI_ENCODER,
    load_bi_encoder,
    packaged_minilm_path,
    pick_device,
    resolve_model,
)
from ctxir.types import CtxirError


def test_local_folder_resolves_to_itself(tiny_bert_dir):
    assert resolve_model(str(tiny_bert_dir)) == str(tiny_bert_dir.resolve())


def test_folder_without_config_is_refused(tmp_path):
    (tmp_path / "weights.txt").write_text("x")
    with pytest.raises(CtxirError, match=r"no config\.json"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize(
    ("planted", "where"), [("pytorch_model.bin", ""), ("weights.dat", ""), ("optimizer.pt", "1_Pooling/")]
)
def test_a_folder_with_a_planted_pickle_is_refused_naming_it(tiny_bert_dir, tmp_path, planted, where):
    import json
    import pickle
    import shutil

    folder = Path(shutil.copytree(tiny_bert_dir, tmp_path / "model"))
    if where:
        (folder / where).mkdir()
        (folder / "modules.json").write_text(
            json.dumps(
                [
                    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                    {
                        "idx": 1,
                        "name": "1",
                        "path": where.rstrip("/"),
                        "type": "sentence_transformers.models.Pooling",
                    },
                ]
            )
        )
    (folder / where / planted).write_bytes(pickle.dumps({"not": "weights"}))  # a pickle by content too
    with pytest.raises(CtxirError, match=rf"holds pickle file\(s\) '{where}{planted}'.*delete them"):
        resolve_model(str(folder))
    # a Trainer's leftover that no loader reads, and pickles in checkpoints/, do not block loading
    (folder / where / planted).unlink()
    (folder / "training_args.bin").write_bytes(pickle.dumps({}))
    (folder / "checkpoints" / "checkpoint-2").mkdir(parents=True)
    (folder / "checkpoints" / "checkpoint-2" / "optimizer.pt").write_bytes(pickle.dumps({}))
    assert resolve_model(str(folder)) == str(folder.resolve())


def test_a_folder_missing_its_weights_is_refused(tiny_bert_dir, tmp_path):
    import shutil

    folder = Path(shutil.copytree(tiny_bert_dir, tmp_path / "model"))
    (folder / "model.safetensors").unlink()
    with pytest.raises(
        CtxirError, match=r"has a config but no weights \(no model\.safetensors.*fetch the model again"
    ):
        resolve_model(str(folder))


def test_missing_path_names_the_path():
    with pytest.raises(CtxirError, match=r"'\./no/such/model' does not exist"):
        resolve_model("./no/such/model")


def test_default_hub_id_resolves_to_packaged_copy_offline(minilm_path):
    assert resolve_model(DEFAULT_BI_ENCODER) == str(minilm_path)
    assert resolve_model("all-MiniLM-L6-v2") == str(minilm_path)


def test_unknown_hub_id_offline_fails_fast_with_fix():
    with pytest.raises(CtxirError) as err:
        resolve_model("someone/not-cached-model-xyz")
    message = str(err.value)
    assert "'someone/not-cached-model-xyz'" in message and "offline" in message
    assert "hf download someone/not-cached-model-xyz" in message and "folder" in message


def test_empty_name_is_refused():
    with pytest.raises(CtxirError, match="empty"):
        resolve_model("  ")


def test_pick_device():
    assert pick_device("auto") in ("cpu", "cuda", "mps")
    assert pick_device("cpu") == "cpu"
    with pytest.raises(CtxirError, match="'tpu' is not known"):
        pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(CtxirError, match="no CUDA GPU"):
            pick_device("cuda")


def test_packaged_minilm_is_the_real_model(minilm):
    # all-MiniLM-L6-v2: BERT, 6 layers, 12 heads, 384 dims, mean pooling + normalisation.
    config = minilm[0].auto_model.config
    assert (config.num_hidden_layers, config.num_attention_heads, config.hidden_size) == (6, 12, 384)
    assert packaged_minilm_path() is not None
    # Loaded once and shared: a second request returns the same object.
    assert load_bi_encoder(DEFAULT_BI_ENCODER, "cpu") is load_bi_encoder(DEFAULT_BI_ENCODER, "cpu")
