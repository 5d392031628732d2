"""training/recipes/: each documented run's settings in one YAML file that its script reads first (``--recipe``),
the flags on the command line overriding it; docs/lab.md shows the one-line command. No training here."""

from __future__ import annotations

import dataclasses
import importlib
import re
import shlex
from pathlib import Path

import pytest

from ctxir.cli import cli_main, command_line, parse_args
from training.common import RECIPES_DIR, REPO_ROOT, TRAINING_DIR, run_config
from training.common import cli_main as training_cli_main

DOCS = REPO_ROOT / "docs" / "lab.md"
# script module → its argument class
SCRIPTS = {
    "train_bi_encoder": "BiEncoderArgs",
    "train_cross_encoder": "CrossEncoderArgs",
    "train_pair_scorer": "PairScorerArgs",
    "train_cls_lr": "ClsLrArgs",
    "evaluate_reranker": "EvaluateRerankerArgs",
    "calibrate": "CalibrateArgs",
    "finish_checkpoint": "FinishCheckpointArgs",
    "silver_pairs": "SilverPairsArgs",
    "ship": "ShipArgs",
}
# (the one-line command in docs/lab.md, the command it replaced there, as the run was made): equal settings
DOCUMENTED = [
    (
        "python -m training.calibrate --recipe recipes/calibrate-stage5.yaml",
        "python -m training.calibrate --model outputs/ce-general-stage5",
    ),
    (
        "python training/train_bi_encoder.py --recipe recipes/bi-encoder-stsb-cosent.yaml",
        (
            "python training/train_bi_encoder.py --task stsb --objective cosent --epochs 2 --batch-size 16 "
            "--learning-rate 2e-5 --eval-steps 360 --save-steps 360 --logging-steps 20 --device cpu "
            "--torch-threads 1 --output-dir outputs/bi-encoder-stsb-cosent --model-name ctxir-minilm-stsb"
        ),
    ),
    (
        "python training/train_cross_encoder.py --recipe recipes/cross-encoder-scifact.yaml",
        (
            "python training/train_cross_encoder.py --task scifact --negatives bm25 --num-negatives 2 "
            "--epochs 1 --batch-size 16 --learning-rate 3e-5 --max-length 192 --rerank-depth 20 --dev-queries"
            " 50 --dev-depth 10 --eval-before false --save-steps 50 --logging-steps 10 --device cpu "
            "--torch-threads 1 --output-dir outputs/cross-encoder-scifact --model-name "
            "ctxir-minilm-scifact-cross-encoder"
        ),
    ),
    (
        "python training/train_bi_encoder.py --recipe recipes/bi-encoder-scifact-mnrl.yaml",
        (
            "python training/train_bi_encoder.py --task scifact --objective mnrl --num-negatives 1 --epochs 1"
            " --batch-size 32 --learning-rate 3e-5 --dev-queries 0 --device cpu --torch-threads 1 "
            "--save-steps 10 --logging-steps 5 --output-dir outputs/bi-encoder-scifact-mnrl --model-name "
            "ctxir-minilm-scifact-bi-encoder"
        ),
    ),
    (
        "python training/train_bi_encoder.py --recipe recipes/bi-encoder-scifact-mnrl-3ep.yaml",
        (
            "python training/train_bi_encoder.py --task scifact --objective mnrl --num-negatives 1 --epochs 3"
            " --batch-size 32 --learning-rate 3e-5 --dev-queries 100 --eval-steps 22 --save-steps 22 "
            "--logging-steps 5 --device cpu --torch-threads 1 --output-dir "
            "outputs/bi-encoder-scifact-mnrl-3ep --model-name ctxir-minilm-scifact-bi-encoder"
        ),
    ),
    (
        "python training/train_pair_scorer.py --recipe recipes/pair-scorer-r16-lr5e-4.yaml",
        (
            "python training/train_pair_scorer.py --epochs 1 --lora-r 16 --learning-rate 5e-4 --eval-before "
            "false --torch-threads 1 --output-dir outputs/sts-r16-lr5e-4"
        ),
    ),
    (
        (
            "python training/train_pair_scorer.py --recipe recipes/pair-scorer-r16-lr5e-4.yaml "
            "--learning-rate 2e-4 --output-dir outputs/sts-r16-lr2e-4"
        ),
        (
            "python training/train_pair_scorer.py --epochs 1 --lora-r 16 --learning-rate 2e-4 --eval-before "
            "false --torch-threads 1 --output-dir outputs/sts-r16-lr2e-4"
        ),
    ),
    (
        (
            "python training/train_pair_scorer.py --recipe recipes/pair-scorer-r16-lr5e-4.yaml --epochs 4 "
            "--eval-steps 360 --eval-before true --output-dir outputs/sts-lora-r16"
        ),
        (
            "python training/train_pair_scorer.py --epochs 4 --lora-r 16 --learning-rate 5e-4 --eval-steps "
            "360 --torch-threads 1 --output-dir outputs/sts-lora-r16"
        ),
    ),
    (
        "python training/train_pair_scorer.py --recipe recipes/pair-scorer-silver.yaml",
        (
            "python training/train_pair_scorer.py --extra-train silver --silver-pairs outputs/silver-stsb.csv"
            " --epochs 1 --lora-r 16 --learning-rate 5e-4 --eval-steps 580 --save-steps 580 --load-best true "
            "--eval-before false --torch-threads 1 --device cpu --output-dir outputs/sts-silver-lr5e-4"
        ),
    ),
    (
        (
            "python training/train_pair_scorer.py --recipe recipes/pair-scorer-stage2.yaml --learning-rate "
            "$lr --eval-before false --output-dir outputs/sts-stage2-gold-lr$lr"
        ),
        (
            "python training/train_pair_scorer.py --init-from ctxir/assets/models/sts-cross-encoder --epochs "
            "1 --learning-rate $lr --eval-steps 180 --save-steps 180 --load-best true --eval-before false "
            "--torch-threads 1 --device cpu --output-dir outputs/sts-stage2-gold-lr$lr"
        ),
    ),
    (
        "python training/train_pair_scorer.py --recipe recipes/pair-scorer-stage2.yaml",
        (
            "python training/train_pair_scorer.py --init-from ctxir/assets/models/sts-cross-encoder --epochs "
            "1 --learning-rate 4e-4 --eval-steps 180 --save-steps 180 --load-best true --torch-threads 1 "
            "--device cpu --output-dir outputs/sts-stage2"
        ),
    ),
    (
        (
            "python training/train_pair_scorer.py --recipe recipes/pair-scorer-stage2-both.yaml "
            "--learning-rate $lr --output-dir outputs/sts-stage2-both-lr$lr"
        ),
        (
            "python training/train_pair_scorer.py --init-from outputs/sts-silver --epochs 1 --both-orders "
            "true --pair-orders both --learning-rate $lr --eval-steps 180 --save-steps 180 --load-best true "
            "--torch-threads 1 --device cpu --output-dir outputs/sts-stage2-both-lr$lr"
        ),
    ),
    (
        "python training/train_cross_encoder.py --recipe recipes/cross-encoder-stage1.yaml",
        (
            "python training/train_cross_encoder.py --task scifact --head segment-cosine --train-layers 2 "
            "--max-length 128 --loss listnet --negatives both --num-negatives 5 --num-dense-negatives 1 "
            "--negative-pool 20 --negative-rounds 3 --pseudo-queries 1500 --dev-split unseen --dev-queries 50"
            " --rerank-depth 20 --learning-rate 4e-5 --head-learning-rate 1e-3 --batch-size 4 --epochs 1 "
            "--torch-threads 1 --eval-steps 250 --save-steps 250 --output-dir outputs/ce-seg-stage1"
        ),
    ),
    (
        "python -m training.train_cls_lr --recipe recipes/cls-lr-stage1.yaml",
        (
            "python -m training.train_cls_lr --base-model outputs/ce-seg-stage1 --heldout-queries base-unseen"
            " --rerank-depth 20 --torch-threads 1 --output-dir outputs/cls-lr-seg-stage1"
        ),
    ),
    (
        "python training/train_cross_encoder.py --recipe recipes/cross-encoder-stage3.yaml",
        (
            "python training/train_cross_encoder.py --task scifact --model "
            "ctxir/minilm-l6-scifact-cross-encoder --head segment-cosine --train-layers 2 --max-length 128 "
            "--loss listnet --train-passages best --negatives both --num-negatives 5 --num-dense-negatives 1 "
            "--negative-pool 20 --negative-rounds 3 --pseudo-queries 3000 --dev-split unseen --dev-queries 50"
            " --rerank-depth 20 --learning-rate 3e-5 --head-learning-rate 1e-3 --batch-size 4 --epochs 1 "
            "--torch-threads 1 --eval-steps 220 --save-steps 220 --keep-checkpoints true --eval-before false "
            "--output-dir outputs/ce-window-stage3"
        ),
    ),
    (
        "python training/train_cross_encoder.py --recipe recipes/cross-encoder-stage4.yaml",
        (
            "python training/train_cross_encoder.py --task scifact --model "
            "ctxir/minilm-l6-scifact-cross-encoder --head segment-cosine --term-match true --train-layers 2 "
            "--max-length 128 --loss listnet --train-passages best --negatives both --num-negatives 5 "
            "--num-dense-negatives 1 --negative-pool 20 --negative-rounds 3 --pseudo-queries 3000 --dev-split"
            " unseen --dev-queries 50 --rerank-depth 20 --learning-rate 3e-5 --head-learning-rate 1e-3 "
            "--match-learning-rate 1e-2 --batch-size 4 --max-steps 660 --torch-threads 1 --eval-steps 110 "
            "--save-steps 110 --keep-checkpoints true --eval-before false --output-dir "
            "outputs/ce-match-stage4"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage4-fusion.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/ce-550 --dev-from outputs/ce-match-stage4 "
            "--choose-passages true --choose-fusion true --fusion-min-gain 0.03 --depths '' --torch-threads 1"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage4-msmarco-demo.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/ce-550 --dev-from outputs/ce-match-stage4 "
            "--depths 20 --collections msmarco,demo --torch-threads 1 --no-update-metrics"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage4-scifact.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/ce-550 --dev-from outputs/ce-match-stage4 "
            "--depths 20,100 --collections scifact --torch-threads 1 --no-update-metrics --scores-dir "
            "outputs/scores-ce-550"
        ),
    ),
    (
        "python -m training.train_cls_lr --recipe recipes/cls-lr-stage4.yaml",
        (
            "python -m training.train_cls_lr --base-model outputs/ce-550 --heldout-queries base-unseen "
            "--rerank-depth 20 --torch-threads 1 --output-dir outputs/cls-lr-stage4"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-cls-lr-stage4.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/cls-lr-stage4 --dev-from outputs/ce-550 "
            "--choose-fusion true --fusion-min-gain 0.03 --depths 20 --collections scifact,msmarco,demo "
            "--torch-threads 1 --scores-dir outputs/scores-cls-lr-stage4"
        ),
    ),
    (
        "python training/train_cross_encoder.py --recipe recipes/cross-encoder-stage5.yaml",
        (
            "python training/train_cross_encoder.py --task scifact --model "
            "ctxir/minilm-l6-scifact-cross-encoder --head segment-cosine --term-match true --train-layers 2 "
            "--max-length 128 --loss listnet --train-passages best --negatives bm25 --negative-stages "
            "bm25,hybrid --num-negatives 5 --negative-pool 20 --negative-rounds 3 --pseudo-queries 1500 "
            "--general squad,wikiqa,msmarco --general-queries 700 --dev-split unseen --dev-queries 50 "
            "--rerank-depth 20 --learning-rate 2e-5 --head-learning-rate 1e-3 --match-learning-rate 1e-2 "
            "--batch-size 4 --max-steps 750 --torch-threads 1 --eval-steps 250 --save-steps 250 --load-best "
            "true --keep-checkpoints true --eval-before false --output-dir outputs/ce-general-stage5"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage5-fusion.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/ce-general-stage5 --choose-passages true "
            "--choose-fusion true --fusion-dev scifact,squad --fusion-min-gain 0.03 --depths '' "
            "--torch-threads 1"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage5-worst-part.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/ce-general-stage5-wp --choose-fusion true "
            "--fusion-dev scifact,squad,squad-topics --fusion-rule worst-part --fusion-min-gain 0 --depths '' "
            "--torch-threads 1"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage5-suite.yaml --model "
        "outputs/ce-general-stage5-wp",
        (
            "python -m training.evaluate_reranker --model outputs/ce-general-stage5-wp --suite true "
            "--torch-threads 1 --scores-dir outputs/scores-ce-general"
        ),
    ),
    (
        "python training/train_cross_encoder.py --recipe recipes/cross-encoder-stage6-256.yaml",
        (
            "python training/train_cross_encoder.py --task scifact --model ctxir/minilm-l6-scifact-cross-encoder "
            "--head segment-cosine --term-match true --train-layers 2 --max-length 256 --loss listnet "
            "--train-passages best --negatives bm25 --negative-stages bm25,hybrid --num-negatives 5 "
            "--negative-pool 20 --negative-rounds 3 --pseudo-queries 1500 --general squad,wikiqa,msmarco "
            "--general-queries 700 --dev-split unseen --dev-queries 50 --rerank-depth 20 --eval-max-queries 50 "
            "--learning-rate 2e-5 --head-learning-rate 1e-3 --match-learning-rate 1e-2 --batch-size 4 "
            "--max-steps 500 --torch-threads 1 --eval-steps 250 --save-steps 250 --load-best true "
            "--keep-checkpoints true --eval-before false --output-dir outputs/ce-general-stage6-256"
        ),
    ),
    (
        "python training/train_cross_encoder.py --recipe recipes/cross-encoder-stage7-topics.yaml",
        (
            "python training/train_cross_encoder.py --task scifact --model ctxir/minilm-l6-scifact-cross-encoder "
            "--head segment-cosine --term-match true --train-layers 2 --max-length 128 --loss listnet "
            "--train-passages best --negatives bm25 --negative-stages bm25,hybrid --num-negatives 5 "
            "--negative-pool 20 --negative-rounds 3 --pseudo-queries 1500 "
            "--general squad,wikiqa,msmarco,wikiqa-topics --general-queries 700 --dev-split unseen "
            "--dev-queries 50 --rerank-depth 20 --eval-max-queries 50 --learning-rate 2e-5 "
            "--head-learning-rate 1e-3 --match-learning-rate 1e-2 --batch-size 4 --max-steps 500 "
            "--torch-threads 1 --eval-steps 250 --save-steps 250 --load-best true --keep-checkpoints true "
            "--eval-before false --output-dir outputs/ce-general-stage7-topics"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage5-worst-part.yaml --model "
        "outputs/ce-general-stage7-topics-wp",
        (
            "python -m training.evaluate_reranker --model outputs/ce-general-stage7-topics-wp --choose-fusion true "
            "--fusion-dev scifact,squad,squad-topics --fusion-rule worst-part --fusion-min-gain 0 --depths '' "
            "--torch-threads 1"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage5-worst-part.yaml --model "
        "outputs/ce-general-stage7-topics-wp --scores-dir outputs/scores-ce-stage7",
        (
            "python -m training.evaluate_reranker --model outputs/ce-general-stage7-topics-wp --choose-fusion true "
            "--fusion-dev scifact,squad,squad-topics --fusion-rule worst-part --fusion-min-gain 0 --depths '' "
            "--torch-threads 1 --scores-dir outputs/scores-ce-stage7"
        ),
    ),
    (
        "python -m training.calibrate --recipe recipes/calibrate-stage5.yaml --model outputs/ce-general-stage7-topics-wp",
        "python -m training.calibrate --model outputs/ce-general-stage7-topics-wp",
    ),
    (
        "python -m training.train_cls_lr --recipe recipes/cls-lr-general.yaml --base-model "
        "outputs/ce-general-stage7-topics-wp --output-dir outputs/cls-lr-stage7",
        (
            "python -m training.train_cls_lr --base-model outputs/ce-general-stage7-topics-wp --heldout-queries "
            "base-unseen --score-feature true --general squad,wikiqa,msmarco --general-queries 300 "
            "--rerank-depth 20 --torch-threads 1 --max-test-queries 50 --output-dir outputs/cls-lr-stage7"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-cls-lr-general.yaml --model "
        "outputs/cls-lr-stage7 --dev-from outputs/ce-general-stage7-topics-wp --scores-dir outputs/scores-cls-lr-stage7",
        (
            "python -m training.evaluate_reranker --model outputs/cls-lr-stage7 --dev-from "
            "outputs/ce-general-stage7-topics-wp --choose-fusion true --fusion-dev scifact,squad --fusion-min-gain 0.03"
            " --collections msmarco,demo,med,npl,lisa --other-first-stages bm25 --depths 20 --torch-threads 1"
            " --scores-dir outputs/scores-cls-lr-stage7"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-cls-lr-general-suite.yaml --model "
        "outputs/cls-lr-stage7 --dev-from outputs/ce-general-stage7-topics-wp --scores-dir outputs/scores-cls-lr-stage7",
        (
            "python -m training.evaluate_reranker --model outputs/cls-lr-stage7 --dev-from "
            "outputs/ce-general-stage7-topics-wp --choose-fusion false --collections scifact,msmarco,demo,med,npl,lisa "
            "--other-first-stages bm25,dense,hybrid --depths 20 --torch-threads 1 --scores-dir "
            "outputs/scores-cls-lr-stage7"
        ),
    ),
    (
        "python -m training.train_cls_lr --recipe recipes/cls-lr-stage7-ranking.yaml",
        (
            "python -m training.train_cls_lr --base-model outputs/ce-general-stage7-topics-wp --heldout-queries "
            "base-unseen --score-feature true --score-emphasis 1,10,100,1000 --c-grid "
            "0.00001,0.00003,0.0001,0.0003,0.001,0.003,0.01,0.1,1,10 --cv-metric ndcg --general squad,wikiqa,msmarco "
            "--general-queries 300 --rerank-depth 20 --torch-threads 1 --max-test-queries 50 --output-dir "
            "outputs/cls-lr-stage7-ranking"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-cls-lr-general.yaml --model "
        "outputs/cls-lr-stage7-ranking --dev-from outputs/ce-general-stage7-topics-wp --scores-dir "
        "outputs/scores-cls-lr-ranking",
        (
            "python -m training.evaluate_reranker --model outputs/cls-lr-stage7-ranking --dev-from "
            "outputs/ce-general-stage7-topics-wp --choose-fusion true --fusion-dev scifact,squad --fusion-min-gain 0.03"
            " --collections msmarco,demo,med,npl,lisa --other-first-stages bm25 --depths 20 --torch-threads 1"
            " --scores-dir outputs/scores-cls-lr-ranking"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-cls-lr-general-suite.yaml --model "
        "outputs/cls-lr-stage7-ranking --dev-from outputs/ce-general-stage7-topics-wp --scores-dir "
        "outputs/scores-cls-lr-ranking",
        (
            "python -m training.evaluate_reranker --model outputs/cls-lr-stage7-ranking --dev-from "
            "outputs/ce-general-stage7-topics-wp --choose-fusion false --collections scifact,msmarco,demo,med,npl,lisa "
            "--other-first-stages bm25,dense,hybrid --depths 20 --torch-threads 1 --scores-dir "
            "outputs/scores-cls-lr-ranking"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-cls-lr-general-suite.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/cls-lr-general --dev-from outputs/ce-general-stage5 "
            "--choose-fusion false --collections scifact,msmarco,demo,med,npl,lisa --other-first-stages "
            "bm25,dense,hybrid --depths 20 --torch-threads 1 --scores-dir outputs/scores-cls-lr-general"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage5-suite.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/ce-general-stage5 --suite true "
            "--torch-threads 1 --scores-dir outputs/scores-ce-general"
        ),
    ),
    (
        "python -m training.train_cls_lr --recipe recipes/cls-lr-stage5.yaml",
        (
            "python -m training.train_cls_lr --base-model outputs/ce-general-stage5 --heldout-queries "
            "base-unseen --rerank-depth 20 --torch-threads 1 --max-test-queries 50 --output-dir "
            "outputs/cls-lr-stage5"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-cls-lr-stage5.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/cls-lr-stage5 --dev-from "
            "outputs/ce-general-stage5 --choose-fusion true --fusion-dev scifact,squad --fusion-min-gain 0.03"
            " --suite true --torch-threads 1 --scores-dir outputs/scores-cls-lr-stage5"
        ),
    ),
    (
        "python -m training.train_cls_lr --recipe recipes/cls-lr-general.yaml",
        (
            "python -m training.train_cls_lr --base-model outputs/ce-general-stage5 --heldout-queries "
            "base-unseen --score-feature true --general squad,wikiqa,msmarco --general-queries 300 "
            "--rerank-depth 20 --torch-threads 1 --max-test-queries 50 --output-dir outputs/cls-lr-general"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-cls-lr-general.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/cls-lr-general --dev-from "
            "outputs/ce-general-stage5 --choose-fusion true --fusion-dev scifact,squad --fusion-min-gain 0.03"
            " --collections msmarco,demo,med,npl,lisa --other-first-stages bm25 --depths 20 --torch-threads 1"
            " --scores-dir outputs/scores-cls-lr-general"
        ),
    ),
    (
        "python training/train_bi_encoder.py --recipe recipes/bi-encoder-stsb-cosent-teacher.yaml",
        (
            "python training/train_bi_encoder.py --task stsb --objective cosent --epochs 2 --batch-size 16 "
            "--torch-threads 1 --device cpu --output-dir outputs/bi-encoder-stsb-cosent --model-name "
            "ctxir-minilm-stsb"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage1-maxp.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/ce-seg-stage1-maxp --choose-passages true "
            "--choose-fusion true --depths 20 --collections scifact,msmarco,demo --torch-threads 2"
        ),
    ),
    (
        "python -m training.evaluate_reranker --recipe recipes/evaluate-reranker-stage3.yaml",
        (
            "python -m training.evaluate_reranker --model outputs/ce-window-stage3-best --choose-passages "
            "true --choose-fusion true --depths 20 --collections scifact,msmarco,demo"
        ),
    ),
]


def script(command: str) -> tuple[type, list[str]]:
    """(argument class, flags) of ``python training/NAME.py ...`` or ``python -m training.NAME ...``; a loop's
    ``$lr`` reads as one of its values."""
    words = shlex.split(command.replace("$lr", "4e-4"))
    module = words[2] if words[1] == "-m" else words[1]
    name = re.sub(r"^training[./]|\.py$", "", module)
    args_class = getattr(importlib.import_module(f"training.{name}"), SCRIPTS[name])
    return args_class, words[3:] if words[1] == "-m" else words[2:]


def settings(command: str) -> dict:
    args_class, argv = script(command)
    args = parse_args(args_class, argv, recipe_dirs=(TRAINING_DIR,))
    return {k: v for k, v in dataclasses.asdict(args).items() if k != "recipe"}


def docs_commands(recipe: bool = True) -> list[str]:
    """docs/lab.md's training commands (in its bash blocks) that take a recipe (or, ``recipe=False``, that take
    none), each joined over its continuations."""
    blocks = re.findall(r"```bash\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    text = re.sub(r"\\\n\s*", "", "\n".join(blocks))
    lines = [re.sub(r"\s+#.*$", "", line.strip()) for line in text.splitlines() if "training" in line]
    return [line for line in lines if line.startswith("python") and ("--recipe recipes/" in line) == recipe]


# ---------------------------------------------------------------- the mechanism


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_recipe_sets_values_and_a_flag_given_after_it_overrides_one(tmp_path):
    from training.train_cross_encoder import CrossEncoderArgs

    recipe = write(
        tmp_path / "r.yaml",
        "# a comment\ntask: scifact\nlearning-rate: 2e-5\nhead_learning_rate: 1e-3\nload-best: true\n"
        "eval-before: false\nmax-steps: 750\ngeneral: squad,wikiqa\n",
    )
    args = parse_args(CrossEncoderArgs, ["--recipe", str(recipe), "--max-steps", "5", "--torch-threads", "1"])
    assert (args.task, args.learning_rate, args.head_learning_rate, args.load_best, args.eval_before) == (
        "scifact",
        2e-5,
        1e-3,
        True,
        False,
    )
    assert (args.general, args.max_steps, args.torch_threads) == ("squad,wikiqa", 5, 1)  # the flag wins
    assert args.recipe == str(recipe)  # recorded: metrics.json "config" is asdict(args)
    # a flag given before --recipe overrides it too: the recipe is always read first
    assert parse_args(CrossEncoderArgs, ["--max-steps", "7", f"--recipe={recipe}"]).max_steps == 7


def test_an_unknown_key_is_refused_naming_it_the_file_and_the_valid_flags(tmp_path, capsys):
    from training.calibrate import CalibrateArgs

    recipe = write(tmp_path / "bad.yaml", "model: outputs/x\nepochs: 3\n")

    def run(args):
        raise AssertionError("a refused recipe runs nothing")

    assert cli_main(CalibrateArgs, run, ["--recipe", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --recipe ")
    assert "unknown flag 'epochs'" in err and repr(str(recipe)) in err
    assert "use one of model, dev-from, data-dir, depth, batch-size, device, torch-threads" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "not a mapping"),
        ("model: [\n", "not valid YAML"),
        ("model:\n", "leave the key out"),
        ("recipe: other.yaml\n", "unknown flag 'recipe'"),
    ],
)
def test_a_bad_recipe_is_one_line_and_exit_2(tmp_path, capsys, text, message):
    from training.calibrate import CalibrateArgs

    recipe = write(tmp_path / "r.yaml", text)
    assert cli_main(CalibrateArgs, lambda args: 0, ["--recipe", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_missing_recipe_or_path_is_refused(tmp_path, capsys):
    from training.calibrate import CalibrateArgs

    assert cli_main(CalibrateArgs, lambda args: 0, ["--recipe", str(tmp_path / "none.yaml")]) == 2
    assert "is not a file" in capsys.readouterr().err
    assert cli_main(CalibrateArgs, lambda args: 0, ["--model", "m", "--recipe"]) == 2
    assert "--recipe needs a path" in capsys.readouterr().err


def test_a_relative_recipe_is_found_under_training_from_any_folder(tmp_path, monkeypatch):
    from training.calibrate import CalibrateArgs

    monkeypatch.chdir(tmp_path)
    seen = []
    assert training_cli_main(CalibrateArgs, seen.append, ["--recipe", "recipes/calibrate-stage5.yaml"]) == 0
    assert seen[0].model == "outputs/ce-general-stage5"
    # the working directory comes first
    write((tmp_path / "recipes").mkdir() or tmp_path / "recipes" / "calibrate-stage5.yaml", "model: mine\n")
    assert training_cli_main(CalibrateArgs, seen.append, ["--recipe", "recipes/calibrate-stage5.yaml"]) == 0
    assert seen[1].model == "mine"


def test_the_rebuilt_command_line_leaves_the_recipe_out_and_reproduces_the_run():
    from training.train_cross_encoder import CrossEncoderArgs

    path = str(RECIPES_DIR / "cross-encoder-stage5.yaml")
    config = run_config(
        parse_args(CrossEncoderArgs, ["--recipe", path, "--max-steps", "5", "--adam-beta2", "0.99"])
    )
    assert config["recipe"] == path
    line = command_line("python training/train_cross_encoder.py", CrossEncoderArgs, config)
    assert "--recipe" not in line and "--max-steps 5" in line and "--adam-beta2 0.99" in line
    assert "--batch-size 4" in line and "--device" not in line  # the documented flags; the default left out
    again = run_config(parse_args(CrossEncoderArgs, shlex.split(line)[2:]))
    assert {**again, "recipe": path} == config


def test_the_rebuilt_command_spells_each_field_by_its_documented_flag():
    """A config's Trainer fields (``num_train_epochs``, ...) come back as the flags the docs spell (``--epochs``)."""
    from training.train_cross_encoder import CrossEncoderArgs

    config = {
        "loss": "listnet",
        "num_train_epochs": 4.0,
        "per_device_train_batch_size": 8,
        "warmup_steps": 0.2,
        "resume_from_checkpoint": "last",
        "run_device": "cpu",
    }
    line = command_line("python training/train_cross_encoder.py", CrossEncoderArgs, config)
    assert line.endswith("--loss listnet --epochs 4.0 --batch-size 8 --warmup 0.2 --resume last --device cpu")
    args = parse_args(CrossEncoderArgs, shlex.split(line)[2:])
    assert (args.num_train_epochs, args.per_device_train_batch_size, args.warmup_steps) == (4.0, 8, 0.2)
    assert (args.resume_from_checkpoint, args.run_device, args.use_cpu) == ("last", "cpu", True)


# ---------------------------------------------------------------- the Trainer's settings: the library's own

TRAINER_SCRIPTS = [
    ("train_bi_encoder", "BiEncoderArgs", "sentence_transformers", "SentenceTransformerTrainingArguments"),
    (
        "train_cross_encoder",
        "CrossEncoderArgs",
        "sentence_transformers.cross_encoder",
        "CrossEncoderTrainingArguments",
    ),
    (
        "train_pair_scorer",
        "PairScorerArgs",
        "sentence_transformers.cross_encoder",
        "CrossEncoderTrainingArguments",
    ),
]


@pytest.mark.parametrize(("module", "name", "library", "library_class"), TRAINER_SCRIPTS, ids=lambda v: v)
def test_a_trainer_scripts_arguments_are_the_librarys_training_arguments(
    module, name, library, library_class
):
    """Each Trainer script's class extends sentence-transformers' own: its documented flags set the library's
    fields, and any other Trainer flag works as the library defines it."""
    args_class = getattr(importlib.import_module(f"training.{module}"), name)
    argv = ["--batch-size", "6", "--epochs", "3", "--warmup", "0.05", "--resume", "last", "--device", "cpu"]
    args = parse_args(
        args_class, [*argv, "--gradient-accumulation-steps", "2", "--lr-scheduler-type", "cosine"]
    )
    assert isinstance(args, getattr(importlib.import_module(library), library_class))
    assert (args.per_device_train_batch_size, args.num_train_epochs, args.warmup_steps) == (6, 3.0, 0.05)
    assert (args.resume_from_checkpoint, args.gradient_accumulation_steps, args.lr_scheduler_type) == (
        "last",
        2,
        "cosine",
    )
    assert (args.run_device, args.use_cpu, args.device.type) == (
        "cpu",
        True,
        "cpu",
    )  # the library's device too


def test_the_trainer_gets_the_recipes_settings_the_flags_overrides_and_any_other_trainer_flag(tmp_path):
    """recipes/cross-encoder-stage5.yaml with --batch-size and --adam-beta2 given after it: the Trainer's arguments
    (the library's own class, built by training.steps.trainer_arguments) hold what the former hand-written mapping gave, plus the flag."""
    from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

    from training import cross_encoder_args, train_cross_encoder
    from training.steps import trainer_arguments

    recipe = str(RECIPES_DIR / "cross-encoder-stage5.yaml")
    args = parse_args(
        train_cross_encoder.CrossEncoderArgs,
        ["--recipe", recipe, "--batch-size", "8", "--adam-beta2", "0.99"],
    )
    evaluator = type("Dev", (), {"primary_metric": "ndcg@10", "name": "dev"})()
    options = cross_encoder_args.head_learning_rates(args)
    trainer_args = trainer_arguments(
        CrossEncoderTrainingArguments, args, tmp_path, "cpu", evaluator, **options
    )
    assert type(trainer_args) is CrossEncoderTrainingArguments
    expected = {
        "output_dir": str(tmp_path / "checkpoints"),
        "num_train_epochs": 1.0,
        "max_steps": 750,
        "per_device_train_batch_size": 8,  # the flag's
        "per_device_eval_batch_size": 8,
        "learning_rate": 2e-5,
        "warmup_steps": 0.1,
        "seed": 42,
        "data_seed": 42,
        "eval_strategy": "steps",
        "eval_steps": 250,
        "save_strategy": "steps",
        "save_steps": 250,
        "logging_steps": 10,
        "logging_first_step": True,
        "save_total_limit": None,  # keep-checkpoints: true
        "report_to": [],
        "fp16": False,
        "use_cpu": True,
        "load_best_model_at_end": True,
        "metric_for_best_model": "dev_ndcg@10",
        "greater_is_better": True,
        "learning_rate_mapping": options["learning_rate_mapping"],
        "adam_beta2": 0.99,  # a Trainer flag ctxir never declared
        "resume_from_checkpoint": None,  # training.steps.Run resolves --resume itself
    }
    assert {key: getattr(trainer_args, key) for key in expected} == expected


def test_a_bad_trainer_setting_is_one_line_and_exit_2(capsys):
    """The library's own checks of its settings (its __post_init__) read like ctxir's: one line, exit 2."""
    from training.train_cross_encoder import CrossEncoderArgs

    def run(args):
        raise AssertionError("refused arguments run nothing")

    assert cli_main(CrossEncoderArgs, run, ["--lr-scheduler-type", "cosine", "--warmup", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "warmup" in err


# ---------------------------------------------------------------- the shipped recipes and the docs


@pytest.mark.parametrize(("one_line", "replaced"), DOCUMENTED, ids=[new.split()[-1] for new, _ in DOCUMENTED])
def test_each_recipe_holds_exactly_the_settings_of_the_command_it_replaced(one_line, replaced):
    assert script(one_line)[0] is script(replaced)[0]
    assert settings(one_line) == settings(replaced)


def test_docs_show_each_recipe_in_a_one_line_command_that_parses():
    commands = docs_commands()
    named = {re.search(r"--recipe recipes/(\S+)\.yaml", c).group(1) for c in commands}
    shipped = {p.stem for p in RECIPES_DIR.glob("*.yaml")}
    assert named == shipped  # no recipe undocumented, none missing
    documented = {new for new, _ in DOCUMENTED}
    for command in commands:
        assert settings(command)  # every flag the docs add parses with the recipe's script
        assert command in documented or "--resume" in command, command  # compared with what it replaced


def test_the_steps_between_runs_are_shown_in_commands_that_parse():
    commands = docs_commands(recipe=False)
    assert {script(c)[0].__name__ for c in commands} >= {
        "FinishCheckpointArgs",
        "SilverPairsArgs",
        "ShipArgs",
    }
    for command in commands:
        assert settings(command), command


@pytest.mark.parametrize("path", sorted(RECIPES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_each_recipe_opens_with_what_it_is_how_to_run_it_its_time_and_its_section(path):
    head = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        head.append(line)
    text = " ".join(head)
    assert head and f"--recipe recipes/{path.name}" in text and "Measured:" in text
    assert "docs/lab.md" in text
    run = re.search(r"# Run: (python \S+(?: \S+)?) --recipe", text).group(1)
    assert any(c.startswith(f"{run} --recipe recipes/{path.name}") for c in docs_commands())
