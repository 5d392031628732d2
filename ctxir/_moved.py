"""Old module paths kept importable after the modules moved into subpackages (issue #20 §2).

``MOVED`` maps each old path to the module that holds its code now. A finder at the end of ``sys.meta_path``
(installed when ``ctxir/__init__.py`` imports this module, first) answers for those names when no file has them:
it puts the new module in ``sys.modules`` under the old name too. Both names then give the
same module object, so classes, ``isinstance`` and ``monkeypatch.setattr`` on either name agree; importing an old
path warns (DeprecationWarning, kept for one release), except the one that saved model folders name.

The documented commands (``python -m ctxir.evaluate``, ``ctxir.report``, ``ctxir.hub``) stay files, because
``python -m`` runs a file: each calls :func:`alias`, which runs the moved module as ``__main__``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import runpy
import sys
import warnings
from types import ModuleType

MOVED = {
    "ctxir.models": "ctxir.encoders.models",
    "ctxir.rerank_heads": "ctxir.encoders.heads",
    "ctxir.pooling": "ctxir.encoders.pooling",
    "ctxir.onnx_backend": "ctxir.encoders.onnx_backend",
    "ctxir.internals": "ctxir.encoders.internals",
    "ctxir.fusion": "ctxir.retrieval.fusion",
    "ctxir.ann": "ctxir.retrieval.ann",
    "ctxir.engines": "ctxir.retrieval.engines",
    "ctxir.rerankers": "ctxir.rerank.registry",
    "ctxir.pipeline": "ctxir.rerank.pipeline",
    "ctxir.evaluate": "ctxir.evaluation.evaluate",
    "ctxir.tuning": "ctxir.evaluation.tuning",
    "ctxir.compare": "ctxir.evaluation.compare",
    "ctxir.report": "ctxir.evaluation.report",
    "ctxir.cards": "ctxir.publish.cards",
    "ctxir.hub": "ctxir.publish.hub",
}
# Named by files a user cannot fix by editing code: saved model folders' modules.json (the shipped ones in
# ctxir/assets/models say ctxir.rerank_heads.SegmentCosineHead). Kept without a warning.
QUIET = frozenset({"ctxir.rerank_heads"})


def _adopt(old: str, new: str, stacklevel: int) -> ModuleType:
    """Put module ``new`` in sys.modules as ``old`` too; ``stacklevel`` counts from the caller (warnings skips the
    import system's own frames, so the warning points at the line that imported ``old``)."""
    module = importlib.import_module(new)
    if old not in QUIET:
        warnings.warn(f"{old} moved to {new}; import it from there ({old} is kept for one release)",
                      DeprecationWarning, stacklevel=stacklevel + 1)
    sys.modules[old] = module
    return module


def alias(old: str, new: str) -> ModuleType | None:
    """For a file kept at an old path (a documented ``python -m`` command); ``old`` is the caller's ``__name__``."""
    if old == "__main__":
        # `python -m ctxir.evaluate`: run the moved module as the program, its argv and exit status unchanged.
        runpy.run_module(new, run_name="__main__", alter_sys=True)
        return None
    return _adopt(old, new, stacklevel=3)  # this function, the kept file, then the importing line


class OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of ``MOVED`` that have no file; loading one gives the moved module itself."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec):
        return None  # a blank module, replaced in sys.modules by exec_module

    def exec_module(self, module: ModuleType) -> None:
        # The import system returns what sys.modules holds under the name once this returns: the moved module.
        _adopt(module.__name__, MOVED[module.__name__], stacklevel=2)  # this method, then the importing line


def forward_names(package: str, module: str):
    """A package's ``__getattr__`` for a package that took an old module's name (``ctxir.data`` was data.py): any
    name the package does not define — the old module's imported helpers, its private functions — is read from
    ``module``, where that code lives now.

    >>> getattr_ = forward_names("ctxir.data", "ctxir.data.loaders")
    >>> getattr_("load_beir").__module__
    'ctxir.data.loaders'
    """

    def __getattr__(name: str):
        try:
            return getattr(importlib.import_module(module), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__


def install() -> None:
    """Add the finder once, last: a real file at a path (the commands kept as files) always wins."""
    if not any(isinstance(f, OldPathFinder) for f in sys.meta_path):
        sys.meta_path.append(OldPathFinder())


install()
