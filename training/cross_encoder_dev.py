"""The dev evaluators of a cross-encoder run (held-out SciFact claims, WikiQA dev, or both) and of the pair scorer."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

from ctxir.rerank.passages import Passages
from ctxir.rerank.rankers import pair_scores
from ctxir.types import doc_text

if TYPE_CHECKING:
    from training.cross_encoder_args import CrossEncoderArgs


def scifact_dev_evaluator(
    args: CrossEncoderArgs,
    bm25,
    corpus: dict,
    queries: dict[str, str],
    positives: dict[str, set[str]],
    dev_ids: list[str],
):
    """sentence-transformers' re-ranking evaluator over BM25's top --dev-depth of the held-out claims."""
    dev_hits = bm25.search({q: queries[q] for q in dev_ids}, args.dev_depth)
    if args.train_passages == "best":
        return maxp_evaluator(
            {q: queries[q] for q in dev_ids},
            dev_hits,
            corpus,
            {q: {d: 1 for d in positives[q]} for q in dev_ids},
            args.per_device_train_batch_size,
        )
    samples = [
        {
            "query": queries[q],
            "positive": [doc_text(corpus[d]) for d in sorted(positives[q])],
            "documents": [doc_text(corpus[h.doc_id]) for h in dev_hits[q]],
        }
        for q in dev_ids
    ]
    return reranking_evaluator(samples, "scifact-train-heldout", args.per_device_train_batch_size)


def reranking_evaluator(samples: list[dict], name: str, batch_size: int):
    """sentence-transformers' nDCG@10 re-ranking evaluator of ``samples`` (query, positive, documents)."""
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderRerankingEvaluator

    return CrossEncoderRerankingEvaluator(
        samples, at_k=10, always_rerank_positives=False, name=name, batch_size=batch_size, write_csv=False
    )


def maxp_evaluator(queries: dict[str, str], hits: dict, corpus: dict, qrels: dict, batch_size: int):
    """The dev evaluator of a model trained on windows (--train-passages best): nDCG@10 of re-ranking the held-out
    claims' BM25 candidates, each document scored by its best window, as ctxir re-ranks with a passages.json.
    Its metric names are CrossEncoderRerankingEvaluator's, so the training logs of both kinds line up."""
    # the class is made here: sentence-transformers' Trainer needs a BaseEvaluator, and importing it at the top
    # would load sentence-transformers for every --help
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    from ctxir.evaluation import evaluate_run
    from ctxir.rerank import CrossEncoderReranker

    class MaxPRerankingEvaluator(BaseEvaluator):
        name = "scifact-train-heldout"

        def __init__(self):
            super().__init__()
            self.primary_metric = f"{self.name}_ndcg@10"

        def __call__(
            self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1
        ) -> dict[str, float]:
            reranker = CrossEncoderReranker(model, batch_size=batch_size, passages=Passages())
            run = {
                q: {h.doc_id: h.score for h in reranker.rerank(text, hits[q], corpus)}
                for q, text in queries.items()
            }
            aggregate = evaluate_run(qrels, run).aggregate
            metrics = {
                f"{self.name}_ndcg@10": float(aggregate["nDCG@10"]),
                f"{self.name}_mrr@10": float(aggregate["MRR@10"]),
            }
            self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
            return metrics

    return MaxPRerankingEvaluator()


def wikiqa_dev_evaluator(args: CrossEncoderArgs):
    """WikiQA's dev split as sentence-transformers' re-ranking evaluator: each answered question's summary
    sentences re-ranked (nDCG@10): a general-domain dev set beside SciFact's held-out claims."""
    from ctxir.data.general import load_wikiqa

    dev = load_wikiqa(Path(args.data_dir) / "general" / "wikiqa" / "WikiQA-dev.tsv")
    # the summary's sentences in their own order ("D1-0", "D1-1", …): the evaluator's base order is no oracle
    order = {d: i for i, d in enumerate(dev.corpus)}
    # nDCG needs two candidates at least
    samples = [
        {
            "query": dev.queries[q],
            "positive": [doc_text(dev.corpus[d]) for d in sorted(dev.qrels[q])],
            "documents": [
                doc_text(dev.corpus[d])
                for d in sorted([*dev.qrels[q], *dev.negatives[q]], key=order.__getitem__)
            ],
        }
        for q in sorted(dev.queries)
        if dev.negatives[q]
    ]
    return reranking_evaluator(samples, "wikiqa-dev", args.per_device_train_batch_size)


def mixed_dev_evaluator(evaluators: list):
    """Several dev evaluators as one: every metric of each, and ``dev-mix_ndcg@10``, their mean nDCG@10, as the
    primary metric (--load-best keeps the step best on SciFact claims and general questions together)."""
    from sentence_transformers.base.evaluation.evaluator import BaseEvaluator

    from training.steps import dev_metric_key

    class MixedEvaluator(BaseEvaluator):
        name = "dev-mix"

        def __init__(self):
            super().__init__()
            self.primary_metric = f"{self.name}_ndcg@10"

        def __call__(
            self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1
        ) -> dict[str, float]:
            metrics = {}
            for evaluator in evaluators:
                metrics.update(evaluator(model, output_path, epoch, steps))
            primary = [metrics[dev_metric_key(evaluator)] for evaluator in evaluators]
            metrics[self.primary_metric] = sum(primary) / len(primary)
            self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
            return metrics

    return MixedEvaluator()


class PairCorrelationEvaluator(CrossEncoderCorrelationEvaluator):
    """sentence-transformers' Pearson/Spearman evaluator, scoring each pair as ctxir will once the model is saved:
    ``both_orders`` = the mean of (a, b) and (b, a) (``ctxir.rerank.rankers.pair_scores``, pair_orders.json)."""

    def __init__(self, *args, both_orders: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.both_orders = both_orders

    @classmethod
    def like(cls, dev: CrossEncoderCorrelationEvaluator, both_orders: bool) -> PairCorrelationEvaluator:
        """``dev``'s pairs, scores, name and batch, scored in one or both orders."""
        pairs, scores, name, batch = dev.sentence_pairs, dev.scores, dev.name, dev.batch_size
        return cls(pairs, scores, name=name, batch_size=batch, write_csv=False, both_orders=both_orders)

    def __call__(
        self, model, output_path: str | None = None, epoch: int = -1, steps: int = -1
    ) -> dict[str, float]:
        from scipy.stats import pearsonr, spearmanr

        def predict(pairs):
            return model.predict(
                pairs,
                prompt_name=self.prompt_name,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                show_progress_bar=self.show_progress_bar,
            )

        predicted = pair_scores(predict, self.sentence_pairs, self.both_orders)  # (pairs,)
        metrics = self.prefix_name_to_metrics(
            {
                "pearson": float(pearsonr(self.scores, predicted)[0]),
                "spearman": float(spearmanr(self.scores, predicted)[0]),
            },
            self.name,
        )
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics


def dev_orders(model, dev) -> dict[str, float]:
    """{"one": dev Spearman of (a, b) as given, "both": of the mean of both orders}: what --pair-orders is chosen on."""
    scores = {
        orders: PairCorrelationEvaluator.like(dev, orders == "both")(model) for orders in ("one", "both")
    }
    return {orders: round(result[f"{dev.name}_spearman"], 4) for orders, result in scores.items()}
