"""The signals that stop ``agent-latency bench``: Ctrl-C (SIGINT) and SIGTERM, taken alike.

Python turns Ctrl-C into ``KeyboardInterrupt``, which the bench catches to keep what it measured;
SIGTERM (``docker stop``, Kubernetes, ``timeout``) would kill the process with no output.
:func:`stopping_signals` makes both raise ``KeyboardInterrupt`` for the length of one command and
remembers which came first, so that the command keeps its results either way and exits as a
shell reports that signal (128 + its number). The previous handlers come back at the end: a
program that runs the bench as a library (``run_bench``) keeps its own.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final


@dataclass(frozen=True)
class Stop:
    """A signal that stopped the command.

    Attributes:
        said: What happened, for the command's notes, e.g. ``"terminated (SIGTERM)"``.
        exit_code: The exit status: the shell's for that signal.
    """

    said: str
    exit_code: int


CTRL_C: Final = Stop("interrupted (Ctrl-C)", 128 + signal.SIGINT)
TERMINATED: Final = Stop("terminated (SIGTERM)", 128 + signal.SIGTERM)
_STOPS: Final = {signal.SIGINT: CTRL_C, signal.SIGTERM: TERMINATED}


class Stops:
    """The first stopping signal of one command, as :func:`stopping_signals` saw it."""

    def __init__(self) -> None:
        self._first: Stop | None = None

    @property
    def cause(self) -> Stop:
        """The first signal taken; Ctrl-C when none was (a ``KeyboardInterrupt`` from Python's
        own SIGINT handler, where this one could not be installed)."""
        return self._first or CTRL_C

    def take(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: records the signal, then stops the run as Ctrl-C does."""
        if self._first is None:
            self._first = _STOPS[signal.Signals(signum)]
        raise KeyboardInterrupt


@contextlib.contextmanager
def stopping_signals() -> Iterator[Stops]:
    """Yields the stops of a block in which SIGINT and SIGTERM raise ``KeyboardInterrupt``.

    A signal ignored when the block starts (``nohup``, a background job) stays ignored. Only
    the main thread may set handlers: elsewhere the block changes nothing.
    """
    stops = Stops()
    previous: dict[signal.Signals, Any] = {}  # what signal.signal returned
    if threading.current_thread() is threading.main_thread():
        for signum in _STOPS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, stops.take)
    try:
        yield stops
    finally:
        for signum, handler in previous.items():
            # None: a handler not set from Python, which the default stands for.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
