"""The timing of one model call, worked out from clock readings alone (no spans, no metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TtftLevel = Literal["ok", "warn", "error"]


@dataclass(frozen=True, slots=True)
class CallTiming:
    """What the clock readings of a model call say.

    Attributes:
        total_ms: Milliseconds from start to end.
        ttft_ms: Milliseconds to the first content chunk; the total for a call that succeeded
            without streamed chunks (its first text came with the whole answer); ``None`` when
            the call failed before any content, or TTFT is not recorded.
        first_chunk_s: Seconds to the first content chunk, for the semantic-convention attribute
            and metric (streamed content only); ``None`` otherwise.
        mean_chunk_gap_s: The mean wait between content chunks after the first (2+ chunks).
        ttft_level: ``ttft_ms`` against the thresholds; for a call that failed or was
            cancelled before any content, its whole wait when that crossed one (its first token
            would have come later still); else ``None`` without a TTFT.
    """

    total_ms: float
    ttft_ms: float | None
    first_chunk_s: float | None
    mean_chunk_gap_s: float | None
    ttft_level: TtftLevel | None


def ttft_level(ttft_ms: float | None, warn_ms: float, error_ms: float) -> TtftLevel | None:
    """Returns ``"error"`` above ``error_ms``, ``"warn"`` above ``warn_ms``, else ``"ok"``."""
    if ttft_ms is None:
        return None
    if ttft_ms > error_ms:
        return "error"
    if ttft_ms > warn_ms:
        return "warn"
    return "ok"


def call_timing(
    *,
    started_ns: int,
    end_ns: int,
    first_chunk_ns: int | None,
    last_chunk_ns: int,
    chunks: int,
    failed: bool,
    gave_up: bool = False,
    record_ttft: bool,
    warn_ms: float,
    error_ms: float,
) -> CallTiming:
    """Works out a call's timing from its clock readings (nanoseconds of one monotonic clock);
    ``failed`` is a call that ended without an answer (failed, cancelled, abandoned),
    ``gave_up`` one that failed or was cancelled (not left by its consumer, whose waits are its
    own): its whole wait bounds a first token that never came."""
    total_ms = (end_ns - started_ns) / 1e6
    mean_gap_s = (
        (last_chunk_ns - first_chunk_ns) / (chunks - 1) / 1e9
        if first_chunk_ns is not None and chunks > 1
        else None
    )
    first_chunk_s: float | None = None
    ttft_ms: float | None = None
    if record_ttft and first_chunk_ns is not None:
        first_chunk_s = (first_chunk_ns - started_ns) / 1e9
        ttft_ms = first_chunk_s * 1e3
    elif record_ttft and not failed:
        ttft_ms = total_ms
    level = ttft_level(ttft_ms, warn_ms, error_ms)
    if record_ttft and ttft_ms is None and gave_up:
        waited = ttft_level(total_ms, warn_ms, error_ms)
        level = None if waited == "ok" else waited
    return CallTiming(
        total_ms=total_ms,
        ttft_ms=ttft_ms,
        first_chunk_s=first_chunk_s,
        mean_chunk_gap_s=mean_gap_s,
        ttft_level=level,
    )
