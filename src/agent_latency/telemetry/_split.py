"""Where a call's time to first token went: the server's prefill, and the rest.

The client measures one number, the time to its first chunk. A server that says how long it
prefilled (llama.cpp's ``timings``) splits it: the server's prefill of the uncached prompt
tokens, and the remainder, spent in the client, on the network and in the server's queue. A
blocking call's first text comes with its whole answer, so its split has a third part: the
server's decode of that answer. Where the server says nothing, or says more than the client
waited, there is no split: absent, never wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

SPLIT_TOLERANCE: Final = 0.05
"""The server's parts may exceed the client's wait by this share (clocks and rounding) and no
more: a server reporting more time than the client waited is not believed."""

BUFFERED_MEAN_GAP_MS: Final = 1.0
"""Chunks closer together than this on average were released at once by a buffer: a server
streaming tokens one by one leaves at least this between them (1,000 tokens/s). LangChain's own
work between two chunks takes about 0.25 ms on a loaded machine (measured through
``ChatOpenAI.stream`` against the simulator's buffered stream), so the bound sits above that."""

MIN_JUDGED_CHUNKS: Final = 4
"""Fewer content chunks than this say nothing about buffering."""


@dataclass(frozen=True, slots=True)
class TtftSplit:
    """A call's time to first token in parts that add up to it.

    Attributes:
        ttft_ms: The time to first token the client measured (a blocking call's: its total).
        server_prefill_ms: How long the server says it prefilled.
        server_decode_ms: A blocking call's: how long the server says it generated the answer,
            which the first text waits for; ``None`` for a streamed call.
        remainder_ms: The rest: client, network and the server's queue (never below 0).
        prefilled_tokens: The prompt tokens the server prefilled, if it said.
    """

    ttft_ms: float
    server_prefill_ms: float
    server_decode_ms: float | None
    remainder_ms: float
    prefilled_tokens: int | None = None

    def describe(self) -> str:
        """The split in words: ``of 1,420 ms to the first token: 1,310 ms prefill of 1,845
        uncached tokens, 110 ms client, network and queue``."""
        tokens = self.prefilled_tokens
        prefilled = "" if tokens is None else f" of {tokens:,} uncached tokens"
        decode = self.server_decode_ms
        decoded = "" if decode is None else f", {decode:,.0f} ms decoding the answer"
        return (
            f"of {self.ttft_ms:,.0f} ms to the first token: {self.server_prefill_ms:,.0f} ms "
            f"prefill{prefilled}{decoded}, {self.remainder_ms:,.0f} ms client, network and queue"
        )


def split_ttft(
    ttft_ms: float | None,
    *,
    prefill_ms: float | None,
    decode_ms: float | None = None,
    prefilled_tokens: int | None = None,
    streamed: bool,
) -> TtftSplit | None:
    """Splits a call's time to first token by what the server reported about it.

    Args:
        ttft_ms: The time to first token measured, ``None`` when there is none.
        prefill_ms: How long the server says it prefilled (``ServerUsage.prefill_ms``).
        decode_ms: How long it says it generated the answer (``ServerUsage.decode_ms``).
        prefilled_tokens: The prompt tokens it prefilled (``ServerUsage.prefilled_tokens``).
        streamed: Whether the call streamed; a blocking call's split needs the decode time too.

    Returns:
        The split, or ``None`` when the server did not say enough or said more time than the
        client waited (more than :data:`SPLIT_TOLERANCE` over it).
    """
    if ttft_ms is None or prefill_ms is None:
        return None
    decode = None if streamed else decode_ms
    if not streamed and decode is None:
        return None
    server_ms = prefill_ms + (decode or 0.0)
    if server_ms > ttft_ms * (1 + SPLIT_TOLERANCE):
        return None
    return TtftSplit(ttft_ms, prefill_ms, decode, max(0.0, ttft_ms - server_ms), prefilled_tokens)


class SlowCause(Enum):
    """What held up a slow first token, as the chunks and the server tell it."""

    BUFFERED = "buffered"
    """The chunks arrived at once: the client or a proxy held the stream back."""
    QUEUE_OR_NETWORK = "queue_or_network"
    """Most of the wait was not the server's prefill: client, network or the server's queue."""
    PREFILL = "prefill"
    """Most of the wait was the server's prefill: the prompt's uncached tokens."""
    UNKNOWN = "unknown"
    """The server did not say how long it prefilled."""


def is_buffered(chunks: int, mean_chunk_gap_s: float | None) -> bool:
    """Whether a stream's chunks arrived in one burst (a mean gap under
    :data:`BUFFERED_MEAN_GAP_MS`, over at least :data:`MIN_JUDGED_CHUNKS` chunks).

    A server streaming faster than 1,000 tokens/s looks the same: :func:`held_back_ms` tells
    the two apart when the server says how long it decoded.
    """
    return (
        chunks >= MIN_JUDGED_CHUNKS
        and mean_chunk_gap_s is not None
        and mean_chunk_gap_s * 1e3 < BUFFERED_MEAN_GAP_MS
    )


def held_back_ms(
    chunks: int, mean_chunk_gap_s: float | None, server_decode_ms: float | None
) -> float | None:
    """How long a buffer held a stream's first chunk back, by the server's own decode time.

    A live stream's chunks arrive over about as long as the server took to generate them; a
    buffered one's all at once, its first chunk late by the rest of that time.

    Args:
        chunks: The stream's content chunks.
        mean_chunk_gap_s: The mean wait between them (``CallTiming.mean_chunk_gap_s``).
        server_decode_ms: How long the server says it generated the answer.

    Returns:
        The server's decode time less the time the chunks took to arrive (never below 0), or
        ``None`` when the server did not say or the stream had fewer than 2 chunks.
    """
    if server_decode_ms is None or mean_chunk_gap_s is None or chunks < 2:
        return None
    return max(0.0, server_decode_ms - mean_chunk_gap_s * 1e3 * (chunks - 1))


def slow_cause(split: TtftSplit | None, *, buffered: bool, held_ms: float | None) -> SlowCause:
    """What held up a first token: the largest of the server's part, a buffer's and the rest.

    Args:
        split: The call's split, if the server said enough for one.
        buffered: Whether the stream's chunks arrived in one burst (:func:`is_buffered`).
        held_ms: How long a buffer held the first chunk back (:func:`held_back_ms`), when the
            server said how long it decoded; without it a burst is taken for a buffer.
    """
    if split is None or held_ms is None:
        if buffered:
            return SlowCause.BUFFERED
        if split is None:
            return SlowCause.UNKNOWN
        held_ms = 0.0
    server_ms = split.server_prefill_ms + (split.server_decode_ms or 0.0)
    # A buffer's delay is part of the remainder: the first chunk cannot come before the last
    # token was generated, so a server decoding for longer than that is not believed past it.
    held_ms = min(held_ms, split.remainder_ms)
    rest_ms = split.remainder_ms - held_ms
    if held_ms > server_ms and held_ms > rest_ms:
        return SlowCause.BUFFERED
    if rest_ms > server_ms:
        return SlowCause.QUEUE_OR_NETWORK
    return SlowCause.PREFILL
