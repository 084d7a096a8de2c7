"""The signals that stop ``agent-latency bench``: Ctrl-C (SIGINT) and SIGTERM, taken alike.

Python turns Ctrl-C into ``KeyboardInterrupt``, which the bench catches to keep what it measured;
SIGTERM (``docker stop``, Kubernetes, ``timeout``) would kill the process with no output.
:func:`stopping_signals` makes both raise ``KeyboardInterrupt`` for the length of one command and
remembers which came first, so that the command keeps its results either way and exits as a
shell reports that signal (128 + its number). Only the first stops the run: a second, while
the run winds down and its results are written and printed, would cut them short (a traceback,
the partial results lost), so it is noted and ignored, as is one while a finished run's results
are written (:meth:`Stops.hold`). The previous handlers come back at the end: a program that
runs the bench as a library (``run_bench``) keeps its own.
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
        self._held = False

    @property
    def first(self) -> Stop | None:
        """The first signal taken, if one was."""
        return self._first

    @property
    def cause(self) -> Stop:
        """The first signal taken; Ctrl-C when none was (a ``KeyboardInterrupt`` from Python's
        own SIGINT handler, where this one could not be installed)."""
        return self._first or CTRL_C

    def taken(self) -> bool:
        """Whether a signal was taken."""
        return self._first is not None

    def hold(self) -> None:
        """From now on a signal is only noted: the results are being written and printed."""
        self._held = True

    def take(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: the first signal stops the run as Ctrl-C does, unless held."""
        stopping = self._first is not None or self._held
        if self._first is None:
            self._first = _STOPS[signal.Signals(signum)]
        if not stopping:
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
