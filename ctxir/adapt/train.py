"""Training the bi-encoder's LoRA adapter with sentence-transformers' trainer: ``MarginMSELoss`` on a teacher's
margins (GPL); the time budget; saving."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from transformers import TrainerCallback

from ctxir.adapt.queries import PseudoQuery
from ctxir.encoders.bi_encoder import model_prompts
from ctxir.files import read_json, write_json
from ctxir.names import ADAPTER_CONFIG
from ctxir.types import Corpus, doc_text


@dataclass
class TrainPlan:
    """What the trainer is asked for: the adapter's shape, the optimiser, the steps, where checkpoints go."""

    lora_rank: int = 16
    lora_alpha: int = 32
    learning_rate: float = 2e-4
    batch_size: int = 32
    epochs: float = 1.0
    max_steps: int = 0
    save_steps: int = 50
    save_minutes: float = 5.0
    seed: int = 42
    device: str = "auto"
    show_progress: bool = True


def load_student(base: str, device: str, max_seq_length: int, plan: TrainPlan):
    """A fresh ``SentenceTransformer`` of ``base`` with an untrained LoRA adapter on every linear layer."""
    from peft import LoraConfig, TaskType
    from sentence_transformers import SentenceTransformer
    from transformers import set_seed

    from ctxir.encoders.lengths import set_max_length
    from ctxir.encoders.models import pick_device, resolve_model

    model = SentenceTransformer(resolve_model(base), device=pick_device(device), trust_remote_code=False)
    own_length = model.max_seq_length
    set_max_length(model, max_seq_length or None, name="--max-seq-length")
    model.ctxir_own_length = own_length  # what the saved adapter reads with (save_adapter): the base's own
    set_seed(plan.seed)  # LoRA's A matrices start random: seeded before the trainer seeds the rest
    model.add_adapter(
        LoraConfig(
            task_type=TaskType.FEATURE_EXTRACTION,
            r=plan.lora_rank,
            lora_alpha=plan.lora_alpha,
            lora_dropout=0.1,
            target_modules=["query", "key", "value", "dense"],  # every linear layer of a BERT block
        )
    )
    return model


def training_rows(
    queries: Sequence[PseudoQuery], corpus: Corpus, negatives: Sequence[dict], scores: dict[str, list[float]]
) -> dict[str, list]:
    """The trainer's columns, a row per mined negative: anchor, positive, negative, label = the teacher's margin."""
    by_qid = {q.qid: q for q in queries}
    rows: dict[str, list] = {"anchor": [], "positive": [], "negative": [], "label": []}
    for row in negatives:
        if row["qid"] not in scores:
            continue
        query, teacher = by_qid[row["qid"]], scores[row["qid"]]
        for i, (doc_id, _source) in enumerate(row["negatives"]):
            rows["anchor"].append(query.text)
            rows["positive"].append(query.positive)
            rows["negative"].append(doc_text(corpus[doc_id]))
            rows["label"].append(float(teacher[0] - teacher[i + 1]))
    return rows


def teacher_scale(model, rows: dict[str, list], sample: int = 256, seed: int = 42) -> float:
    """std of the student's cosine margins / std of the teacher's, on up to ``sample`` rows."""
    n = len(rows["anchor"])
    picked = np.random.default_rng(seed).choice(n, size=min(n, sample), replace=False)
    prompts = model_prompts(model)  # as the bi-encoder encodes queries and documents (ctxir.BiEncoder)

    q, p, m = (
        model.encode(
            [rows[column][i] for i in picked],
            prompt=prompts["query" if column == "anchor" else "document"],
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        for column in ("anchor", "positive", "negative")
    )
    student = np.einsum("nd,nd->n", q, p) - np.einsum("nd,nd->n", q, m)  # (sample,) cosine margins
    teacher = np.asarray([rows["label"][i] for i in picked], dtype=np.float64)
    spread = float(np.std(teacher))
    return float(np.std(student)) / spread if spread > 0 else 1.0


class BudgetCallback(TrainerCallback):
    """Stops (saved) at the first step past ``deadline``; saves every ``save_minutes`` too."""

    def __init__(self, deadline: float | None, save_minutes: float = 0.0):
        self.deadline, self.stopped_at, self.steps_run = deadline, None, 0
        self.save_seconds, self.saved = 60 * save_minutes, time.monotonic()

    def on_save(self, args, state, control, **kwargs):
        self.saved = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps_run += 1
        # a slow step (minutes on a busy CPU) is checkpointed by time too: a killed run loses at most that long
        if self.save_seconds and time.monotonic() - self.saved > self.save_seconds:
            control.should_save = True
        over = self.deadline is not None and time.monotonic() > self.deadline
        if over and state.global_step < state.max_steps:
            control.should_save = True
            control.should_training_stop = True
            self.stopped_at = state.global_step
        return control


def train_adapter(model, rows: dict[str, list], plan: TrainPlan, checkpoints: Path, deadline):
    """Train ``model``'s adapter on ``rows`` (MarginMSELoss), resuming from ``checkpoints``; → what happened."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MarginMSELoss
    from sentence_transformers.util import pairwise_cos_sim
    from transformers.trainer_utils import get_last_checkpoint

    loss = MarginMSELoss(model, similarity_fct=pairwise_cos_sim)
    # the model's own prompts before the pseudo-queries and the documents, as retrieval encodes them afterwards
    own = model_prompts(model)
    columns = {"anchor": own["query"], "positive": own["document"], "negative": own["document"]}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(checkpoints),
        per_device_train_batch_size=plan.batch_size,
        learning_rate=plan.learning_rate,
        num_train_epochs=plan.epochs,
        max_steps=plan.max_steps or -1,
        warmup_steps=0.1,  # a float below 1: that fraction of the steps (transformers 5)
        save_strategy="steps",
        save_steps=plan.save_steps,
        save_total_limit=2,
        logging_steps=max(1, plan.save_steps // 5),
        report_to=[],
        seed=plan.seed,
        use_cpu=str(model.device) == "cpu",
        disable_tqdm=not plan.show_progress,
        prompts={column: prompt for column, prompt in columns.items() if prompt} or None,
    )
    budget = BudgetCallback(deadline, plan.save_minutes)
    resumed = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=Dataset.from_dict(rows), loss=loss, callbacks=[budget]
    )
    started = time.monotonic()
    output = trainer.train(resume_from_checkpoint=resumed)
    return {
        "steps_done": int(trainer.state.global_step),
        "steps_planned": int(trainer.state.max_steps),
        "stopped_by_budget": budget.stopped_at is not None,
        "resumed_from_step": int(Path(resumed).name.split("-")[-1]) if resumed else 0,
        "steps_this_run": budget.steps_run,
        "train_loss": round(float(output.training_loss), 6),
        "seconds": round(time.monotonic() - started, 1),
    }


def save_adapter(model, folder: Path, base: str) -> int:
    """Save the adapter into ``folder`` naming ``base`` as given; → its weights' size in bytes."""
    trained_length = model.max_seq_length
    model.max_seq_length = getattr(model, "ctxir_own_length", trained_length)
    model.save_pretrained(str(folder), create_model_card=False)
    model.max_seq_length = trained_length
    config = read_json(folder / ADAPTER_CONFIG)
    config["base_model_name_or_path"] = base
    write_json(folder / ADAPTER_CONFIG, config)
    return sum(p.stat().st_size for p in folder.glob("adapter_model.*"))
