"""Publish a training output to the Hugging Face Hub: stage, validate, upload (``ctxir hub push``).

    python training/push_to_hub.py --model-dir outputs/bi-scifact --repo-id you/minilm-scifact-bi-encoder --dry-run

Exit codes: 0 done (or dry run), 2 refused (nothing uploaded), 3 staged and validated but not uploaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # `python training/push_to_hub.py` from the repo root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxir.publish.hub import PushArgs, run_push


def main(argv: list[str] | None = None) -> int:
    from transformers import HfArgumentParser

    # 1. parse the typed arguments (PushArgs documents every flag: --help)
    (args,) = HfArgumentParser(PushArgs).parse_args_into_dataclasses(args=argv)
    # 2. stage → validate → upload (or print the hf upload command with --dry-run)
    return run_push(args)


if __name__ == "__main__":
    sys.exit(main())
