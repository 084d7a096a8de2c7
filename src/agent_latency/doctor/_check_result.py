"""What one check of ``doctor`` found, made safe to print."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from enum import StrEnum


class CheckStatus(StrEnum):
    """The verdict of one check."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


def printable(text: str) -> str:
    """Returns ``text`` with every control or format character shown as an escape.

    A model name or a server message may hold escape codes, newlines or bidirectional overrides;
    printed raw, they would recolour the terminal, forge extra lines or reorder the text.
    ``"gpt\\x1b[31m"`` becomes ``"gpt\\\\x1b[31m"``: visible, on one line.
    """
    return text if text.isprintable() else "".join(map(_shown, text))


def _shown(char: str) -> str:
    if char.isprintable():
        return char
    if unicodedata.category(char) == "Zs":  # a space other than " ", e.g. no-break: harmless
        return " "
    return char.encode("unicode_escape").decode("ascii")


@dataclass(frozen=True)
class CheckResult:
    """One finding of ``doctor``.

    The message and the fix may quote settings and server answers; they are passed through
    :func:`printable`, so a result is always safe to print on one line.

    Attributes:
        name: What was checked, e.g. ``"streaming"``.
        status: pass, warn or fail.
        message: One line saying what was found.
        fix: What to change when the status is not pass (empty otherwise).
    """

    name: str
    status: CheckStatus
    message: str
    fix: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", printable(self.message))
        object.__setattr__(self, "fix", printable(self.fix))
