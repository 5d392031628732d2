"""Train the experimental query generator (``ctxir.adapt.generator``) on MS MARCO, WikiQA and SQuAD question–passage pairs.

python training/train_query_generator.py --output-dir outputs/query-generator
python training/train_query_generator.py --output-dir outputs/qg --max-steps 2 --max-pairs 64  # smoke run
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python training/train_query_generator.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.adapt.generator import QueryGenerator, generate_queries, prefix_lm_batch, save_generator
from ctxir.cli import flag
from ctxir.data.general import article_half, load_msmarco_triples, load_squad, load_wikiqa
from ctxir.encoders.models import set_threads
from ctxir.files import machine_info
from ctxir.publish.metrics_file import versions
from ctxir.types import CtxirError, doc_text
from training.common import RunArgs, cli_main, resolve_resume

HELDOUT_FRACTION = 0.02


@dataclass
class QueryGeneratorArgs(RunArgs):
    base: str = flag("", "the BERT folder or id both sides start from (default: MiniLM)")
    epochs: float = flag(1.0, "passes over the pairs")
    batch_size: int = flag(16, "pairs per step (raise it on a GPU)")
    learning_rate: float = 3e-4
    max_steps: int = flag(-1, "stop after N steps (-1 = --epochs)")
    max_pairs: int = flag(0, "use N training pairs, seeded (0 = all)")
    save_steps: int = flag(100, "checkpoint every N steps (for --resume last)")
    resume: str = flag("", "'last' = go on from the newest checkpoint")


def training_pairs(data_dir: str | Path) -> list[dict]:
    """[{source, query, group}] from MS MARCO's triples, WikiQA train and half of SQuAD's articles."""
    general = Path(data_dir) / "general"
    sets = [
        load_msmarco_triples(general / "msmarco-triples" / "toy_triples.train.small.tsv"),
        load_wikiqa(general / "wikiqa" / "WikiQA-train.tsv"),
        article_half(load_squad(general / "squad-v1.1" / "dev-v1.1.json"), 0),  # half 1: the unseen dev
    ]
    # a group is a WikiQA page or a SQuAD article; an MS MARCO query is its own
    return [
        {"source": doc_text(found.corpus[d]), "query": found.queries[q], "group": found.groups.get(d, q)}
        for found in sets
        for q, judged in found.qrels.items()
        for d in judged
    ]


def run(args: QueryGeneratorArgs) -> dict:
    import torch
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    if not args.output_dir:
        raise CtxirError(
            "--output-dir is empty: name the folder to write the generator to (e.g. outputs/query-generator)"
        )
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    set_threads(args.torch_threads)
    started = time.time()

    # 1. load the untrained generator (MiniLM as a prefix language model; every weight but the word embeddings trains)
    torch.manual_seed(args.seed)
    model, tokenizer = QueryGenerator.build(args.base or None)
    print(f"{sum(p.numel() for p in model.parameters() if p.requires_grad):,} weights train", flush=True)

    # 2. load the pairs, hold out whole groups (a SQuAD article, a WikiQA page): held-out passages are new
    pairs = training_pairs(args.data_dir)
    groups = sorted({p["group"] for p in pairs})
    random.Random(args.seed).shuffle(groups)
    held = set(groups[: max(1, int(len(groups) * HELDOUT_FRACTION))])
    heldout = [p for p in pairs if p["group"] in held]
    train_pairs = [p for p in pairs if p["group"] not in held]
    if args.max_pairs:
        train_pairs = random.Random(args.seed).sample(train_pairs, min(args.max_pairs, len(train_pairs)))
    print(f"{len(train_pairs):,} training pairs, {len(heldout):,} held out", flush=True)

    def dataset(rows):
        return Dataset.from_list(rows).select_columns(["source", "query"])

    def collate(rows):
        return prefix_lm_batch(tokenizer, [r["source"] for r in rows], [r["query"] for r in rows])

    # 3. train (checkpoints in --output-dir/checkpoints; --resume last goes on from the newest)
    checkpoints = out / "checkpoints"
    training_args = TrainingArguments(
        output_dir=str(checkpoints),
        num_train_epochs=args.epochs,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=15,
        lr_scheduler_type="linear",
        logging_steps=20,
        save_steps=args.save_steps,
        save_total_limit=1,
        seed=args.seed,
        use_cpu=args.device == "cpu",
        remove_unused_columns=False,  # the collator reads the texts
        report_to="none",
        dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=dataset(train_pairs),
        eval_dataset=dataset(heldout),
        data_collator=collate,
    )
    loss_before = trainer.evaluate()["eval_loss"]
    trainer.train(resume_from_checkpoint=resolve_resume(args.resume, checkpoints) if args.resume else None)
    loss_after = trainer.evaluate()["eval_loss"]
    print(f"held-out loss {loss_before:.3f} → {loss_after:.3f}", flush=True)

    # 4. examples: held-out passages, what it generates beside the real query
    model.eval()
    sample = random.Random(args.seed).sample(heldout, min(12, len(heldout)))
    generated = generate_queries(model, tokenizer, [p["source"] for p in sample], per_text=2, seed=args.seed)
    examples = [
        {"passage": p["source"][:300], "real": p["query"], "generated": g}
        for p, g in zip(sample, generated, strict=True)
    ]
    (out / "examples.json").write_text(json.dumps(examples, indent=2, ensure_ascii=False) + "\n")
    for e in examples[:6]:
        print(f"  real {e['real']!r}  generated {e['generated']!r}")

    # 5. save the weights and how they were made
    record = {
        "base": args.base or None,
        "config": asdict(args),
        "pairs": {"train": len(train_pairs), "heldout": len(heldout)},
        "heldout_loss": {"before": round(loss_before, 4), "after": round(loss_after, 4)},
        "steps": trainer.state.global_step,
        "minutes": round((time.time() - started) / 60, 1),
        "machine": machine_info(),
        "versions": versions(),
    }
    save_generator(model, out, record)
    print(f"saved the generator to {out} ({record['minutes']} min)", flush=True)
    return record


def main(argv: list[str] | None = None) -> int:
    return cli_main(QueryGeneratorArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
