"""What an adapt run writes beside its adapter: adapt.json's record and the README.md model card."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from ctxir.adapt.queries import ALL_KINDS, kinds_phrase


def adapter_record(args, corpus, settings, queries, teacher_name, loss, scale, rows, trained, size) -> dict:
    """adapt.json (without "seconds", which the caller adds last): complete or stopped by the budget, the base, the
    corpus it was adapted on, the teacher and loss, the pseudo-queries with examples, the training, the settings."""
    return {
        "complete": trained["steps_done"] >= trained["steps_planned"],
        "base_model": args.model,
        "adapted_without_labels": True,
        "corpus": {
            "path": args.corpus,
            "documents": len(corpus),
            "fingerprint": settings["corpus_fingerprint"],
        },
        "teacher": teacher_name,
        "loss": "MarginMSELoss" if loss == "margin-mse" else "MultipleNegativesRankingLoss",
        "teacher_scale": round(scale, 6),
        "queries": {"total": len(queries), **Counter(q.kind for q in queries)},
        "query_examples": {
            k: texts for k in ALL_KINDS if (texts := [q.text for q in queries if q.kind == k][:3])
        },
        "training_rows": len(rows["anchor"]),
        "training": trained,
        "adapter_bytes": size,
        "settings": settings,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _trained_with(record: dict) -> str:
    teacher, loss = record["teacher"], record["loss"]
    if teacher == "none":
        return f"no teacher: each query's mined negative and the batch's other documents are its negatives ({loss})"
    hybrid = "the base model's cosine plus BM25, each scaled to one spread of margins"
    how = {
        "hybrid:": f" ({hybrid})",
        "complement:": f" ({hybrid}; the negatives BM25 mined labelled by the cosine alone)",
    }
    what = next((text for prefix, text in how.items() if teacher.startswith(prefix)), "")
    return f"the teacher `{teacher}`{what} labelled them with its score margins ({loss})"


def _made_how(record: dict) -> str:
    generator = record["settings"].get("generator")
    if record["queries"].get("generated"):
        written = f"written by the query generator `{generator}` (trained on general-domain questions, not this corpus)"
        cut = record["queries"]["total"] > record["queries"]["generated"]
        return f"{written}{' or cut from the documents themselves' if cut else ''} for its documents"
    return "cut from the\ndocuments themselves"


def write_card(folder: Path, record: dict) -> None:
    examples = "\n".join(
        f"- {kind}: {texts[0]!r}" for kind, texts in record["query_examples"].items() if texts
    )
    (folder / "README.md").write_text(
        f"""---
library_name: sentence-transformers
base_model: {record["base_model"]}
tags: [sentence-transformers, peft, lora, ctxir-adapt]
---
# {record["base_model"]} adapted to one corpus, without labels

A LoRA adapter made by `ctxir adapt` on the corpus `{record["corpus"]["path"]}` ({record["corpus"]["documents"]:,}
documents): no query and no relevance label was used. {record["queries"]["total"]:,} pseudo-queries were {_made_how(record)} ({kinds_phrase(record["queries"])}),
negatives mined with BM25 and the base model, and the
{_trained_with(record)}. It was not evaluated here: measure it on your own
queries (`ctxir evaluate --model DIR`).

Examples of the pseudo-queries:
{examples}

Load it with ctxir (offline, the base from the packaged copy) or with sentence-transformers and peft:
`SentenceTransformer("DIR")` fetches the base model from the Hub.
""",
        encoding="utf-8",
    )
