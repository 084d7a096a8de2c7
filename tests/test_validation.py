"""The one rule for numbers: what counts as a whole or a finite number, and the error it gives."""

from __future__ import annotations

import math

import pytest

from agent_latency._validation import (
    checked_bool,
    checked_int,
    checked_number,
    is_integer,
    is_number,
)


@pytest.mark.parametrize("value", [0, -3, 10**30])
def test_whole_numbers(value: int) -> None:
    assert is_integer(value) and is_number(value)


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1]])
def test_not_whole_numbers(value: object) -> None:
    assert not is_integer(value)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, True, "2.5", None])
def test_not_numbers(value: object) -> None:
    assert not is_number(value)


def test_a_finite_float_is_a_number() -> None:
    assert is_number(2.5) and not is_integer(2.5)


def test_checked_int_names_the_owner_option_bound_and_hint() -> None:
    assert checked_int("Owner", "size", 3, minimum=1) == 3
    with pytest.raises(ValueError) as raised:
        checked_int("Owner", "size", 0, minimum=1, hint="rows; e.g. 4")
    assert str(raised.value) == "Owner: size must be an integer >= 1 (rows; e.g. 4), got 0."
    for wrong_type in (True, 3.0, "3"):  # as Python: a wrong type is a TypeError
        with pytest.raises(TypeError, match=r"must be an integer >= 1, got "):
            checked_int("Owner", "size", wrong_type, minimum=1)


def test_checked_number_bounds() -> None:
    assert checked_number("Owner", "rate", 1, minimum=0, maximum=1) == 1.0
    with pytest.raises(ValueError, match=r"rate must be a finite number >= 0 and <= 1 \("):
        checked_number("Owner", "rate", 1.5, minimum=0, maximum=1, hint="a probability")
    with pytest.raises(ValueError, match=r"wait must be a finite number > 0, got 0\."):
        checked_number("Owner", "wait", 0, minimum=0, above=True)
    with pytest.raises(ValueError, match=r"got inf\."):
        checked_number("Owner", "wait", math.inf)
    for wrong_type in (True, "0.5", None):
        with pytest.raises(TypeError, match=r"wait must be a finite number, got "):
            checked_number("Owner", "wait", wrong_type)
    assert checked_number("Owner", "wait", 0.25, minimum=0.25) == 0.25


@pytest.mark.parametrize("value", [1, 0, "yes", None])
def test_checked_bool_takes_only_true_or_false(value: object) -> None:
    assert checked_bool("Owner", "flag", True) is True
    with pytest.raises(TypeError, match=r"Owner: flag must be True or False, got "):
        checked_bool("Owner", "flag", value)
