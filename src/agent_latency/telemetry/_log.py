"""The telemetry logger, and the handler's once-per-kind report of its own failures.

Every module of :mod:`agent_latency.telemetry` logs on ``agent_latency.telemetry`` (a child of
the package's ``agent_latency`` logger, so configuring that one covers it).
"""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("agent_latency.telemetry")


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
