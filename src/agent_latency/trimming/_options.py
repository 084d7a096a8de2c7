"""Checks of the trimmer's options: each bad value gets an error naming the option and the fix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from agent_latency.config import PRIORITY_CLASSES, PriorityClass


def validated_int(name: str, value: object, minimum: int, hint: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(
            f"PriorityTrimmer: {name} must be an integer >= {minimum} ({hint}), got {value!r}."
        )
    return value


def validated_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"PriorityTrimmer: {name} must be True or False, got {value!r}.")
    return value


def validated_order(value: object) -> tuple[PriorityClass, ...]:
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or sorted(map(str, value)) != sorted(PRIORITY_CLASSES)
        or len(value) != len(PRIORITY_CLASSES)
    ):
        raise ValueError(
            f"PriorityTrimmer: priority_order must list each of {', '.join(PRIORITY_CLASSES)} "
            f"exactly once, highest priority first; got {value!r}."
        )
    return cast(tuple[PriorityClass, ...], tuple(value))
