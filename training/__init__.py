"""Training scripts: run from a checkout's root, as ``python training/<script>.py`` or ``python -m training.<script>``.

Not installed with ctxir (``pyproject.toml`` packages ``ctxir*`` only); ``ctxir`` itself comes from the installed
package (``requirements-dev.txt`` has ``-e .``). A script run as a file has ``training/`` on ``sys.path``, not the
root that ``from training.common import ...`` needs, so each entry point keeps one guarded line,
``if __package__ in (None, ""): sys.path.insert(0, <repo root>)``: the only path shim left in the repository
besides the two scripts/ that import ``training``/``benchmarks``.
"""
