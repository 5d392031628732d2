"""Input checks shared by the library's public entry points and the app, each checking its input once: one message
per mistake, said one way. No torch import: the app and CLIs use these before any model loads."""

from __future__ import annotations

import numbers
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from ctxir.types import CtxirError

# Unicode categories that show nothing: controls, format (zero-width space, BOM), separators, surrogates, unassigned
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Cn", "Zs", "Zl", "Zp"})


def is_blank(text: str) -> bool:
    """True when ``text`` has no character a person can see (a tokenizer would drop them all).

    >>> is_blank(" \\x00\\t\\u200b"), is_blank("\\x00a")
    (True, False)
    """
    return all(unicodedata.category(char) in _INVISIBLE for char in text)


def check_text(
    text: Any, what: str, max_chars: int | None = None, required: bool = True, hint: str = "type some text"
) -> str:
    """``text`` stripped; refuses non-text, blank (when ``required``) and more than ``max_chars`` characters."""
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise CtxirError(f"{what} must be text, got {type(text).__name__}")
    if required and is_blank(text):
        raise CtxirError(f"{what} is empty: {hint}")
    if max_chars is not None and len(text) > max_chars:
        raise CtxirError(
            f"{what} has {len(text):,} characters but at most {max_chars:,} are accepted: "
            f"shorten it (it begins {text[:40]!r})"
        )
    return text.strip()


def check_query(text: Any, max_chars: int | None = None) -> str:
    return check_text(text, "query", max_chars, hint="type a few words to search for")


def check_queries(queries: Mapping[str, Any]) -> dict[str, str]:
    """Every query of a batch ``{qid: text}`` is text; the first empty one is named."""
    for qid, text in queries.items():
        if not isinstance(text, str) or is_blank(text):
            raise CtxirError(f"query {qid!r} is empty: remove it or give it text")
    return dict(queries)


def check_top_k(top_k: Any) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise CtxirError(f"top_k must be a whole number ≥ 1, got {top_k!r}")
    return int(top_k)


def check_corpus(corpus: Mapping) -> Mapping:
    if not corpus:
        raise CtxirError("corpus is empty: load or upload at least one document")
    return corpus


def check_choice(value: Any, what: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise CtxirError(f"{what} {value!r} is not known: use one of {', '.join(map(repr, choices))}")
    return value


def check_int(value: Any, what: str, low: int, high: int) -> int:
    """A whole number in [low, high]; 3.0 and "3" are accepted (sliders and API users send those), 2.5 is not."""
    number = None
    whole = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if whole or (isinstance(value, float) and value.is_integer()):
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    if number is None or not low <= number <= high:
        raise CtxirError(f"{what} must be a whole number from {low} to {high}, got {value!r}")
    return number


def check_options(kind: type, options: dict):
    """``kind(**options)`` for a dataclass ``kind``; an unknown option is named beside the valid ones."""
    valid = [f.name for f in fields(kind)]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise CtxirError(f"unknown option(s) {', '.join(map(repr, unknown))}: valid are {', '.join(valid)}")
    return kind(**options)


class LiveChoices(Sequence):
    """A registry's choices read when asked (argparse's ``choices``): a kind registered after import is offered.

    >>> kinds = {"bm25": 1}
    >>> choices = LiveChoices(lambda: tuple(kinds))
    >>> kinds["title-match"] = 2
    >>> "title-match" in choices, list(choices)
    (True, ['bm25', 'title-match'])
    """

    def __init__(self, read: Callable[[], tuple[str, ...]]):
        self._read = read

    def __getitem__(self, index):
        return self._read()[index]

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return repr(self._read())
