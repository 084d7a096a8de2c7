"""The telemetry logger (``agent_latency.telemetry``), its stand-in for Python's last-resort
handler, and the handler's once-per-kind report of its own failures."""

from __future__ import annotations

import logging
import os
import sys
import threading

logger = logging.getLogger("agent_latency.telemetry")


class WarningLineHandler(logging.Handler):
    """Prints WARNING and worse to stderr as Python's last resort does, each on a line of its
    own, while the application has configured no logging of its own.

    Python's last resort writes a warning right after whatever is on the line: after a streamed
    answer's first words (``Theslow first token: ...``) when stdout and stderr are one terminal.
    This handler starts a new line first when they are the same file. It stays silent while any
    other handler would take the record (the application's ``logging.basicConfig``, pytest).
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if _handled_elsewhere(record.name, self):
            return
        try:
            text = self.format(record)
            if _same_file(sys.stdout, sys.stderr):
                sys.stdout.flush()
                text = f"\n{text}"
            sys.stderr.write(f"{text}\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)

    @classmethod
    def install(cls) -> None:
        """Puts one on the ``agent_latency`` logger, unless one is there already."""
        package = logging.getLogger("agent_latency")
        if not any(isinstance(handler, cls) for handler in package.handlers):
            package.addHandler(cls())


def _handled_elsewhere(name: str, own: logging.Handler) -> bool:
    """Whether a handler other than ``own`` is on the logger ``name`` or those it propagates to."""
    log: logging.Logger | None = logging.getLogger(name)
    while log is not None:
        if any(handler is not own for handler in log.handlers):
            return True
        log = log.parent if log.propagate else None
    return False


def _same_file(first: object, second: object) -> bool:
    try:
        return os.path.sameopenfile(first.fileno(), second.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # no file behind it (StringIO, closed)
        return False


class FailureLog:
    """Logs a WARNING the first time a callback fails with a given exception type, DEBUG after.

    One per handler: a second handler's first failure of the same kind is reported too.
    """

    def __init__(self) -> None:
        self._reported: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def report(self, callback: str, exc: BaseException) -> None:
        """Logs that ``callback`` failed with ``exc`` (only its type loudly: the message may
        quote data)."""
        key = (callback, type(exc).__name__)
        with self._lock:
            first = key not in self._reported
            self._reported.add(key)
        if first:
            logger.warning(
                "agent-latency: %s failed with %s; the run goes on without this telemetry "
                "(details at DEBUG level)",
                callback,
                type(exc).__name__,
            )
        logger.debug("agent-latency: %s failed", callback, exc_info=exc)
