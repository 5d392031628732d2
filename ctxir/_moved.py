"""Old module paths kept importable after the modules moved into subpackages (``ctxir.rerank_heads`` is
``ctxir.encoders.heads``, ...).

An old path's file calls :func:`alias`, which puts the new module in ``sys.modules`` under the old name too: both
names give the same module object, so classes, ``isinstance`` and ``monkeypatch.setattr`` on either name agree.
Run as ``python -m <old path>``, the old file runs the new module as ``__main__`` instead, so documented commands
keep working.
"""

from __future__ import annotations

import importlib
import runpy
import sys
import warnings
from types import ModuleType


def alias(old: str, new: str, *, warn: bool = True) -> ModuleType | None:
    """Make module ``old`` the module ``new``; ``old`` is the caller's ``__name__``.

    ``warn``: emit a DeprecationWarning naming the new path (pointing at the importing line). Off for paths that
    files on disk name (saved model folders' ``modules.json``), which a user cannot change by editing code.
    """
    if old == "__main__":
        # `python -m ctxir.evaluate`: run the moved module as the program, its argv and exit status unchanged.
        runpy.run_module(new, run_name="__main__", alter_sys=True)
        return None
    module = importlib.import_module(new)
    if warn:
        warnings.warn(f"{old} moved to {new}; import it from there ({old} is kept for one release)",
                      DeprecationWarning, stacklevel=3)
    sys.modules[old] = module
    return module
