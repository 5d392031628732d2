"""Public API docs (issue #11): every name in ``ctxir.__all__`` carries a short example, and the examples run.

Examples that need no real model run here, in the default test run, through the standard library's ``doctest``
(pytest's ``--doctest-modules`` stays off: ``addopts`` is left alone). Lines that load a model are marked
``# doctest: +SKIP``; ``test_model_examples`` runs them unskipped with the packaged all-MiniLM-L6-v2 under
``-m slow``, so a skipped example is still checked to be true.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import io
import re
from pathlib import Path

import pytest

import ctxir
from ctxir.encoders.models import DEFAULT_BI_ENCODER, DEFAULT_CROSS_ENCODER, resolve_model
from ctxir.types import CtxirError

PACKAGE = Path(ctxir.__file__).resolve().parent

# Public names still without an example. Checked to be exactly the names that lack one: a new public name without
# an example fails until it gets one (or is added here, in review), and a name that gets one fails until removed.
PENDING: set[str] = set()

# Docstrings whose +SKIP lines load a model → the model those lines need. ``test_model_examples`` runs them
# unskipped (``-m slow``) where that model can be had offline.
MODEL_EXAMPLES = {
    "ctxir.classify.classifiers.ZeroShotClassifier": DEFAULT_BI_ENCODER,
    "ctxir.encoders.bi_encoder.BiEncoder": DEFAULT_BI_ENCODER,
    "ctxir.evaluation.metrics.paired_retrieval": DEFAULT_BI_ENCODER,
    "ctxir.explain.attention.cls_attention": DEFAULT_BI_ENCODER,
    "ctxir.explain.bi_encoder.explain_bi_encoder": DEFAULT_BI_ENCODER,
    "ctxir.explain.rerankers.explain_cls_lr": DEFAULT_BI_ENCODER,
    "ctxir.explain.rerankers.explain_cross_encoder": DEFAULT_BI_ENCODER,  # the packaged MiniLM body with a fresh head
    "ctxir.encoders.internals.inspect_text": DEFAULT_BI_ENCODER,
    "ctxir.encoders.models": DEFAULT_CROSS_ENCODER,  # loads both defaults
    "ctxir.encoders.models.resolve_model": DEFAULT_BI_ENCODER,
    "ctxir.rerank.cls_lr.ClsLrRanker": DEFAULT_BI_ENCODER,
    "ctxir.rerank.rankers.CrossEncoderReranker": DEFAULT_CROSS_ENCODER,
    "ctxir.rerank.registry.rank": DEFAULT_CROSS_ENCODER,
    "ctxir.retrieval.retrievers.DenseRetriever": DEFAULT_BI_ENCODER,
    "ctxir.retrieval.retrievers.HybridRetriever": DEFAULT_BI_ENCODER,
}
# Skipped because what they print depends on the machine (a GPU or not), not because they load a model.
MACHINE_DEPENDENT = {"ctxir.encoders.models.pick_device"}


def modules_with_examples() -> list[str]:
    """Every ctxir module whose source holds a ``>>>`` (a cheap text scan; the modules are imported by the tests)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def find_examples(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    return [t for t in doctest.DocTestFinder().find(module) if t.examples]


def run_examples(tests: list[doctest.DocTest], unskip: bool = False) -> tuple[doctest.TestResults, str]:
    """Run ``tests`` as ``doctest`` would; ``unskip`` runs +SKIP examples too. Returns (results, report)."""
    report = io.StringIO()
    runner = doctest.DocTestRunner()
    for test in tests:
        if unskip:
            for example in test.examples:
                example.options.pop(doctest.SKIP, None)
        runner.run(test, out=report.write)
    failed, attempted = runner.summarize(verbose=False)
    return doctest.TestResults(failed, attempted), report.getvalue()


@pytest.mark.parametrize("module_name", modules_with_examples())
def test_examples_run(module_name):
    tests = find_examples(module_name)
    assert tests, f"{module_name} holds '>>>' but doctest finds no example in its docstrings"
    results, report = run_examples(tests)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed:\n{report}"


def public_names() -> tuple[dict[str, object], dict[str, str]]:
    """({class or function name: object}, {constant or type alias name: defining module})."""
    init = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    imported_from = {
        alias.asname or alias.name: node.module
        for node in init.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    documented, values = {}, {}
    for name in ctxir.__all__:
        obj = getattr(ctxir, name)
        if inspect.isclass(obj) or inspect.isroutine(inspect.unwrap(obj)):
            documented[name] = obj
        else:
            values[name] = imported_from[name]
    return documented, values


def own_docstring(obj) -> str:
    # a class's own: not one inherited from a base class, nor the signature a dataclass writes when it has none
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    return doc or ""


def test_every_public_name_has_an_example():
    documented, values = public_names()
    parser = doctest.DocTestParser()
    missing = set()
    for name, obj in documented.items():
        doc = own_docstring(obj)
        if not parser.get_examples(doc):
            missing.add(name)
            continue
        # the example must also be one test_examples_run collects (e.g. not hidden behind a wrapper doctest skips)
        collected = {t.docstring for t in find_examples(inspect.unwrap(obj).__module__)}
        assert doc in collected, f"{name}'s example is not collected by doctest from {obj.__module__}"
    for name, module_name in values.items():
        module = importlib.import_module(module_name)
        source = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
        assigned = {
            target.id
            for node in source.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        assert name in assigned, f"{name} is not defined in {module_name}, where ctxir imports it from"
        examples = parser.get_examples(module.__doc__ or "")
        if not any(re.search(rf"\b{name}\b", example.source) for example in examples):
            missing.add(name)
    assert missing == PENDING, (
        f"public names without an example: {sorted(missing - PENDING)}; in PENDING but not missing one (they have an "
        f"example now, or are not in ctxir.__all__): remove {sorted(PENDING - missing)} from PENDING"
    )


def test_every_skipped_example_is_checked_elsewhere():
    """A +SKIP example is either run under -m slow with a model, or declared machine-dependent."""
    skipping = {
        t.name
        for m in modules_with_examples()
        for t in find_examples(m)
        if any(e.options.get(doctest.SKIP) for e in t.examples)
    }
    assert skipping == set(MODEL_EXAMPLES) | MACHINE_DEPENDENT, (
        f"+SKIP examples not listed in MODEL_EXAMPLES or MACHINE_DEPENDENT: {sorted(skipping - set(MODEL_EXAMPLES))}"
        f"; listed but with no +SKIP example: {sorted(set(MODEL_EXAMPLES) | MACHINE_DEPENDENT - skipping)}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("test_name", sorted(MODEL_EXAMPLES))
def test_model_examples(test_name, tmp_path, monkeypatch):
    """The examples that load a model, +SKIP removed: true with the real model, not only well-formed."""
    try:
        resolve_model(MODEL_EXAMPLES[test_name])
    except CtxirError as err:
        pytest.skip(f"{MODEL_EXAMPLES[test_name]} cannot be had here: {err}")
    monkeypatch.setenv("CTXIR_CACHE", str(tmp_path))  # BiEncoder's embedding cache stays out of ~/.cache
    module_name = max(
        (m for m in modules_with_examples() if test_name == m or test_name.startswith(m + ".")), key=len
    )
    tests = [t for t in find_examples(module_name) if t.name == test_name]
    results, report = run_examples(tests, unskip=True)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed:\n{report}"
