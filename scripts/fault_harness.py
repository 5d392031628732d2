"""The write-fault harness of ``scripts/faults.py``: an operation run with its N-th write failing (ENOSPC)."""

from __future__ import annotations

import builtins
import contextlib
import errno
import importlib
import io
import os
import shutil
import sys
from pathlib import Path

MAX_WRITES = 400  # more than any operation below needs: a loop that never completes is a failure


class WriteFaults:
    """The ``n``-th write (``forever``: and every later one) under ``under`` raises ENOSPC."""

    def __init__(self, n: int, forever: bool = False, under: Path | None = None):
        self.n, self.forever, self.count, self.failed = n, forever, 0, 0
        self.under = None if under is None else str(Path(under).resolve())

    def counts(self, target) -> bool:
        if self.under is None:
            return True
        if not isinstance(target, str | os.PathLike):
            return False  # a file descriptor or buffer: not a file under the folder
        return os.path.abspath(os.fspath(target)).startswith(self.under)

    def hit(self, target=None) -> None:
        if target is not None and not self.counts(target):
            return
        self.count += 1
        if self.count == self.n or (self.forever and self.count > self.n):
            self.failed += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def opener(self, real_open):
        faults = self

        class Faulty:
            def __init__(self, handle):
                self._handle = handle

            def write(self, data):
                faults.hit()
                return self._handle.write(data)

            def writelines(self, lines):
                faults.hit()
                return self._handle.writelines(lines)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return self._handle.__exit__(*exc)

            def __iter__(self):
                return iter(self._handle)

            def __getattr__(self, name):
                return getattr(self._handle, name)

        def faulty_open(file, mode="r", *args, **kwargs):
            handle = real_open(file, mode, *args, **kwargs)
            writes = any(c in mode for c in "wax+") and faults.counts(file)
            return Faulty(handle) if writes else handle

        return faulty_open

    def native(self, patch, module, name: str, target_arg: int) -> None:
        """``module.name`` counts one write (to its argument ``target_arg``) before it runs."""
        real = getattr(module, name)

        def faulty(*args, **kwargs):
            self.hit(args[target_arg] if len(args) > target_arg else next(iter(kwargs.values()), None))
            return real(*args, **kwargs)

        patch.setattr(module, name, faulty)

    def install(self, patch) -> None:
        """``patch``: a ``pytest.MonkeyPatch``, undone when its context ends."""
        opener = self.opener(io.open)
        patch.setattr(builtins, "open", opener)
        patch.setattr(io, "open", opener)
        self.native(patch, shutil, "copyfile", 1)  # copy2 and copytree copy through it, in the kernel
        for module, name, target in (
            ("faiss", "write_index", 1),
            ("safetensors.torch", "serialize_file", 1),
            ("safetensors.numpy", "serialize_file", 1),
            ("torch", "save", 1),
        ):
            # torch and safetensors are patched where the scenario has loaded them: a cheap scenario imports neither
            if module == "faiss" or module.split(".")[0] in sys.modules:
                with contextlib.suppress(ImportError):
                    self.native(patch, importlib.import_module(module), name, target)


# the failure points the default test run tries at a slow site (None: every point)
SAMPLE: int | None = None


def each_failure(fn, check, folder: Path, forever: bool, errors=None, under=None, sample=False) -> int:
    """``fn()`` with its 1st, 2nd, ... write failing until one run meets none; each leaves no temporary and passes
    ``check(result or raised error, failed)``. Returns the failure points tried (``sample``: the first ``SAMPLE``)."""
    import pytest

    from ctxir.files import DiskFullError

    errors = errors or DiskFullError

    def operation():  # the result, or the error it raised
        try:
            return fn()
        except errors as err:
            return err

    last = SAMPLE if sample and SAMPLE else MAX_WRITES
    for n in range(1, MAX_WRITES):
        with pytest.MonkeyPatch.context() as patch:
            faults = WriteFaults(n, forever, under)
            faults.install(patch)
            outcome = operation()
        assert leftovers(folder) == []
        check(outcome, faults.failed > 0)
        if not faults.failed:
            return n - 1
        if n >= last:  # sampled: the next run, on a disk with room again, still succeeds
            outcome = operation()
            assert leftovers(folder) == []
            check(outcome, False)
            return n
    raise AssertionError(f"the operation still wrote after {MAX_WRITES} writes")


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if ".tmp" in p.name)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path."""
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in files}


def stopped(err, failed: bool, folder: Path) -> None:
    """A run that met the fault stopped with one DiskFullError naming ``folder``; one that did not, raised none."""
    from ctxir.files import DiskFullError

    assert isinstance(err, DiskFullError) == failed, err
    if failed:
        assert "no space left on the disk holding" in str(err) and "free space there" in str(err), err
        assert str(folder.resolve()) in str(err), (str(folder), str(err))


def tiny_bert(folder: Path) -> Path:
    """A random 2-layer BERT (hidden 32) saved like a Hub download: loaded, exported and trained in seconds."""
    from tests.tiny_models import save_tiny_bert

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = ["the", "river", "bank", "otters", "dig", "dens", "in", "money", "loan", "bats", "night", "moths"]
    return save_tiny_bert(folder, [*special, *"abcdefghijklmnopqrstuvwxyz0123456789.,!?'", *words])
