"""Only what pyproject.toml cannot say: the card templates in the repository's model_cards/ ship inside the package,
as ``ctxir/model_cards`` (``ctxir.publish.cards`` reads them there once installed), while every ``ctxir*`` package
is still found by itself. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["ctxir", "ctxir.*"]), "ctxir.model_cards"],
    package_dir={"ctxir.model_cards": "model_cards"},
)
