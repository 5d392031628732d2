"""More write sites for ``scripts/faults.py``'s full-disk scenarios (its ``WRITE_SITES`` lists them with its own):
the classify tab's sample CSV, the sharded encoding's shards and manifest, the CLS-LR ranker's save, and the save of a
cross-encoder with ctxir's heads (its top layers and its segment-cosine head).

Each is ``site(folder, forever) -> failure points tried``, run by ``fault_harness.each_failure``: the N-th write
fails with ENOSPC (once, or from then on) for N = 1, 2, ... until the operation meets no failure, and each outcome is
checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ctxir.kinds import CLS_LR, CROSS_ENCODER
from scripts import fault_harness


def classify_sample(folder: Path, forever: bool) -> int:
    """The classify tab's "load a sample" CSV (``sample_inputs``, into the app's output folder): a full disk stops with
    the message naming the folder, the CSV served before is untouched, no half CSV or temporary file is left."""
    import csv

    from ctxir.app.classify_tab import sample_inputs
    from ctxir.files import DiskFullError

    out = folder / "outputs"
    out.mkdir()
    _, _, first = sample_inputs(out)
    written = Path(first).read_bytes()
    rows = list(csv.reader(written.decode("utf-8").splitlines()))
    assert rows[0] == ["text", "label"] and len(rows) > 2
    Path(first).write_bytes(b"served before\n")

    def operation():
        try:
            return sample_inputs(out)
        except DiskFullError as err:
            return err

    def check(got, failed):
        fault_harness.stopped(got if failed else None, failed, out)
        assert Path(first).read_bytes() == (b"served before\n" if failed else written)
        assert fault_harness.leftovers(folder) == [] and [p.name for p in out.iterdir()] == [Path(first).name]
        if not failed:
            assert got[2] == first
            Path(first).write_bytes(b"served before\n")  # back to the old file for the next failure point

    return fault_harness.each_failure(operation, check, forever)


def _in_process_shards(job, todo, result) -> None:
    """``sharded._encode_shards`` without Ray: the same actor class, here, one shard after another (the faults are
    patched into this process; Ray's workers are others). A fault surfaces as it would from a worker: an error."""
    from ctxir.encoders import sharded

    settings = job.settings
    actor = sharded._ShardEncoder(
        job.worker_model,
        settings.pooling,
        settings.layer,
        "cpu",
        1,
        settings.batch_size,
        str(job.folder.resolve()),
    )
    for i, a, b in todo:
        batch = {
            "shard": [i],
            "start": [a],
            "ids": [job.ids[a:b]],
            "texts": [job.texts[a:b]],
            "digest": [job.digests[i]],
        }
        row = {key: values[0] for key, values in actor(batch).items()}
        sharded._record_shard(result, row, 0.0)


def sharded_encoding(folder: Path, forever: bool) -> int:
    """``encode_sharded`` (its shards' .npy and .json, then manifest.json; the workers run here, one after another):
    a full disk stops the run with the message naming the folder; every shard whose .json is there is whole; the next
    run skips those, encodes the rest, and its manifest reads back the vectors a single encode gives."""
    import pytest

    from ctxir.encoders import BiEncoder, sharded
    from ctxir.encoders.shards import iter_shards, shard_names
    from ctxir.types import CtxirError

    model = str(fault_harness.tiny_bert(folder / "model"))
    corpus = {f"d{i}": {"title": "", "text": f"otters {i} dig dens in the river bank"} for i in range(30)}
    reference = BiEncoder(model, device="cpu", cache=False).encode_corpus(corpus)[1]  # (30, 32)
    out = folder / "shards"
    plan = 4  # 30 documents in shards of 8

    def encode():
        return sharded.encode_sharded(corpus, model, out, shard_size=8, num_workers=1)

    def operation():
        try:
            return encode()
        except CtxirError as err:
            return err

    def complete() -> list[int]:
        return [i for i in range(plan) if (out / shard_names(i)[1]).is_file()]

    def check(got, failed):
        assert isinstance(got, CtxirError) == failed, got
        if failed:
            assert "no space left on the disk holding" in str(got) and str(out.resolve()) in str(got), got
        assert fault_harness.leftovers(folder) == []
        written = complete()
        for i in written:  # a shard's .json is written last: with it, the shard is whole
            meta = json.loads((out / shard_names(i)[1]).read_text())
            vectors = np.load(out / shard_names(i)[0], allow_pickle=False)
            assert np.allclose(vectors, reference[meta["start"] : meta["start"] + meta["rows"]], atol=1e-5)
        again = encode()  # on a disk with room again: resumes from the shards already whole
        assert again.skipped == written and sorted(again.encoded + again.skipped) == list(range(plan))
        vectors = np.concatenate([v for _, v in iter_shards(out / sharded.MANIFEST_NAME)])
        assert np.allclose(vectors, reference, atol=1e-5)
        shutil.rmtree(out)  # the next failure point starts from nothing written

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sharded, "_encode_shards", _in_process_shards)
        return fault_harness.each_failure(operation, check, forever)


