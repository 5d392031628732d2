"""The ``ctxir`` console script (``python -m ctxir``) and the typed-arguments runner its commands share; each also
takes ``--recipe FILE.yaml`` (flag: value lines), read first, so the command line's flags override it."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxir.types import CtxirError

RECIPE_HELP = "YAML file of flag: value settings, read first; flags given on the command line override it"


def flag(default: Any = dataclasses.MISSING, help: str = "", **metadata) -> Any:
    """A dataclass field for ``HfArgumentParser``: its default, ``--help`` text and other metadata (``choices``)."""
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


def cli_main(
    args_class: type,
    run: Callable[[Any], Any],
    argv: list[str] | None = None,
    recipe_dirs: Sequence[str | Path] = (),
) -> int:
    """Parse ``args_class``, call ``run(args)``; → 0 or ``run``'s int; a CtxirError prints one line, → 2."""
    try:
        args = parse_args(args_class, argv, recipe_dirs)
        result = run(args)
    except CtxirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def parse_args(
    args_class: type, argv: list[str] | None = None, recipe_dirs: Sequence[str | Path] = ()
) -> Any:
    """``args_class`` from ``argv``, after a ``--recipe FILE`` (in the working directory, else ``recipe_dirs``)."""
    parser = build_parser(args_class)
    spellings = flag_spellings(args_class)
    argv = list(sys.argv[1:] if argv is None else argv)
    recipe = None  # the last --recipe PATH / --recipe=PATH
    for i, word in enumerate(argv):
        if word.startswith("--recipe="):
            recipe = word.split("=", 1)[1]
        elif word == "--recipe":
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                raise CtxirError("--recipe needs a path: give the YAML file, e.g. --recipe recipes/NAME.yaml")
            recipe = argv[i + 1]
    if recipe is not None:  # as given (relative to the working directory), else under each of recipe_dirs
        tried = [Path(recipe)] + (
            [] if Path(recipe).is_absolute() else [Path(d) / recipe for d in recipe_dirs]
        )
        path = next((candidate for candidate in tried if candidate.is_file()), None)
        if path is None:
            raise CtxirError(
                f"--recipe {recipe!r} is not a file (looked in {', '.join(repr(str(c)) for c in tried)}): "
                "give the path of a recipe YAML file"
            )
        keys = {k: name for k, name in spellings.items() if name != "recipe"}
        argv = recipe_argv(path, keys, flag_names(args_class)) + argv
    try:
        return parser.parse_args_into_dataclasses(args=argv)[0]
    except ValueError as err:  # a library class's own checks (TrainingArguments.__post_init__)
        reason = " ".join(str(err).split())
        raise CtxirError(f"{reason} (a flag or recipe value): fix it; --help lists the flags") from None


def build_parser(args_class: type):
    """``args_class``'s HfArgumentParser (+ ``--recipe``); --help shows each flag once."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(args_class)
    if "recipe" not in flag_spellings(args_class):
        parser.add_argument("--recipe", default="", help=RECIPE_HELP)
    shown = flag_names(args_class)
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if len(longs) < 2:
            continue
        own = {f"--{action.dest}", f"--{action.dest.replace('_', '-')}"}
        negated = all(o.startswith("--no") and o not in own for o in longs)
        name = shown.get(action.dest, action.dest.replace("_", "-"))
        keep = f"--no-{name}" if negated and f"--no-{name}" in longs else f"--{name}"
        if keep not in longs:  # a spelling flag_names does not know: the dashed one HfArgumentParser added
            keep = next((o for o in longs if "_" not in o), longs[0])
        action.option_strings = [o for o in action.option_strings if not o.startswith("--")] + [keep]
    parser.epilog = "Each flag also takes underscores for its dashes (--a_flag for --a-flag), as recipes do."
    return parser


def flag_names(args_class: type) -> dict[str, str]:
    """Each field → its flag without ``--``: the first of its ``aliases`` metadata, else its name with dashes."""
    return {
        f.name: (f.metadata.get("aliases") or [f.name.replace("_", "-")])[0].removeprefix("--")
        for f in dataclasses.fields(args_class)
        if f.init
    }


def flag_spellings(args_class: type) -> dict[str, str]:
    """Every key a recipe may name a field by (its name, each alias, underscores for dashes) → the field's name."""
    found: dict[str, str] = {}
    for f in dataclasses.fields(args_class):
        if f.init:
            found[f.name] = f.name
            for alias in f.metadata.get("aliases", []):
                found.setdefault(alias.removeprefix("--").replace("-", "_"), f.name)
    return found


