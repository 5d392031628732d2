"""``ctxir adapt`` on each collection's corpus alone, evaluated before and after; docs/bench/adapt.json and its tables.

    python scripts/results_adapt.py [--collections lisa,med]     # test collections; the others' rows are kept
    python scripts/results_adapt.py --dev true --collections squad [--label X "--adapt-args=..." --against default \
        --seeds 42,1,2]                                          # a dev setting, paired against the default
    python scripts/results_adapt.py --table-only true            # the tables from docs/bench/adapt.json
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctxir import kinds  # noqa: E402
from ctxir.cli import cli_main, flag  # noqa: E402
from ctxir.encoders.models import DEFAULT_BI_ENCODER  # noqa: E402
from ctxir.evaluation.metrics import paired_test  # noqa: E402
from ctxir.files import read_json, write_json  # noqa: E402
from scripts.results_adapt_doc import OVERLAP_DEPTH, RECORD, times, write_table  # noqa: E402
from scripts.results_tables import write_block  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
# name → (folder under ../shared/data, label)
COLLECTIONS = {
    "scifact": ("scifact", "SciFact"),
    "med": ("classic/med_beir", "Medline"),
    "npl": ("classic/npl_beir", "NPL"),
    "lisa": ("classic/lisa_beir", "LISA"),
    "msmarco": ("msmarco_sample", "MS MARCO sample"),
}
# the dev collections: name → (label, split); all but SciFact are BEIR folders written from ../shared/data/general
DEV = {
    "scifact": ("SciFact", "train"),
    "squad": ("SQuAD v1.1 dev (general/)", "dev"),
    "msmarco-triples": ("MS MARCO training triples (general/)", "dev"),
    "wikiqa": ("WikiQA questions over pages (general/)", "dev"),
}
GENERAL = {  # name → (its file under ../shared/data/general, the ctxir.data.general reader's name)
    "squad": ("squad-v1.1/dev-v1.1.json", "load_squad"),
    "msmarco-triples": ("msmarco-triples/toy_triples.train.small.tsv", "load_msmarco_triples"),
    "wikiqa": ("wikiqa", "load_wikiqa_pages"),  # the folder: all three splits' pages
}
DEV_QUESTIONS = 3000  # a seeded sample of a set's questions, so each evaluation takes about a minute
# the ctxir evaluate runs: name → flags (the re-ranked one also gives its first stage, the hybrid, alone)
EVALS = {
    "dense": ["--retriever", "dense"],
    "hybrid": ["--retriever", "hybrid"],
    "hybrid-rerank": ["--retriever", "hybrid", "--rerank", kinds.CROSS_ENCODER],
    # BM25, the adapter and the base fused: what adapting adds without giving up the base's own ranking
    "hybrid-both": ["--retriever", "hybrid", "--extra-models", DEFAULT_BI_ENCODER],
}
FUSED = f"hybrid + {kinds.CROSS_ENCODER} (fused)"
# the table's stages: label → (the evaluate run "before" is read from, the run "after" is, the key in per_query);
# "before" is always the base alone
SYSTEMS = {
    "dense": ("dense", "dense", "dense"),
    "hybrid": ("hybrid-rerank", "hybrid-rerank", "hybrid"),
    "hybrid + re-ranker": ("hybrid-rerank", "hybrid-rerank", FUSED),
}
# --dev: the first stages only (re-ranking every dev query would take an hour here)
DEV_SYSTEMS = {
    "dense": ("dense", "dense", "dense"),
    "hybrid": ("hybrid", "hybrid", "hybrid"),
    "hybrid of BM25, base and adapter": ("hybrid", "hybrid-both", "hybrid"),
}
METRIC = "nDCG@10"
DEFAULT_SEED = 42  # ctxir adapt's --seed


@dataclass
class ResultsAdaptArgs:
    collections: str = flag(",".join(COLLECTIONS), "comma list of " + ", ".join(COLLECTIONS))
    dev: bool = flag(False, "a dev set instead of test: " + ", ".join(DEV) + " (--collections)")
    table_only: bool = flag(False, "only rewrite the table from docs/bench/adapt.json")
    work: str = flag("outputs/adapt", "adapters and evaluations go here")
    adapt_args: str = flag("", "extra ctxir adapt flags (dev comparisons only)")
    label: str = flag("", "--dev: a name for this setting's adapter folder")
    seeds: str = flag(
        "", "--dev: comma list of seeds (e.g. 42,1,2): adapted once per seed, the mean Δ recorded"
    )
    against: str = flag(
        "", "--dev: another setting's --label ('default' = none) for a paired test against it"
    )
    torch_threads: int = 0
    doc: str = str(ROOT / "docs" / "results.md")
    record: str = flag(str(RECORD), "the JSON the table is made from")
    training_doc: str = flag(str(ROOT / "docs" / "results.md"), "where the timings go ('' = nowhere)")


def _ctxir(*argv: str) -> None:
    command = [sys.executable, "-m", "ctxir", *argv]
    print("$ " + " ".join(command[2:]), flush=True)
    # every model is local (the packaged base, the shipped teacher): no Hub attempt per command
    subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def adapt(name: str, folder: Path, output: Path, args: ResultsAdaptArgs) -> dict:
    """Run ``ctxir adapt`` (continues a stopped run, skips a complete one); its record."""
    started = time.monotonic()
    extra = args.adapt_args.split() if args.adapt_args else []
    threads = ["--torch-threads", str(args.torch_threads)] if args.torch_threads else []
    made = read_json(output / "adapt.json").get("created") if (output / "adapt.json").is_file() else None
    _ctxir("adapt", "--corpus", str(folder), "--output", str(output), "--quiet", "true", *threads, *extra)
    record = read_json(output / "adapt.json")
    record["reused"] = record.get("created") == made  # ctxir adapt found it complete: its timings are older
    print(
        f"   {name}: adapted in {time.monotonic() - started:.0f} s here, {record['seconds']['total']:.0f} s recorded"
    )
    return record


def evaluate(folder: Path, model: str, split: str, run: str, out: Path, args: ResultsAdaptArgs) -> dict:
    """``ctxir evaluate`` of ``model`` (kept in ``out``; reused when there)."""
    if not out.is_file():
        flags = ["--data", str(folder), "--split", split, "--model", model, "--top-k", "20"]
        flags += ["--output", str(out)]
        threads = ["--torch-threads", str(args.torch_threads)] if args.torch_threads else []
        _ctxir("evaluate", *flags, *EVALS[run], *threads)
    return read_json(out)


def general_folder(name: str, out: Path) -> Path:
    """A ``GENERAL`` set as a BEIR folder under the work folder (at most ``DEV_QUESTIONS`` questions, seed 0)."""
    import random

    from ctxir.data import general, write_beir

    if (out / "qrels" / "dev.tsv").is_file():
        return out
    file, reader = GENERAL[name]
    found = getattr(general, reader)(DATA / "general" / file)
    qids = random.Random(0).sample(sorted(found.queries), min(DEV_QUESTIONS, len(found.queries)))
    write_beir(
        out, found.corpus, {q: found.queries[q] for q in qids}, {q: found.qrels[q] for q in qids}, "dev"
    )
    return out


def measure(name: str, args: ResultsAdaptArgs) -> dict:
    if name in GENERAL:
        folder, (label, split) = general_folder(name, ROOT / args.work / "data" / name), DEV[name]
    else:
        sub, label = COLLECTIONS[name]
        folder, split = DATA / sub, DEV[name][1] if args.dev else "test"
    output = adapter_folder(name, args.label, args)
    record = adapt(name, folder, output, args)
    models = {"before": DEFAULT_BI_ENCODER, "after": str(output)}
    # keyed by the adapter's weights: a re-adapted folder is evaluated again; the base's evaluations are shared
    tags = {"before": "base", "after": "adapted-" + _weights_hash(output)}
    per_query, rows, dense_runs, after = {}, [], {}, {}
    systems = DEV_SYSTEMS if args.dev else SYSTEMS
    for system, (run_before, run_after, stage) in systems.items():
        for when, model in models.items():
            run = run_before if when == "before" else run_after
            out = ROOT / args.work / "eval" / f"{name}-{split}-{tags[when]}-{run}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            result = evaluate(folder, model, split, run, out, args)
            per_query[when] = result["per_query"][stage]
            if system == "dense":
                dense_runs[when] = result["runs"]["dense"]
        after[system] = per_query["after"]
        test = paired_test(per_query["before"], per_query["after"], METRIC)
        before = sum(v[METRIC] for v in per_query["before"].values()) / len(per_query["before"])
        counts = {"delta": round(test["delta"], 4), "wins": test["wins"], "losses": test["losses"]}
        row = {"stage": system, "before": round(before, 4), "after": round(before + test["delta"], 4)}
        rows.append(row | counts | {"t_pvalue": round(test["t_pvalue"], 4)})
    against = versus(name, folder, split, after, systems, args) if args.against else None
    return {
        **({"against": against} if against else {}),
        "collection": label,
        "split": split,
        "queries": len(per_query["before"]),
        "documents": record["corpus"]["documents"],
        "adapt_seconds": record["seconds"]["total"],
        "adapt_seconds_by_step": record["seconds"],
        "adapt_complete": record["complete"],
        "pseudo_queries": record["queries"],
        "query_examples": record["query_examples"],
        "machine": None if record["reused"] else _machine(),  # None: the record's own, kept by run()
        "teacher": record["teacher"],
        "loss": record["loss"],
        "rows": rows,
        "dense_shared_with_bm25": bm25_overlap(folder, split, dense_runs),
    }


def adapter_folder(name: str, label: str, args: ResultsAdaptArgs) -> Path:
    """``<work>/<name>-<label>``, or ``<work>/<name>`` with no label."""
    return ROOT / args.work / (f"{name}-{label}" if label else name)


def versus(name: str, folder: Path, split: str, after: dict, systems: dict, args: ResultsAdaptArgs) -> dict:
    """--against: a paired test of this setting's adapter against another setting's, stage by stage."""
    other = adapter_folder(name, "" if args.against == "default" else args.against, args)
    if not (other / "adapt.json").is_file() or not read_json(other / "adapt.json").get("complete"):
        raise SystemExit(
            f"--against {args.against!r}: {other} holds no complete adapter; run that setting first "
            f"(--label {args.against}) or name another"
        )
    found = {"label": args.against, "teacher": read_json(other / "adapt.json")["teacher"], "stages": {}}
    for system, (_, run_after, stage) in systems.items():
        out = ROOT / args.work / "eval" / f"{name}-{split}-adapted-{_weights_hash(other)}-{run_after}.json"
        theirs = evaluate(folder, str(other), split, run_after, out, args)["per_query"][stage]
        test = paired_test(theirs, after[system], METRIC)
        counts = {"delta": round(test["delta"], 4), "wins": test["wins"], "losses": test["losses"]}
        found["stages"][system] = counts | {"t_pvalue": float(f"{test['t_pvalue']:.3g}")}  # p < 0.001 not 0
        print(
            f"   {name} {system}: {args.label or 'default'} − {args.against} {test['delta']:+.4f} "
            f"({test['wins']} wins, {test['losses']} losses, p {test['t_pvalue']:.3g})",
            flush=True,
        )
    return found


def bm25_overlap(folder: Path, split: str, runs: dict[str, dict]) -> dict[str, float]:
    """{"before": share, "after": share}: the mean share of dense's top ``OVERLAP_DEPTH`` that BM25's holds too."""
    from ctxir.data.beir import load_beir
    from ctxir.retrieval import BM25Retriever

    corpus, queries, _ = load_beir(folder, split)
    bm25 = BM25Retriever(corpus).search(queries, top_k=OVERLAP_DEPTH)
    top = {qid: {h.doc_id for h in hits} for qid, hits in bm25.items()}

    def share(run: dict) -> float:
        shares = [
            len(set(sorted(docs, key=docs.get, reverse=True)[:OVERLAP_DEPTH]) & top.get(qid, set()))
            / OVERLAP_DEPTH
            for qid, docs in run.items()
        ]
        return round(sum(shares) / len(shares), 4)

    return {when: share(run) for when, run in runs.items()}


def _weights_hash(folder: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(folder.glob("adapter_model.*")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _machine() -> str:
    import platform

    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), load average after: {load}"
    )


def _seeds(args: ResultsAdaptArgs) -> list[int]:
    if not args.seeds:
        return [DEFAULT_SEED]
    if not args.dev:
        raise SystemExit("--seeds measures a dev setting over several draws: add --dev true")
    if "--seed" in args.adapt_args.split():
        raise SystemExit("--seeds sets each run's --seed: take --seed out of --adapt-args")
    try:
        return [int(seed) for seed in args.seeds.split(",") if seed.strip()]
    except ValueError:
        raise SystemExit(
            f"--seeds {args.seeds!r} is not a comma list of whole numbers, e.g. 42,1,2"
        ) from None


def seeded(args: ResultsAdaptArgs, seed: int) -> ResultsAdaptArgs:
    """``args`` for one of --seeds: another seed than the default adds ``seed<N>`` to the labels and ``--seed N``."""
    if seed == DEFAULT_SEED:
        return args
    tag = f"seed{seed}"
    against = "" if not args.against else tag if args.against == "default" else f"{args.against}-{tag}"
    label = f"{args.label}-{tag}" if args.label else tag
    return replace(args, label=label, against=against, adapt_args=f"{args.adapt_args} --seed {seed}".strip())


def dev_records(name: str, args: ResultsAdaptArgs, seeds: list[int]) -> dict | None:
    """A dev setting at each of ``seeds`` (dev-<name>-<label>.json); with several, each stage's Δ by seed and mean."""
    stem = "dev" if name == "scifact" else f"dev-{name}"
    found = {}
    for seed in seeds:
        one = seeded(args, seed)
        result = measure(name, one)
        print(result, flush=True)
        path = ROOT / args.work / f"{stem}-{one.label or 'default'}.json"
        if result["machine"] is None:  # the adapter was reused: its record's load stays
            result["machine"] = read_json(path).get("machine") if path.is_file() else None
        write_json(path, result)
        found[seed] = result
    if len(seeds) < 2:
        return None

    def spread(parts: dict[int, dict[str, float]]) -> dict:
        deltas = {stage: [parts[seed][stage] for seed in seeds] for stage in next(iter(parts.values()))}
        return {stage: {"deltas": d, "mean": round(sum(d) / len(seeds), 4)} for stage, d in deltas.items()}

    summary = {
        "collection": found[seeds[0]]["collection"],
        "label": args.label or "default",
        "seeds": seeds,
        "stages": spread({s: {r["stage"]: r["delta"] for r in found[s]["rows"]} for s in seeds}),
    }
    if args.against:
        against = {s: {k: v["delta"] for k, v in found[s]["against"]["stages"].items()} for s in seeds}
        summary["against"] = {"label": args.against, "stages": spread(against)}
    shown = [("Δ", summary["stages"])] + (
        [(f"− {args.against}", summary["against"]["stages"])] if args.against else []
    )
    for what, stages in shown:
        for stage, values in stages.items():
            deltas = ", ".join(f"{d:+.4f}" for d in values["deltas"])
            line = f"   {name} {stage} {what} at seeds {args.seeds}: {deltas}; mean {values['mean']:+.4f}"
            print(line, flush=True)
    write_json(ROOT / args.work / f"{stem}-{args.label or 'default'}-seeds.json", summary)
    return summary


