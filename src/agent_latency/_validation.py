"""Checking the numbers and files users and servers give: one rule for each.

Every option is checked with :func:`checked_int`, :func:`checked_number` or :func:`checked_bool`,
so every bad option gets the same error naming the owner, the option, what it must be and the
value given (``TypeError`` for the wrong type, ``ValueError`` out of bounds). A file read whole is
checked with :func:`file_problem` first, so ``/dev/zero`` cannot exhaust memory nor a FIFO hang.
"""

from __future__ import annotations

import math
import os
import stat
from typing import Final, TypeGuard

MAX_FILE_BYTES: Final = 64 * 1024 * 1024
"""The largest file read whole: a conversation of this size is far beyond any context window."""


def is_integer(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a whole number (an ``int``, not a ``bool``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a whole number or a finite ``float``."""
    if isinstance(value, float):
        return math.isfinite(value)
    return is_integer(value)


def checked_int(
    owner: str, name: str, value: object, *, minimum: int | None = None, hint: str | None = None
) -> int:
    """Returns ``value`` if it is a whole number of at least ``minimum``; ``owner`` (e.g.
    ``"PriorityTrimmer"``), ``name`` and ``hint`` (shown in brackets) go into the error.

    Raises:
        TypeError: When ``value`` is not an ``int`` (a ``bool``, a float, a string):
            ``"{owner}: {name} must be an integer >= {minimum} ({hint}), got {value!r}."``
        ValueError: The same message, when it is below ``minimum``.
    """
    if not is_integer(value) or (minimum is not None and value < minimum):
        bound = _bound(minimum, above=False)
        raise _error(owner, name, value, "an integer", bound, hint, is_integer(value))
    return value


def checked_number(
    owner: str,
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    above: bool = False,
    maximum: float | None = None,
    hint: str | None = None,
) -> float:
    """Returns ``value`` as a float if it is a number within the bounds (above ``minimum`` when
    ``above``, ``maximum`` included), named as for :func:`checked_int`.

    Raises:
        TypeError: When ``value`` is not an ``int`` or a ``float`` (a ``bool``, a string):
            ``"{owner}: {name} must be a finite number > {minimum}, got {value!r}."``
        ValueError: The same message, when it is not finite or out of bounds.
    """
    if (
        not is_number(value)
        or (minimum is not None and (value < minimum or (above and value == minimum)))
        or (maximum is not None and value > maximum)
    ):
        bound = _bound(minimum, above=above)
        if maximum is not None:
            bound += f" and <= {_shown(maximum)}" if bound else f" <= {_shown(maximum)}"
        right_type = isinstance(value, float) or is_integer(value)
        raise _error(owner, name, value, "a finite number", bound, hint, right_type)
    return float(value)


def checked_bool(owner: str, name: str, value: object) -> bool:
    """Returns ``value`` if it is ``True`` or ``False`` (not 0, 1 or a string).

    Raises:
        TypeError: ``"{owner}: {name} must be True or False, got {value!r}."``
    """
    if not isinstance(value, bool):
        raise _error(owner, name, value, "True or False", "", None, right_type=False)
    return value


def _bound(minimum: float | None, *, above: bool) -> str:
    if minimum is None:
        return ""
    return f" {'>' if above else '>='} {_shown(minimum)}"


def _shown(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def _error(
    owner: str,
    name: str,
    value: object,
    what: str,
    bound: str,
    hint: str | None,
    right_type: bool,
) -> ValueError | TypeError:
    """The option's error: a ``ValueError`` for a value of the right type, else a ``TypeError``."""
    shown = f" ({hint})" if hint else ""
    kind = ValueError if right_type else TypeError
    return kind(f"{owner}: {name} must be {what}{bound}{shown}, got {value!r}.")


def file_problem(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES) -> str | None:
    """What makes ``path`` no file to read whole (e.g. ``"file not found"``), or ``None`` for a
    regular file of at most ``max_bytes``."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return "file not found"
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return f"cannot be read ({getattr(exc, 'strerror', None) or type(exc).__name__})"
    if stat.S_ISDIR(status.st_mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(status.st_mode):
        return "not a regular file (a device, pipe or socket, which may never end or never answer)"
    if status.st_size > max_bytes:
        return f"{status.st_size:,} bytes, more than the limit of {max_bytes:,}"
    return None