def recipe_argv(path: Path, keys: Mapping[str, str], shown: Mapping[str, str] | None = None) -> list[str]:
    """A recipe's mapping as ``--field value`` words, each key checked against ``keys``."""
    import yaml

    try:
        recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        reason = " ".join(str(err).split())
        raise CtxirError(f"--recipe {str(path)!r} is not valid YAML ({reason}): fix the file") from None
    if recipe is None:
        return []
    if not isinstance(recipe, dict):
        raise CtxirError(
            f"--recipe {str(path)!r} holds a {type(recipe).__name__}, not a mapping: write one 'flag: value' a line"
        )
    words: list[str] = []
    for key, value in recipe.items():
        name = keys.get(str(key).removeprefix("--").replace("-", "_"))
        if name is None:
            fields = dict.fromkeys(keys.values())
            valid = ", ".join((shown or {}).get(n, n.replace("_", "-")) for n in fields)
            raise CtxirError(
                f"--recipe {str(path)!r} sets unknown flag {key!r}: use one of {valid} (dashes or underscores)"
            )
        if value is None or isinstance(value, dict):
            raise CtxirError(
                f"--recipe {str(path)!r} gives {key!r} the value {value!r}: give text, a number, true/false "
                "or a list, or leave the key out for the default"
            )
        values = value if isinstance(value, list) else [value]
        words += [f"--{name}", *(str(v).lower() if isinstance(v, bool) else str(v) for v in values)]
    return words


def command_line(
    prefix: str,
    args_class: type,
    config: Mapping[str, Any],
    always: Sequence[str] = (),
    replace: Mapping[str, str] | None = None,
) -> str:
    """The command reproducing ``config`` (``always`` flags first, even at their default; ``replace``: path prefixes)."""
    defaults = {f.name: f.default for f in dataclasses.fields(args_class) if f.name != "recipe"}
    flags = flag_names(args_class)
    parts = [prefix]
    for key in [k for k in always if k in config] + [k for k in config if k not in always]:
        value = config[key]
        if key not in defaults or (key not in always and value == defaults[key]):
            continue
        if isinstance(value, str):
            for old, new in (replace or {}).items():
                value = value.replace(old, new)
        parts.append(f"--{flags[key]} {str(value).lower() if isinstance(value, bool) else value}")
    return " ".join(parts)


# subcommand → (the module whose ``main(argv)`` runs it, what it does); imported only when chosen
COMMANDS = {
    "evaluate": (
        "ctxir.evaluation.evaluate",
        "retrieve (and re-rank) a BEIR collection; metrics, runs, paired tests",
    ),
    "compare": (
        "ctxir.evaluation.compare",
        "compare saved runs or results JSONs query by query, with paired tests",
    ),
    "report": ("ctxir.evaluation.report", "the failure report (HTML) of an evaluation's results JSON"),
    "classify": (
        "ctxir.classify.cli",
        "classify texts with the encoders: zero-shot, kNN, logistic regression",
    ),
    "adapt": ("ctxir.adapt.cli", "adapt the bi-encoder to a corpus without labels (a LoRA adapter)"),
    "hub": (
        "ctxir.publish.hub",
        "stage, validate and push a trained model with its card to the Hugging Face Hub",
    ),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    head = ["usage: ctxir COMMAND [--flags]   (or python -m ctxir COMMAND)", "", "commands:"]
    return "\n".join([*head, *lines, "", "ctxir COMMAND --help lists a command's flags."])


def main(argv: list[str] | None = None) -> int:
    """``ctxir COMMAND --flags``: the first word picks the command (its module is imported only then)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        got = f"unknown command {argv[0]!r}: " if argv else "no command given: "
        print(f"{usage()}\n\nerror: {got}give one of {', '.join(COMMANDS)} first", file=sys.stderr)
        return 2
    module, _ = COMMANDS[argv[0]]
    sys.argv[0] = f"ctxir {argv[0]}"  # argparse's usage line names the command as typed
    return importlib.import_module(module).main(argv[1:])
