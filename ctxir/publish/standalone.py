"""Hub repos that sentence-transformers loads without ctxir (the full body, the heads' code named in modules.json),
and ``check_card_snippets``: a staged card's Python blocks run as a Hub reader would, offline, without ctxir."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ctxir.encoders import reranker_heads
from ctxir.encoders.models import HUB_MODULE_FILE, is_ctxir_modular, load_cross_encoder
from ctxir.files import disk_full, is_disk_full, read_json, write_json
from ctxir.names import CLS_LR_CONFIG, CLS_LR_WEIGHTS
from ctxir.types import CtxirError

HUB_CODE_FILE = f"{HUB_MODULE_FILE}.py"
BODY_TYPE = "sentence_transformers.base.modules.transformer.Transformer"
# What the standalone repo replaces (the body's saved form over a base) or rewrites (configs, checksums).
REPLACED_FILES = ("ctxir_top_layers.json", "top_layers.safetensors", "adapter_config.json", "modules.json")
REPLACED_FILES += ("adapter_model.safetensors", "sentence_bert_config.json", "config.json", "checksums.json")
REPLACED_FILES += ("metrics.json", "special_tokens_map.json", "vocab.txt")
SNIPPET_TIMEOUT_S = 600


def has_ctxir_heads(folder: Path) -> bool:
    """A cross-encoder whose modules.json chains ctxir's heads after its body."""
    return (folder / "modules.json").is_file() and is_ctxir_modular(folder)


def _hub_type(entry: dict) -> dict:
    """A modules.json entry as the staged repo names it: ctxir's heads by the file it carries."""
    kind = str(entry.get("type", ""))
    if not kind.startswith(("ctxir.", f"{HUB_MODULE_FILE}.")):
        return dict(entry)
    name = kind.rsplit(".", 1)[1]
    if not isinstance(getattr(reranker_heads, name, None), type):
        raise CtxirError(
            f"modules.json names {kind!r}, which ctxir.encoders.reranker_heads (the code a Hub repo carries) does "
            f"not define: only {HUB_MODULE_FILE}'s heads can be published standalone. Save the model with "
            "ctxir.encoders.heads' SegmentCosineHead, or with sentence-transformers' own modules"
        )
    return {**entry, "type": f"{HUB_MODULE_FILE}.{name}"}


def write_standalone_cross_encoder(src: Path, dest: Path, max_length: int | None = None) -> list[dict]:
    """The cross-encoder in ``src`` written to ``dest`` as a repo sentence-transformers loads alone; → modules.json."""
    from sentence_transformers.base.modules import Transformer

    entries = read_json(src / "modules.json") or [{"idx": 0, "name": "0", "path": "", "type": BODY_TYPE}]
    if entries[0].get("path", "") != "":
        raise CtxirError(
            f"{str(src / 'modules.json')!r} does not start with the transformer body at the folder's root: "
            "re-save the cross-encoder with sentence-transformers >= 6"
        )
    hub_entries = [{**entries[0], "type": BODY_TYPE}] + [_hub_type(e) for e in entries[1:]]
    # ctxir's loader puts the body together; a private copy, since its max length may be set below
    load_cross_encoder.cache_clear()
    body = load_cross_encoder(str(src), "cpu")[0]
    load_cross_encoder.cache_clear()
    if max_length:
        body.max_seq_length = int(max_length)
    dest.mkdir(parents=True, exist_ok=True)
    # the plain module's form: a TopLayersTransformer saves only its top layers
    Transformer.save(body, str(dest))
    for entry in entries[1:]:
        if entry.get("path") and (src / entry["path"]).is_dir():
            shutil.copytree(src / entry["path"], dest / entry["path"], dirs_exist_ok=True)
    write_json(dest / "modules.json", hub_entries)
    shutil.copy2(src / "config_sentence_transformers.json", dest / "config_sentence_transformers.json")
    if any(e["type"].startswith(f"{HUB_MODULE_FILE}.") for e in hub_entries):
        shutil.copy2(reranker_heads.__file__, dest / HUB_CODE_FILE)
    return hub_entries


def copy_side_files(src: Path, dest: Path) -> None:
    """ctxir's records beside the model (fusion, passages, evaluation), less the files the standalone form replaces."""
    for path in sorted(src.glob("*.json")):
        replaced = path.name in REPLACED_FILES or path.name.startswith("tokenizer")
        if not replaced and not (dest / path.name).exists():
            shutil.copy2(path, dest / path.name)


def write_standalone_cls_lr(src: Path, base_dir: Path, dest: Path) -> None:
    """A CLS-LR ranker over a ctxir cross-encoder: that cross-encoder standalone, ``ClsLrHead`` last (its logits)."""
    config = read_json(src / CLS_LR_CONFIG)
    if config.get("layer", -1) != -1:
        raise CtxirError(
            f"{str(src / CLS_LR_CONFIG)!r} reads [CLS] at layer {config.get('layer')!r}: a standalone CLS-LR repo "
            "reads the last layer's (layer -1). Fit it with --layer -1 to publish it"
        )
    entries = write_standalone_cross_encoder(base_dir, dest, max_length=config.get("max_length"))
    entries.append(
        {"idx": len(entries), "name": str(len(entries)), "path": "", "type": f"{HUB_MODULE_FILE}.ClsLrHead"}
    )
    write_json(dest / "modules.json", entries)
    shutil.copy2(reranker_heads.__file__, dest / HUB_CODE_FILE)
    shutil.copy2(src / CLS_LR_WEIGHTS, dest / CLS_LR_WEIGHTS)