def run(args: ResultsAdaptArgs) -> dict:
    record_path = Path(args.record)
    record = read_json(record_path) if record_path.is_file() else {"collections": []}
    if not args.table_only:
        names = [n.strip() for n in args.collections.split(",") if n.strip()]
        known = DEV if args.dev else COLLECTIONS
        if args.against and not args.dev:
            raise SystemExit("--against compares two dev settings: add --dev true")
        bad = [n for n in names if n not in known]
        if bad:
            raise SystemExit(
                f"--collections {bad[0]!r} is not one of {', '.join(known)}"
                + ("" if args.dev else f" ({', '.join(GENERAL)} are dev sets: add --dev true)")
            )
        seeds = _seeds(args)
        for name in names:
            if args.dev:
                dev_records(name, args, seeds)
                continue
            result = measure(name, args)
            print(result, flush=True)
            kept = [r for r in record["collections"] if r["collection"] != result["collection"]]
            if result["machine"] is None:  # the adapter was reused: the load its timings were made under
                old = [r for r in record["collections"] if r["collection"] == result["collection"]]
                result["machine"] = old[0]["machine"] if old else f"{_machine()} (adapter reused)"
            record["collections"] = [*kept, result]
            labels = [label for _, label in COLLECTIONS.values()]
            record["collections"].sort(key=lambda r: labels.index(r["collection"]))
            write_json(record_path, record)
    if not args.dev:
        write_table(record, Path(args.doc))
        if args.training_doc:
            block = "\n".join(times(record))
            write_block(Path(args.training_doc), block, "### How long it took here, and the pseudo-queries")
    return record


def main(argv: list[str] | None = None) -> int:
    return cli_main(ResultsAdaptArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
