"""MaxP windows: how a cross-encoder reads a document longer than its max length (a folder's passages.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ctxir.files import verify_checksums
from ctxir.types import CtxirError


@dataclass(frozen=True)
class Passages:
    """MaxP (Dai & Callan, 2019): windows of ``words`` words every ``stride`` words, each scored after the title;
    the document scores as its best window.

    >>> Passages(words=3, stride=2).split("Otters", "a b c d e f")
    ['Otters a b c', 'Otters c d e', 'Otters e f']
    >>> Passages(words=3, stride=4)
    Traceback (most recent call last):
        ...
    ctxir.types.CtxirError: passages words=3, stride=4: need 1 ≤ stride ≤ words (windows that skip no word), e.g. words=70, stride=50
    """

    words: int = 70
    stride: int = 50
    read_tokens: int = 0

    def __post_init__(self):
        if not 1 <= self.stride <= self.words:
            raise CtxirError(
                f"passages words={self.words!r}, stride={self.stride!r}: need 1 ≤ stride ≤ words "
                "(windows that skip no word), e.g. words=70, stride=50"
            )

    def split(self, title: str, text: str) -> list[str]:
        """The windows of ``text``, each after ``title``; a text of ≤ ``words`` words is one window."""
        words, title = text.split(), title.strip()
        out = []
        for start in range(0, max(len(words) - self.words + self.stride, 1), self.stride):
            out.append(" ".join(([title] if title else []) + words[start : start + self.words]))
            if start + self.words >= len(words):
                break
        return out

    @classmethod
    def from_file(cls, path: str | Path) -> Passages | None:
        """passages.json: {"method": "max", "words", "stride"[, "read_tokens"]} → Passages; {"method": "first"} → None."""
        verify_checksums(Path(path).parent, only=path)
        try:
            record = json.loads(Path(path).read_text())
            if record["method"] == "first":
                return None
            if record["method"] != "max":
                raise ValueError(f"method {record['method']!r} is neither 'max' nor 'first'")
            return cls(int(record["words"]), int(record["stride"]), int(record.get("read_tokens", 0)))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CtxirError(
                f"{str(path)!r} is not a passages.json ({type(err).__name__}: {err}): expected "
                '{"method": "max", "words": 70, "stride": 50} or {"method": "first"}'
            ) from err
