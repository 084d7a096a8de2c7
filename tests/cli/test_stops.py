"""The bench command's signal handlers last as long as its block, and leave others' in place."""

from __future__ import annotations

import signal
from types import FrameType

import pytest

from agent_latency.cli._stops import CTRL_C, TERMINATED, stopping_signals


def own_handler(signum: int, frame: FrameType | None) -> None:
    """A program's own SIGTERM handler."""


def test_the_previous_handlers_come_back_and_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGTERM, own_handler)
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stopping_signals() as stops:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGTERM)
        assert stops.cause == TERMINATED
        assert signal.getsignal(signal.SIGTERM) is own_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, ignored)


def test_only_the_first_signal_stops_and_is_the_cause() -> None:
    with stopping_signals() as stops:
        assert stops.cause == CTRL_C  # a KeyboardInterrupt with no signal seen
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)  # the run is already stopping: only noted
    assert stops.cause == CTRL_C
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_held_run_notes_a_signal_without_stopping() -> None:
    with stopping_signals() as stops:
        stops.hold()
        signal.raise_signal(signal.SIGTERM)
    assert stops.cause == TERMINATED
