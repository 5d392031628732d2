"""Tiny models and records for the tests and fault scripts: a random BERT like a Hub download, a tiny cross-encoder,
a folder laid into a temporary Hugging Face cache as `hf download` leaves it, a metrics.json record."""

from __future__ import annotations

from pathlib import Path

from ctxir import kinds


def save_tiny_bert(folder: Path, vocab: list[str]) -> Path:
    """A random 2-layer BERT (hidden 32, 4 heads, seeded) over ``vocab``, saved in ``folder`` like any Hub download:
    a model the tests and scripts/faults.py load, export and train in seconds, with no download."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(folder)
    return folder


def metrics_record(
    model_type: str,
    base: str = "sentence-transformers/all-MiniLM-L6-v2",
    train=(("scifact", "CC BY-NC 2.0"),),
    name: str = "",
) -> dict:
    """A metrics.json record following its contract (``ctxir.publish.metrics_file``), as the training scripts write
    it for ``model_type`` (a name of ``ctxir.publish.model_types.MODEL_TYPES``): its base model, its training
    datasets as ((name, license), ...), its name (default: one derived from the type)."""
    task = {kinds.BI_ENCODER: "retrieval", kinds.CROSS_ENCODER: "reranking", kinds.CLS_LR: "reranking"}[
        model_type
    ]
    return {
        "model_type": model_type,
        "model_name": name or f"ctxir-minilm-scifact-{model_type}",
        "base_model": base,
        "objective": {
            kinds.BI_ENCODER: "MultipleNegativesRankingLoss",
            kinds.CROSS_ENCODER: "BinaryCrossEntropyLoss",
            kinds.CLS_LR: "LogisticRegression",
        }[model_type],
        "datasets": [
            *(
                {
                    "name": n,
                    "split": "train",
                    "role": "train",
                    "path": f"../shared/data/{n}",
                    "license": lic,
                    "num_examples": 919,
                }
                for n, lic in train
            ),
            {
                "name": "scifact",
                "split": "test",
                "role": "eval",
                "path": "../shared/data/scifact",
                "license": "CC BY-NC 2.0",
                "num_examples": 339,
            },
        ],
        "config": {"model": base, "epochs": 1, "batch_size": 32, "learning_rate": 2e-05, "seed": 42},
        "training": {
            "steps": 29,
            "epochs": 1.0,
            "train_examples": 919,
            "batch_size": 32,
            "learning_rate": 2e-05,
            "wall_time_seconds": 412.7,
            "examples_per_second": 2.23,
            "device": "cpu",
            "hardware": "Linux-6.1-x86_64, 2 CPUs",
            "final_loss": 0.2817,
            "seed": 42,
        },
        "evaluations": [
            {
                "dataset": "scifact",
                "split": "test",
                "task": task,
                "metric": "nDCG@10",
                "before": 0.6451,
                "after": 0.6837159,
                "anchor": 0.665,
                "anchor_name": "BEIR BM25",
                "config": "dense exact",
                # what the figure covers, and where its anchor comes from (the card check holds them together)
                "queries": 300,
                "first_stage": "dense",
                "depth": 100,
                "anchor_source": "Thakur et al. 2021 (BEIR), Table 2",
                "anchor_queries": 300,
                "anchor_first_stage": "bm25",
                "anchor_depth": 100,
            },
            {
                "dataset": "scifact",
                "split": "test",
                "task": task,
                "metric": "nDCG@10",
                "before": None,
                "after": 0.6912,
                "anchor": 0.688,
                "anchor_name": "BEIR BM25+CE",
                "config": "rerank BM25 top-100",
                "queries": 300,
                "first_stage": "bm25",
                "depth": 100,
                "anchor_source": "Thakur et al. 2021 (BEIR), Table 2",
                "anchor_queries": 300,
                "anchor_first_stage": "bm25",
                "anchor_depth": 100,
            },
            {
                "dataset": "stsbenchmark",
                "split": "test",
                "task": "sts",
                "metric": "spearman",
                "before": 0.8203,
                "after": 0.8101,
                "anchor": None,
                "anchor_name": None,
                "config": "cosine",
            },
        ],
        "extra": {},
        "versions": {
            "ctxir": "0.1.0",
            "sentence_transformers": "6.2.0",
            "transformers": "5.23.0",
            "torch": "2.13.0",
        },
        "created": "2026-11-22T12:00:00+00:00",
    }


def lay_into_hf_cache(folder: Path, cache: Path, repo_id: str, revision: str = "0" * 40) -> Path:
    """Copy the model in ``folder`` into the Hugging Face cache ``cache`` as ``hf download repo_id`` leaves it
    (``ctxir.publish.standalone.lay_into_hf_cache``, under a revision the test names). Returns the snapshot."""
    from ctxir.publish.standalone import lay_into_hf_cache as lay

    return lay(folder, repo_id, cache, revision)


def save_tiny_cross_encoder(folder: Path, vocab: list[str]) -> Path:
    """``save_tiny_bert``'s body with a one-label sequence-classification head (seeded), saved like a Hub
    cross-encoder (``BertForSequenceClassification``): sentence-transformers' CrossEncoder loads it."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    save_tiny_bert(folder, vocab)
    torch.manual_seed(1)
    config = BertConfig.from_pretrained(folder, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder
