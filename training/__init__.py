"""Training scripts: run from a checkout's root, as ``python training/<script>.py`` or ``python -m training.<script>``.

Not installed with ctxir; each entry point run as a file puts the repo root on ``sys.path`` with one guarded line.
"""