def cls_lr_save(folder: Path, forever: bool) -> int:
    """``ClsLrRanker.save`` over a ranker saved before (training/train_cls_lr.py's last step): a full disk stops with
    the message naming the folder; each of its two files is the old one or the whole new one, never torn, so the
    folder still loads; the next save loads back as the new ranker."""
    from ctxir.files import DiskFullError
    from ctxir.rerank import ClsLrRanker

    base = str(fault_harness.tiny_bert(folder / "model"))
    dest = folder / CLS_LR

    def ranker(value: float, C: float) -> ClsLrRanker:
        coef = np.full(32, value, dtype=np.float32)
        return ClsLrRanker(base, coef, value, max_length=64, device="cpu", metadata={"C": C})

    old, new = ranker(0.5, 1.0), ranker(-0.25, 4.0)
    old.save(dest)
    before = fault_harness.snapshot(dest)

    def operation():
        try:
            new.save(dest)
        except DiskFullError as err:
            return err
        return None

    def state(r: ClsLrRanker) -> tuple:
        return r.coef.tolist(), r.intercept, r.metadata

    def check(err, failed):
        fault_harness.stopped(err, failed, dest)
        loaded = ClsLrRanker.load(dest, device="cpu")
        if failed:
            now = fault_harness.snapshot(dest)
            assert set(now) == set(before)
            assert loaded.coef.tolist() in (old.coef.tolist(), new.coef.tolist())
            assert loaded.metadata in (old.metadata, new.metadata)
            for name, data in before.items():  # back to the old ranker for the next failure point
                (dest / name).write_bytes(data)
        else:
            assert state(loaded) == state(new)
        assert fault_harness.leftovers(folder) == []

    return fault_harness.each_failure(operation, check, forever)


def head_save(folder: Path, forever: bool) -> int:
    """A cross-encoder of the shipped shape saved over the one an earlier run saved in the same folder
    (training/train_cross_encoder.py's ``save_cross_encoder``: ``save_pretrained``'s top layers' safetensors and
    config, the segment-cosine head's config and weights, modules.json, ... written in place, the folder marked
    unfinished meanwhile): whatever a full disk leaves, ctxir's loader either refuses the folder with a message or
    loads a model that scores as the earlier or the new one, never a mix (the new top layers beside the old head);
    the next save loads and scores as the new model. Sampled, the first failure points of the whole save; always,
    every point of the head's own writes (the torn head: new body and head config beside the old head weights)."""
    import torch
    from sentence_transformers import CrossEncoder

    from ctxir.encoders.heads import SegmentCosineHead, TopLayersTransformer, save_cross_encoder
    from ctxir.encoders.models import load_cross_encoder
    from ctxir.types import CtxirError

    base = str(fault_harness.tiny_bert(folder / "model"))

    def cross_encoder(term_weights: list[float], shift: float):
        body = TopLayersTransformer(base, transformer_task="feature-extraction")
        body.model.config.num_labels = 1
        body.freeze_below(1, base)
        head = SegmentCosineHead(32, term_match=True)
        with torch.no_grad():
            for name, parameter in body.model.named_parameters():
                if body._trained(name):  # the earlier model's top layers differ from the new one's
                    parameter.add_(shift)
            head.term_linear.weight.copy_(torch.tensor([term_weights]))
        return CrossEncoder(modules=[body, head], device="cpu", activation_fn=torch.nn.Identity())

    pairs = [("river otters", "otters dig dens in the river bank"), ("money", "the bank loan")]
    earlier = cross_encoder([-1.0, 0.0, 2.0, 0.0, 0.5], 0.01)
    model = cross_encoder([3.0, 0.5, 0.0, 0.0, -0.5], 0.0)
    scored = {"earlier": np.asarray(earlier.predict(pairs)), "new": np.asarray(model.predict(pairs))}
    dest, saved_before = folder / CROSS_ENCODER, folder / "saved-before"
    save_cross_encoder(earlier, saved_before)

    def start_over():  # the earlier run's whole folder again (copied outside the faults: copyfile counts writes)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(saved_before, dest)

    def operation():
        try:
            save_cross_encoder(model, dest)
        except OSError as err:
            return err
        return None

    def check(err, failed):
        assert (err is not None) == failed, err
        load_cross_encoder.cache_clear()
        try:
            scores = np.asarray(load_cross_encoder(str(dest), "cpu").predict(pairs))
        except CtxirError:
            assert failed, "the whole saved folder was refused"
        else:
            which = [k for k, v in scored.items() if np.allclose(scores, v, atol=1e-3)]
            assert which in (["earlier"], ["new"]) and (failed or which == ["new"]), (scores, scored)
        finally:
            load_cross_encoder.cache_clear()
        assert fault_harness.leftovers(folder) == []
        start_over()

    start_over()
    tried = fault_harness.each_failure(operation, check, forever, sample=True)
    fault_harness.each_failure(operation, check, forever, under=dest / "1_SegmentCosineHead")
    return tried
