"""``python -m ctxir.classify --flags``: the same command as ``ctxir classify --flags``."""

import sys

from ctxir.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["classify", *sys.argv[1:]]))