def lay_into_hf_cache(
    folder: str | Path, repo_id: str, cache_dir: str | Path, revision: str | None = None
) -> Path:
    """Lay ``folder`` into the HF cache as ``hf download repo_id`` leaves it; → the snapshot folder."""
    folder = Path(folder)
    repo = Path(cache_dir) / ("models--" + repo_id.replace("/", "--"))
    files = sorted(
        p for p in folder.rglob("*") if p.is_file() and not p.relative_to(folder).parts[0].startswith(".")
    )
    digests = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    listing = "".join(f"{p.relative_to(folder)}:{d}" for p, d in digests.items())
    revision = revision or hashlib.sha1(listing.encode()).hexdigest()
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for path, digest in digests.items():
        blob = repo / "blobs" / digest
        if not blob.exists():
            shutil.copy2(path, blob)
        link = snapshot / path.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return snapshot


# A sitecustomize.py on PYTHONPATH: from interpreter start, `import ctxir` fails as where it is not installed.
CTXIR_BLOCKER = 'import sys\n\nsys.modules["ctxir"] = None  # ModuleNotFoundError on import\n'
# Runs a card's blocks, each in a fresh namespace: first those that do not import ctxir, with the blocker above in
# place since interpreter start; then, the blocker lifted, those that do (a user with ctxir installed).
SNIPPET_RUNNER = """import json, sys, traceback

blocks = json.loads(open(sys.argv[1], encoding="utf-8").read())
for block in sorted(blocks, key=lambda b: b["ctxir"]):
    if block["ctxir"] and sys.modules.get("ctxir", 0) is None:
        del sys.modules["ctxir"]  # the blocker lifted
    try:
        exec(compile(block["code"], f"<card block #{block['number']}>", "exec"), {"__name__": "__main__"})
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
    except BaseException:
        print(json.dumps({"number": block["number"], "ctxir": block["ctxir"], "error": traceback.format_exc()}))
        sys.exit(1)
"""


def python_blocks(card: str) -> list[str]:
    """The ```python blocks of a card, in order."""
    return re.findall(r"```python\n(.*?)```", card, flags=re.S)


def imports_ctxir(code: str) -> bool:
    """Whether a snippet imports ctxir (a plain ``import``/``from`` statement)."""
    return re.search(r"^\s*(from|import)\s+ctxir\b", code, flags=re.M) is not None


def hub_user_env(root: Path, cache: Path, block_ctxir: bool) -> dict[str, str]:
    """The environment of a user with the Hub cache ``cache``, offline; ``block_ctxir``: ``import ctxir`` fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHONPATH", "TRANSFORMERS_"))}
    env.update(HF_HOME=str(root / "hf-home"), HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    if block_ctxir:
        blocker = root / "no-ctxir"
        blocker.mkdir(exist_ok=True)
        (blocker / "sitecustomize.py").write_text(CTXIR_BLOCKER)
        env["PYTHONPATH"] = str(blocker)
    return env


def check_card_snippets(folder: str | Path, repo_id: str) -> int:
    """Run each ```python block of ``folder``'s card as a Hub reader of ``repo_id`` would, offline; → how many."""
    folder = Path(folder)
    blocks = python_blocks((folder / "README.md").read_text(encoding="utf-8"))
    if not blocks:
        return 0
    # beside the staged folder: the reader's copy is as large as the repo, so it goes on the disk staging writes to
    with tempfile.TemporaryDirectory(prefix=".ctxir-card-", dir=folder.resolve().parent) as tmp:
        root = Path(tmp)
        listed = [
            {"number": n, "code": code, "ctxir": imports_ctxir(code)} for n, code in enumerate(blocks, 1)
        ]
        try:
            lay_into_hf_cache(folder, repo_id, root / "hub")
            (root / "blocks.json").write_text(json.dumps(listed), encoding="utf-8")
            (root / "run_blocks.py").write_text(SNIPPET_RUNNER, encoding="utf-8")
        except OSError as err:
            if is_disk_full(err):
                raise disk_full(err.filename or root / "hub", err) from err
            raise
        run = subprocess.run(
            [sys.executable, str(root / "run_blocks.py"), str(root / "blocks.json")],
            cwd=root,
            env=hub_user_env(root, root / "hub", block_ctxir=True),
            capture_output=True,
            text=True,
            timeout=SNIPPET_TIMEOUT_S,
        )
        if run.returncode != 0:
            lines = run.stdout.strip().splitlines()
            failed = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
            number = failed["number"] if failed else "?"
            where = "with ctxir installed" if failed and failed["ctxir"] else "without ctxir"
            error = failed["error"] if failed else run.stderr
            raise CtxirError(
                f"the card of {repo_id!r} ({str(folder / 'README.md')!r}) has a Python block (#{number} of "
                f"{len(blocks)}) that fails when run {where}, offline, from the repo as `hf download` leaves it:\n"
                f"{error.strip()[-1500:]}\nFix the card's usage snippet (model_cards/) or the staged files: a card "
                "whose snippet fails is not staged"
            )
    return len(blocks)
