"""Checks of the trimmer's options that numbers alone do not cover (see ``_validation``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from agent_latency.config import PRIORITY_CLASSES, PriorityClass


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
